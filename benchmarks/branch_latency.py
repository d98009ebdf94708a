"""Benchmark: how soon a branch shows its first new token, with and without the parent's KV cache.

A greedy run of ``--new-tokens`` tokens on the embedded model (or ``--model``); then a branch at
``--at`` (its runner-up forced there) decodes on. The figure is the time from starting the branch (the user's
choice) to its first decoded token after the forced one, in units of the parent run's median step time
(the gap between consecutive tokens, from the core's clock). "reused" is the app's way: the branch crops the
parent's cache where they part (core/execution/prefix_cache.py) and feeds the last kept token and the forced one;
"prefilled" feeds prompt + path from an empty cache, what a branch would cost without it. Warm runs: one
untimed round first, then ``--repeats`` rounds, the two kinds alternated in each; medians with the range.

    python benchmarks/branch_latency.py [--model smollm2] [--new-tokens 200] [--at 100] [--repeats 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import statistics
import time

import torch

from decode_tui.core.execution.model_state import state_of
from decode_tui.core.model.loading import LoadedModel, load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.params import DecodeConfig, SamplingParams
from decode_tui.core.record.events import TokenEmitted
from decode_tui.core.record.path import Path
from decode_tui.core.record.transcript import TokenStats
from decode_tui.core.run import Run

PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."


def parent_run(lm: LoadedModel, config: DecodeConfig) -> tuple[list[TokenEmitted], float]:
    tokens = [e for e in Run(lm, PROMPT, config).events() if isinstance(e, TokenEmitted)]
    clock = [t.elapsed_s for t in tokens if t.elapsed_s is not None]
    return tokens, statistics.median(b - a for a, b in itertools.pairwise(clock))


def figures(token: TokenEmitted) -> TokenStats:
    stats = TokenStats.of(token)
    assert stats is not None, "a run of this decode-tui gives every token its figures"
    return stats


def branch(lm: LoadedModel, config: DecodeConfig, parent: list[TokenEmitted], at: int, reuse: bool) -> float:
    """Seconds from starting the branch to its first token after the forced one."""
    with torch.inference_mode():
        ids = lm.encode_prompt(PROMPT, config.use_chat) + [t.token_id for t in parent[:at]]
        logits = lm.model(torch.tensor([ids], device=lm.device)).logits[0, -1]
    runner_up = int(torch.topk(logits, 2).indices[1])
    # As the app does: the kept tokens' figures from the parent's events, the picked candidate's from the
    # parent's raw distribution at that position (its candidates list).
    stats = tuple(figures(t) for t in parent[:at])
    forced_stats = (TokenStats(float(torch.log_softmax(logits.float(), -1)[runner_up]), figures(parent[at]).entropy,
                               2),)
    path = Path(kept=tuple(t.token_id for t in parent[:at]), kept_sources=tuple(t.source for t in parent[:at]),
                kept_stats=stats if reuse else (), forced=(runner_up,), branch=1, parent=0,
                forced_stats=forced_stats if reuse else ())
    if not reuse:

        state_of(lm.model).kept = None  # nothing kept: the branch prefills prompt + path
    started = time.perf_counter()
    for event in Run(lm, PROMPT, config, path=path).events():
        if isinstance(event, TokenEmitted) and event.index == at + 1:
            return time.perf_counter() - started
    raise RuntimeError("the branch ended before its first new token")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--new-tokens", type=int, default=200)
    parser.add_argument("--at", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    lm = load_model(resolve(args.model), device="auto", dtype="auto")
    lm = dataclasses.replace(lm, eos_token_ids=frozenset())  # the run goes the whole length
    config = DecodeConfig(mode="greedy", max_new_tokens=args.new_tokens, sampling=SamplingParams())
    results: dict[str, list[float]] = {"reused": [], "prefilled": []}
    for round_ in range(args.repeats + 1):
        order = ["reused", "prefilled"] if round_ % 2 == 0 else ["prefilled", "reused"]
        for kind in order:
            parent, step = parent_run(lm, config)
            seconds = branch(lm, config, parent, args.at, reuse=kind == "reused")
            if round_:  # the first round warms up
                results[kind].append(seconds / step)
    prompt_len = len(lm.encode_prompt(PROMPT, config.use_chat))
    print(f"{lm.name} on {lm.device.type} ({torch.get_num_threads()} threads), prompt {prompt_len} tokens, "
          f"branch at token {args.at} of {args.new_tokens}, {args.repeats} warm rounds alternated")
    for kind, values in results.items():
        print(f"  {kind:9}: first new token after {statistics.median(values):.2f} step times "
              f"(range {min(values):.2f}-{max(values):.2f})")
    assert all(math.isfinite(v) for vs in results.values() for v in vs)


if __name__ == "__main__":
    main()
