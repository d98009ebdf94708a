"""Prompt lookup and suffix drafting against greedy, fixed and adaptive: does drafting by default ever lose?

Issue 65's targets for the default (the cost-aware policy, ``--adaptive``): pld and suffix each at 0.95x greedy or
better on open-ended prompts (a story, a poem, how-to tips), and no loss where copying pays (the code edit, the
summary). For each prompt, in one process on the embedded model: a warm-up of each variant, then ``--repeats``
rounds of greedy, pld, pld adaptive, suffix and suffix adaptive, in turn. Prints each variant's speed-up over
greedy: the ratio of median times, with the range (its slowest and fastest round against greedy's median); with
``--out``, every round's seconds as JSON too.

    python benchmarks/drafting_default.py [--prompts story,poem] [--repeats 5] [--new-tokens 64] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from decode_vs_hf import PROMPTS, timed_run

from decode_tui.core.model.embedded import pull
from decode_tui.core.model.loading import load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.params import DecodeConfig, DraftParams

ALL = {
    "story": PROMPTS["open-ended"],
    "poem": "Write a poem of eight lines about the sea at night.",
    "how-to": "Give me five tips for keeping a small vegetable garden healthy through a dry summer.",
    "code-edit": PROMPTS["code-edit"],
    "summarise": PROMPTS["summarise"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default=",".join(ALL))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    pull("smollm2")
    lm = load_model(resolve("smollm2"))
    n = args.new_tokens
    variants = {
        "greedy": DecodeConfig(mode="greedy", max_new_tokens=n),
        "pld": DecodeConfig(mode="pld", max_new_tokens=n),
        "pld adaptive": DecodeConfig(mode="pld", max_new_tokens=n, draft=DraftParams(adaptive=True)),
        "suffix": DecodeConfig(mode="suffix", max_new_tokens=n),
        "suffix adaptive": DecodeConfig(mode="suffix", max_new_tokens=n, draft=DraftParams(adaptive=True)),
    }
    results: dict[str, dict[str, list[float]]] = {}
    for name in args.prompts.split(","):
        prompt = ALL[name]
        for config in variants.values():
            timed_run(lm, prompt, config)
        times: dict[str, list[float]] = {v: [] for v in variants}
        forwards: dict[str, int] = {}
        for _ in range(args.repeats):
            for variant, config in variants.items():
                final, seconds = timed_run(lm, prompt, config)
                times[variant].append(seconds)
                forwards[variant] = final.target_forwards
        base = statistics.median(times["greedy"])
        cells = [f"{v} {base / statistics.median(ts):.2f}x ({base / max(ts):.2f}-{base / min(ts):.2f}, "
                 f"{forwards[v]} fwd)" for v, ts in times.items() if v != "greedy"]
        print(f"{name:>10} ({final.new_tokens} tokens, greedy {forwards['greedy']} fwd): " + "  ".join(cells),
              flush=True)
        results[name] = times
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
