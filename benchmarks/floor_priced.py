"""The floor by accounting: what each drafting mode's run paid over greedy's, forward by forward, priced.

On a shared 2-core machine a wall-clock ratio near 1.00x moves by about 0.1x from round to round (BENCHMARKS.md,
"The floor where nothing can be copied": the negative control, greedy timed against greedy, spreads as widely), so
whether a mode that keeps almost nothing is at 0.95x or 0.98x cannot be read off the clock without hours of rounds.
But such a run differs from greedy's only in what it adds: its target forwards are greedy's plus a few wider ones
(probes, a first tree), and its host work (lookups, the matrix, the window) sits between them. Both are measured
here, apart:

- every target forward of a run is recorded with the positions it fed (a forward hook on the model: the padded
  width, as it ran), and every draft-model forward likewise;
- each width seen is then timed on its own, in turn with the others, ``--price-rounds`` times after the prompt's
  context, and priced at its median: the price of a width is the model's and the machine's, not the mode's;
- a run's host time is its wall time less the time its forwards took, measured in the same run (so the forwards'
  own noise cancels out of it); it is small, and so is its noise.

A mode's priced cost is the sum of its forwards' prices, its draft forwards' measured time and its host time, and
its priced speed-up is greedy's priced cost over it (the same tokens: each row says whether the text is greedy's).
The wall-clock ratio of the same single runs is printed beside it, for reference only.

    python benchmarks/floor_priced.py PROMPTS.jsonl OUT.jsonl [--max-new-tokens 96] [--runs 2] [--price-rounds 12]
        [--hog] [--recycle-state FILE] [--dtype auto|float32|bfloat16|float16]
    python benchmarks/floor_priced.py --table OUT.jsonl      # its rows as BENCHMARKS.md's table

``--runs``: runs of each mode a prompt, alternated; each priced on its own, the median kept, the range beside it;
greedy's own range is what the accounting can resolve. ``--hog`` runs a busy-looping Python process beside it (a
CPU hog on one of this machine's two cores), ended with the run: the widths are then priced under it too.
``--recycle-state``: token recycling's runs each start from that matrix (a warm one, from earlier runs), not empty.

What the accounting cannot see: a mode's effect on its forwards' own speed (its host work evicting the weights from
a cache, say) is priced as greedy's; the wall-clock ratios beside it are where such an effect would show.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from decode_tui.cli.flags import DtypeChoice, ModeChoice
from decode_tui.cli.loads import load_models, with_draft_model
from decode_tui.cli.measure import read_prompts
from decode_tui.cli.options import DecodingOptions
from decode_tui.core.execution.forward import new_cache, rollback
from decode_tui.core.model.loading import encode_prompt
from decode_tui.core.record.events import Finished
from decode_tui.core.run import Run
from decode_tui.core.warmup import warm_up

MODES = ("greedy", "speculative", "pld", "suffix", "recycle", "lookahead")


class Forwards:
    """Every forward of ``module`` while recording: the positions it fed and its seconds."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.calls: list[tuple[int, float]] = []
        self.recording = False
        self._started = 0.0
        self._width = 0
        module.register_forward_pre_hook(self._before, with_kwargs=True)
        module.register_forward_hook(self._after)

    def _before(self, _: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        self._width = int(ids.shape[-1]) if isinstance(ids, torch.Tensor) else 0
        self._started = time.perf_counter()

    def _after(self, *_: Any) -> None:
        if self.recording:
            self.calls.append((self._width, time.perf_counter() - self._started))


def priced_widths(model: Any, context: int, widths: set[int], rounds: int) -> dict[int, float]:
    """Median seconds of a forward of each of ``widths`` positions after ``context`` cached ones, the widths in
    turn (a drift falls on all alike), after one round that warms up."""
    cache = new_cache(model, rollback=True)
    ids = torch.randint(0, model.config.vocab_size, (1, context + max(widths)))
    samples: dict[int, list[float]] = {w: [] for w in widths}
    order = sorted(widths)
    with torch.inference_mode():
        model(input_ids=ids[:, :context], cache=cache, use_cache=True, logits_to_keep=1)
        for r in range(rounds + 1):
            for w in order if r % 2 == 0 else reversed(order):
                started = time.perf_counter()
                model(input_ids=ids[:, context : context + w], cache=cache, use_cache=True, logits_to_keep=w)
                if r:
                    samples[w].append(time.perf_counter() - started)
                rollback(cache, context)
    return {w: statistics.median(s) for w, s in samples.items()}


def host_s(run: dict[str, Any]) -> float:
    """A run's host time: its wall time less every forward's, the target's and the draft model's."""
    return float(run["wall_s"] - run["forward_s"] - run["draft_s"])


def cost(run: dict[str, Any], prices: dict[int, float]) -> float:
    """A run's priced seconds: its target forwards at their widths' prices (the prefill left out, as every mode's
    is the same), its draft forwards as measured, and its host time."""
    return float(sum(prices[w] for w in run["widths"][1:]) + run["draft_s"] + host_s(run))


def timed_runs(lm: Any, draft: Any, prompt: str, configs: dict[str, Any], runs: int, target: Forwards,
               drafts: Forwards | None, said: Any) -> dict[str, list[dict[str, Any]]]:
    """``runs`` runs of every config, alternated (ABC, CBA, ...), each with its forwards recorded."""
    recorded: dict[str, list[dict[str, Any]]] = {m: [] for m in configs}
    recorders = [target, *([drafts] if drafts is not None else [])]
    names = list(configs)
    for r in range(runs):
        for mode in names if r % 2 == 0 else reversed(names):
            said(f"run {r + 1} of {runs}: {mode}")
            for recorder in recorders:
                recorder.calls.clear()
                recorder.recording = True
            started = time.perf_counter()
            finished = None
            for event in Run(lm, prompt, configs[mode], draft).events():
                finished = event
            wall = time.perf_counter() - started
            for recorder in recorders:
                recorder.recording = False
            assert isinstance(finished, Finished)
            draft_calls = drafts.calls if drafts is not None else []
            recorded[mode].append({
                "wall_s": wall, "token_ids": list(finished.token_ids),
                "widths": [w for w, _ in target.calls], "forward_s": sum(s for _, s in target.calls),
                "draft_s": sum(s for _, s in draft_calls), "draft_forwards": len(draft_calls)})
    return recorded


def rows(runs: dict[str, list[dict[str, Any]]], prices: dict[int, float]) -> list[dict[str, Any]]:
    """Each mode's priced speed-up over greedy (median and range over its runs), the wall-clock one of the same
    runs, its forwards by width and its host share."""
    greedy_cost = statistics.median(cost(run, prices) for run in runs["greedy"])
    greedy_walls = [run["wall_s"] for run in runs["greedy"]]
    greedy_tokens = runs["greedy"][0]["token_ids"]
    out = []
    for mode, recorded in runs.items():
        priced = [greedy_cost / cost(run, prices) for run in recorded]
        walled = [g / run["wall_s"] for g, run in zip(greedy_walls, recorded, strict=True)]
        last = recorded[-1]
        out.append({
            "mode": mode, "priced_speedup": statistics.median(priced), "priced_low": min(priced),
            "priced_high": max(priced), "wall_speedup": statistics.median(walled),
            "target_forwards": len(last["widths"]), "widths": dict(sorted(Counter(last["widths"][1:]).items())),
            "draft_forwards": last["draft_forwards"],
            "host_share": statistics.median(host_s(run) / run["wall_s"] for run in recorded),
            "new_tokens": len(last["token_ids"]), "identical": last["token_ids"] == greedy_tokens,
            "prices_ms": {w: round(1e3 * p, 2) for w, p in sorted(prices.items())},
            # Each run's own figure and forwards: the policy decides from measured times, so runs may differ.
            "runs": [{"priced_speedup": p, "wall_speedup": w, "target_forwards": len(run["widths"]),
                      "widths": dict(sorted(Counter(run["widths"][1:]).items()))}
                     for p, w, run in zip(priced, walled, recorded, strict=True)]})
    return out


def table(results: list[dict[str, Any]]) -> str:
    """A row a prompt, a column a mode: the priced speed-up (its range), the wall-clock one of the same runs, and
    the target forwards, with whether every mode gave greedy's text."""
    modes = list(dict.fromkeys(r["mode"] for r in results))
    prompts = list(dict.fromkeys(r["prompt"] for r in results))
    lines = ["| prompt (tokens) | " + " | ".join(modes) + " | greedy's text |",
             "|---|" + "---|" * (len(modes) + 1)]
    for prompt in prompts:
        by_mode = {r["mode"]: r for r in results if r["prompt"] == prompt}
        greedy = by_mode["greedy"]
        cells = [f"{r['priced_speedup']:.3f}x [{r['priced_low']:.3f}-{r['priced_high']:.3f}], wall "
                 f"{r['wall_speedup']:.2f}x, {r['target_forwards']} fwd" for r in (by_mode[m] for m in modes)]
        same = "yes" if all(r["identical"] for r in by_mode.values()) else "no"
        lines.append(f"| {greedy['category']}: {prompt.split(chr(10))[-1][:28]}... ({greedy['new_tokens']}) | "
                     + " | ".join(cells) + f" | {same} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prompts", type=Path, nargs="?")
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--table", type=Path, help="print a results file's rows as a markdown table, and stop")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--price-rounds", type=int, default=12)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--hog", action="store_true")
    parser.add_argument("--dtype", choices=[c.value for c in DtypeChoice], default="auto")
    parser.add_argument("--recycle-state", type=Path, help="recycle: every run starts from this matrix file (never "
                        "written back) instead of an empty matrix")
    args = parser.parse_args()
    if args.table is not None:
        print(table([json.loads(line) for line in args.table.read_text(encoding="utf-8").splitlines() if line]))
        return
    if args.prompts is None or args.out is None:
        parser.error("PROMPTS and OUT are needed to measure (or --table RESULTS to print one)")
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hog else None
    try:
        measure(args)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


def measure(args: argparse.Namespace) -> None:
    """Every prompt of ``args.prompts``: every mode's runs, their widths priced, a row each into ``args.out``."""
    prompts = read_prompts(args.prompts)
    options = DecodingOptions(max_new_tokens=args.max_new_tokens, recycle_state=args.recycle_state,
                              dtype=DtypeChoice(args.dtype))
    configs = {m: options.for_mode(ModeChoice(m)).config() for m in args.modes.split(",")}
    # Each run starts from the same drafting state, as bench's do (a cold matrix unless --recycle-state, no history).
    configs = {m: dataclasses.replace(c, draft=c.draft.repeatable()) for m, c in configs.items()}
    lm, draft = load_models(options, max((p for _, p in prompts), key=len), configs["greedy"],
                            with_draft_model(*configs.values()))
    target = Forwards(lm.model)
    drafts = Forwards(draft.model) if draft is not None else None
    with args.out.open("w", encoding="utf-8") as out:
        for i, (category, prompt) in enumerate(prompts, 1):
            def said(line: str, i: int = i) -> None:
                print(f"prompt {i} of {len(prompts)}: {line}", file=sys.stderr, flush=True)

            for config in configs.values():
                warm_up(lm, prompt, config, draft)
            runs = timed_runs(lm, draft, prompt, configs, args.runs, target, drafts, said)
            # Attention reads the context: the widths are priced halfway through the answer.
            context = len(encode_prompt(lm.tokenizer, prompt, configs["greedy"].use_chat)) + args.max_new_tokens // 2
            widths = {w for recorded in runs.values() for run in recorded for w in run["widths"][1:]}
            prices = priced_widths(lm.model, context, widths, args.price_rounds)
            for row in rows(runs, prices):
                out.write(json.dumps({"category": category, "prompt": prompt, "context": context, "hog": args.hog,
                                      "dtype": str(lm.dtype).removeprefix("torch."),
                                      "threads": torch.get_num_threads(), **row}) + "\n")
                said(f"{row['mode']:12} priced {row['priced_speedup']:.3f}x ({row['priced_low']:.3f}-"
                     f"{row['priced_high']:.3f}), wall {row['wall_speedup']:.2f}x, {row['target_forwards']} "
                     f"forwards {row['widths']}, host {row['host_share']:.1%}")
            out.flush()


if __name__ == "__main__":
    main()
