"""Adaptive drafting against greedy on every benchmark prompt: does ``--adaptive`` ever lose?

For each prompt (decode_vs_hf.py's three and the demo prompts of greedy, beam and speculative mode; pld's is
decode_vs_hf's code edit), in one process on the embedded model: a warm-up of each variant, then ``--repeats``
rounds of greedy, speculative with the default draft at the default k (20), the same adaptive, and adaptive PLD, in
turn.
Prints each variant's speed-up over greedy: the ratio of median times, with the range (slowest to fastest
round against greedy's median). End-of-sequence stays on, as in the app.

    python benchmarks/adaptive_floor.py [--prompts summarise,open-ended] [--repeats 3] [--new-tokens 128]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from decode_vs_hf import PROMPTS, timed_run

from decode_tui.core.drafting.draft_models import load_draft
from decode_tui.core.model.embedded import pull
from decode_tui.core.model.loading import load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.params import DEFAULT_DRAFT, DEMO_PROMPTS, DecodeConfig, DraftParams

ALL = {**PROMPTS, **{f"demo-{mode}": DEMO_PROMPTS[mode] for mode in ("greedy", "beam", "speculative")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default=",".join(ALL))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    names = args.prompts.split(",")
    if unknown := set(names) - set(ALL):
        parser.error(f"unknown prompt(s) {', '.join(sorted(unknown))}; choose from {', '.join(ALL)}")
    pull("smollm2")
    lm = load_model(resolve("smollm2"))
    draft = load_draft(lm, DEFAULT_DRAFT)
    n = args.new_tokens
    variants: dict[str, tuple[DecodeConfig, Any]] = {
        "greedy": (DecodeConfig(mode="greedy", max_new_tokens=n), None),
        f"speculative k={DraftParams().num_draft_tokens}": (DecodeConfig(mode="speculative", max_new_tokens=n), draft),
        "speculative adaptive": (DecodeConfig(mode="speculative", max_new_tokens=n,
                                              draft=DraftParams(adaptive=True)), draft),
        "pld adaptive": (DecodeConfig(mode="pld", max_new_tokens=n, draft=DraftParams(adaptive=True)), None),
    }
    for name in names:
        prompt = ALL[name]
        for config, with_draft in variants.values():
            timed_run(lm, prompt, config, with_draft)
        times: dict[str, list[float]] = {v: [] for v in variants}
        for _ in range(args.repeats):
            for variant, (config, with_draft) in variants.items():
                final, seconds = timed_run(lm, prompt, config, with_draft)
                times[variant].append(seconds)
        base = statistics.median(times["greedy"])
        cells = [f"{v} {base / statistics.median(ts):.2f}x ({base / max(ts):.2f}-{base / min(ts):.2f})"
                 for v, ts in times.items() if v != "greedy"]
        print(f"{name:>16} ({final.new_tokens} tokens): " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
