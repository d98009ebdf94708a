"""Benchmark: draft trees against chains, and suffix drafting on a task seen before.

Two parts, on the embedded model, each by the project's protocol (a warm-up of every side, then ``--repeats``
rounds with the order reversed from one round to the next; a speed-up is the median of the rounds' ratios over
greedy, printed with its lowest and highest):

1. ``prompts``: on pld_vs_hf.py's input-grounded prompts (and its open-ended control), greedy, chain PLD
   (``--num-pred-tokens 10``: verifications of at most 10 drafted tokens), tree PLD at the same budget (at most
   10 drafted nodes a verification, ``--tree-budget 10``) and at ``--tree-budgets`` (by default 10 and 15, a
   CPU's budget; 63 is a GPU's: core/execution/tree_budget.py's CANDIDATES), and suffix
   drafting with no history (fixed, and with ``--adaptive``). Tokens per target forward are deterministic
   (greedy): they are reported once.
2. ``repeat``: a first greedy run of a task, then its second run (the same prompt) and a similar task's run, each
   with suffix drafting from the first run's output (``--history``), and with ``--adaptive``. Every measured run
   drafts from the same history, the first run's output alone: no measured run learns from another.

Every drafted run is checked to emit greedy's tokens; where one parts (in bfloat16 a verification's wider forward
can flip a near-tie), the token it parts at is printed and kept with its row.

    python benchmarks/trees.py [--repeats 3] [--new-tokens 96] [--part prompts,repeat] [--only open-ended]
                               [--device cuda --dtype bfloat16] [--tree-budgets 10,63]
                               [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from decode_vs_hf import machine  # run as a script: benchmarks/ is on the path
from pld_vs_hf import PROMPTS

from decode_tui.core.drafting.suffix_drafting import SuffixHistory
from decode_tui.core.model.embedded import pull
from decode_tui.core.model.loading import LoadedModel, load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.modes import CODE_EDIT_PROMPT
from decode_tui.core.params import DecodeConfig, DraftParams
from decode_tui.core.record.events import Finished
from decode_tui.core.run import Run

# A task and one like it: what a pipeline runs again with small changes (the second's output shares most of its
# text with the first's).
SIMILAR = {
    "function": ("Write a Python function `is_prime(n)` that returns whether n is a prime number. Include a "
                 "docstring and type hints, and nothing else.",
                 "Write a Python function `is_even(n)` that returns whether n is an even number. Include a "
                 "docstring and type hints, and nothing else."),
    "code edit": (CODE_EDIT_PROMPT, CODE_EDIT_PROMPT.replace("rename the variable `total` to `running_sum`",
                                                             "rename the variable `count` to `n_items`")),
    "story": (PROMPTS["open-ended"],
              "Write a short story about a lighthouse keeper who finds a letter in a bottle."),
}


def timed(lm: LoadedModel, prompt: str, config: DecodeConfig, history: SuffixHistory | None = None,
          ) -> tuple[Finished, float]:
    started = time.perf_counter()
    final = None
    for event in Run(lm, prompt, config, history=history).events():
        final = event
    assert isinstance(final, Finished)
    return final, time.perf_counter() - started


Sides = dict[str, tuple[DecodeConfig, SuffixHistory | None]]


def measure(lm: LoadedModel, prompt: str, sides: Sides, repeats: int) -> dict[str, Any]:
    """Each side's speed-up over the first (greedy), alternated, and its tokens per forward; checks each side's
    tokens against the first's."""
    finals = {name: timed(lm, prompt, config, history)[0] for name, (config, history) in sides.items()}  # warm-up
    names = list(sides)
    expected = finals[names[0]].token_ids
    parted = {name: next((i for i, (a, b) in enumerate(zip(final.token_ids, expected, strict=False)) if a != b),
                         min(len(final.token_ids), len(expected)))
              for name, final in finals.items() if final.token_ids != expected}
    for name, at in parted.items():  # in bfloat16 a wider forward can flip a near-tie: said, and measured anyway
        print(f"  {name} parted from greedy at token {at}", flush=True)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeats):
        for name in names if i % 2 == 0 else reversed(names):
            config, history = sides[name]
            times[name].append(timed(lm, prompt, config, history)[1])
    base = times[names[0]]
    out: dict[str, Any] = {"new_tokens": finals[names[0]].new_tokens}
    for name in names:
        ratios = [b / t for b, t in zip(base, times[name], strict=True)]
        final = finals[name]
        out[name] = {"speedup": round(statistics.median(ratios), 3), "range": [round(min(ratios), 3),
                                                                                 round(max(ratios), 3)],
                     "target_forwards": final.target_forwards,
                     "tokens_per_forward": round(final.new_tokens / final.target_forwards, 2),
                     "median_s": round(statistics.median(times[name]), 3), "parted_at": parted.get(name)}
    return out


def show(title: str, row: dict[str, Any]) -> None:
    sides = "; ".join(f"{name} {v['speedup']:.2f}x ({v['range'][0]:.2f}-{v['range'][1]:.2f}), "
                      f"{v['tokens_per_forward']:.2f} tok/fwd" for name, v in row.items() if isinstance(v, dict))
    print(f"{title} ({row['new_tokens']} tokens): {sides}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--part", default="prompts,repeat")
    parser.add_argument("--only", help="comma-separated prompt names (the prompts part)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tree-budgets", default="10,15",
                        help="tree PLD's budgets beside the chain's 10 (15 is a CPU's, 63 a GPU's)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pull("smollm2")
    lm = load_model(resolve("smollm2"), device=args.device, dtype=args.dtype)
    n = args.new_tokens
    greedy = DecodeConfig(mode="greedy", max_new_tokens=n)
    results: dict[str, Any] = {"machine": machine(), "repeats": args.repeats,
                               "protocol": "warm-up each side, then rounds alternated (reversed every other round); "
                                           "speed-up = median of the rounds' ratios over greedy", "prompts": {},
                               "repeat": {}}
    parts = args.part.split(",")

    def save() -> None:  # after every row: a run stopped at its time limit keeps what it measured
        if args.json:
            args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    if "prompts" in parts:
        sides: Sides = {"greedy": (greedy, None), "chain pld": (DecodeConfig(mode="pld", max_new_tokens=n), None)}
        for budget in (int(b) for b in args.tree_budgets.split(",")):
            sides[f"tree pld {budget}"] = (DecodeConfig(mode="pld", max_new_tokens=n,
                                                        draft=DraftParams(tree_budget=budget)), None)
        sides["suffix"] = (DecodeConfig(mode="suffix", max_new_tokens=n), None)
        sides["suffix adaptive"] = (DecodeConfig(mode="suffix", max_new_tokens=n, draft=DraftParams(adaptive=True)),
                                    None)
        only = args.only.split(",") if args.only else list(PROMPTS)
        for name, prompt in PROMPTS.items():
            if name not in only:
                continue
            results["prompts"][name] = row = measure(lm, prompt, sides, args.repeats)
            show(name, row)
            save()
    if "repeat" in parts:
        for name, (first_prompt, similar_prompt) in SIMILAR.items():
            first, _ = timed(lm, first_prompt, greedy)
            history = SuffixHistory()
            history.add(first.token_ids, "the first run")
            suffix = DecodeConfig(mode="suffix", max_new_tokens=n)
            adaptive = DecodeConfig(mode="suffix", max_new_tokens=n, draft=DraftParams(adaptive=True))
            for label, prompt in (("second run", first_prompt), ("similar task", similar_prompt)):
                again: Sides = {"greedy": (greedy, None), "suffix": (suffix, history),
                                "suffix adaptive": (adaptive, history), "suffix, no history": (suffix, None)}
                results["repeat"][f"{name}: {label}"] = row = measure(lm, prompt, again, args.repeats)
                show(f"{name}: {label}", row)
                save()
    save()


if __name__ == "__main__":
    main()
