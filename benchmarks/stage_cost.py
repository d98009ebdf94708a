"""Benchmark: what the sampling stages and a grammar's mask cost, as a share of a greedy step.

The grammar: a greedy run constrained by a JSON schema on the embedded model (or ``--model``), with the time spent
in the grammar's processor (following the output, computing llguidance's mask, applying it) measured inside the
run, against the run's median step time (the gap between consecutive tokens, from the core's clock). The stages:
each new stage's processor and the figures the viewer shows for it (core/choosing/sampling.py ``stage_figures`` and the
step's draw) timed on the model's real next-token logits, against a plain greedy run's median step time: the
draw with the stage against the draw without it. Warm: one untimed round first, then ``--repeats`` rounds, the
cases alternated in each; medians with the range.

``overlap`` (for a GPU, where a step is a few milliseconds): constrained greedy with the next mask computed while
the forward pass runs (the default) against the mask computed in its call (``GrammarMask.ahead`` off, which
reads the ids back and waits for the pass first), and plain greedy: each one's median step time, and the ratio
of the two constrained ones per round, the order reversed every round.

    python benchmarks/stage_cost.py [--only grammar,stages,overlap] [--model smollm2] [--device auto]
                                    [--new-tokens 64] [--repeats 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch

from decode_tui.core.choosing.grammar import GrammarMask
from decode_tui.core.choosing.sampling import StageContext, draw, stage_processors, staged_scores
from decode_tui.core.model.loading import LoadedModel, load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.params import Constraint, DecodeConfig, SamplingParams
from decode_tui.core.record.events import TokenEmitted
from decode_tui.core.run import Run

PROMPT = "Describe a fictional person as JSON: their name, age, city, and three hobbies."
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"},
    "hobbies": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "age", "city", "hobbies"]}
# Each new stage at a value that makes it work, in a sampling step (the warpers) or a greedy one (the processors).
STAGES: dict[str, tuple[SamplingParams, bool]] = {
    "min_p": (SamplingParams(top_k=0, min_p=0.05), False),
    "typical_p": (SamplingParams(top_k=0, typical_p=0.9), False),
    "epsilon_cutoff": (SamplingParams(top_k=0, epsilon_cutoff=3e-4), False),
    "eta_cutoff": (SamplingParams(top_k=0, eta_cutoff=3e-4), False),
    "top_h": (SamplingParams(top_k=0, top_h=0.4), False),
    "no_repeat_ngram_size": (SamplingParams(no_repeat_ngram_size=3), True),
    "bad_words": (SamplingParams(bad_words=("sorry", "apologize")), True),
    "min_new_tokens": (SamplingParams(min_new_tokens=32), True),
}


def step_time(lm: LoadedModel, config: DecodeConfig) -> tuple[float, Run]:
    """A run's median step time, and the run (its stages' context)."""
    run = Run(lm, PROMPT, config)
    clock = [e.elapsed_s for e in run.events() if isinstance(e, TokenEmitted) and e.elapsed_s is not None]
    return statistics.median(b - a for a, b in itertools.pairwise(clock)), run


def grammar_share(lm: LoadedModel, config: DecodeConfig) -> float:
    """The time a constrained run spent in its grammar's processor, per step, over its median step time."""
    run = Run(lm, PROMPT, config)
    mask = run.stages.grammar
    assert isinstance(mask, GrammarMask)
    spent: list[float] = []

    ahead = [0.0]  # the time prepare() spent on the mask the next call applies

    class Timed(GrammarMask):
        # A step's mask in both its halves: prepare() computes it ahead where the loop allows, the call applies it.
        def prepare(self, output: list[int], device: torch.device, drafted: Sequence[int] = ()) -> None:
            started = time.perf_counter()
            super().prepare(output, device, drafted)
            ahead[0] = time.perf_counter() - started

        def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
            started = time.perf_counter()
            out = super().__call__(input_ids, scores)
            spent.append(time.perf_counter() - started + ahead[0])
            ahead[0] = 0.0
            return out

    mask.__class__ = Timed  # the run's own processor, timed where the strategy calls it
    clock = [e.elapsed_s for e in run.events() if isinstance(e, TokenEmitted) and e.elapsed_s is not None]
    step = statistics.median(b - a for a, b in itertools.pairwise(clock))
    return statistics.median(spent) / step


def stage_share(lm: LoadedModel, run: Run, logits: torch.Tensor, ids: torch.Tensor, name: str, step: float,
                calls: int = 50) -> float:
    """A step's draw with the stage against the draw without it, over the median greedy step time."""
    params, greedy = STAGES[name]
    base = SamplingParams(top_k=0) if not greedy else SamplingParams()
    context: StageContext = run.stages

    def once(p: SamplingParams) -> float:
        processors = stage_processors(p, greedy, context=context)
        started = time.perf_counter()
        for _ in range(calls):
            staged = staged_scores(processors, ids, logits)
            draw(staged, greedy, torch.Generator().manual_seed(0), 10, processors)
        return (time.perf_counter() - started) / calls

    return (once(params) - once(base)) / step


def overlap_round(lm: LoadedModel, plain: DecodeConfig, constrained: DecodeConfig, reverse: bool) -> dict[str, float]:
    """One round of the three runs (plain, the mask ahead, the mask in its call): each one's median step time."""
    cases = [("plain", plain, None), ("ahead", constrained, True), ("in_call", constrained, False)]
    steps = {}
    for name, config, ahead in reversed(cases) if reverse else cases:
        run = Run(lm, PROMPT, config)
        if ahead is not None:
            assert isinstance(run.stages.grammar, GrammarMask)
            run.stages.grammar.ahead = ahead
        clock = [e.elapsed_s for e in run.events() if isinstance(e, TokenEmitted) and e.elapsed_s is not None]
        steps[name] = statistics.median(b - a for a, b in itertools.pairwise(clock))
    return steps


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "low": min(values), "high": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="grammar,stages", help="comma-separated: grammar, stages, overlap")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the result to this file")
    args = parser.parse_args()
    only = set(args.only.split(","))
    lm = load_model(resolve(args.model), device=args.device)
    plain = DecodeConfig(max_new_tokens=args.new_tokens)
    constrained = DecodeConfig(max_new_tokens=args.new_tokens, constraint=Constraint("json_schema", json.dumps(SCHEMA)))
    result: dict[str, Any] = {
        "model": lm.name, "device": str(lm.device), "dtype": str(lm.dtype), "threads": torch.get_num_threads(),
        "new_tokens": args.new_tokens, "rounds": args.repeats}
    if "overlap" in only:
        rounds = [overlap_round(lm, plain, constrained, reverse=bool(i % 2)) for i in range(args.repeats + 1)][1:]
        result["overlap"] = {
            "step_ms": {name: spread([r[name] * 1e3 for r in rounds]) for name in ("plain", "ahead", "in_call")},
            "ahead_over_in_call": spread([r["ahead"] / r["in_call"] for r in rounds]),
            "ahead_over_plain": spread([r["ahead"] / r["plain"] for r in rounds])}
    if only & {"grammar", "stages"}:
        result.update(share_section(lm, plain, constrained, args.repeats, only))
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=1)


def share_section(lm: LoadedModel, plain: DecodeConfig, constrained: DecodeConfig, repeats: int,
                  only: set[str]) -> dict[str, Any]:
    """The grammar's processor and each new stage, as shares of a greedy step."""
    with torch.inference_mode():
        ids = torch.tensor([lm.encode_prompt(PROMPT, True)], device=lm.device)
        logits = lm.model(ids).logits[:, -1].float()
    grammar: list[float] = []
    stages: dict[str, list[float]] = {name: [] for name in STAGES}
    steps: list[float] = []
    for round_ in range(repeats + 1):  # the first round warms up and is not counted
        step, run = step_time(lm, plain)
        share = grammar_share(lm, constrained) if "grammar" in only else 0.0
        shares = {name: stage_share(lm, run, logits, ids, name, step) for name in STAGES} if "stages" in only else {}
        if round_:
            steps.append(step)
            grammar.append(share)
            for name, value in shares.items():
                stages[name].append(value)
    result: dict[str, Any] = {"greedy_step_ms": spread([s * 1e3 for s in steps])}
    if "grammar" in only:
        result["grammar_share_of_step"] = spread(grammar)
    if "stages" in only:
        result["stage_share_of_step"] = {name: spread(values) for name, values in stages.items()}
    return result


if __name__ == "__main__":
    main()
