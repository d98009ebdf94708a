"""The floor table: does any drafting mode, by default, fall under 0.95x greedy on a prompt of a prompt set?

Reads the JSON lines of ``decode-tui bench --prompts FILE --format json`` (rows with ``round_speedups``: each
round's ratio over greedy's run of the same round) and prints, as a Markdown table, per prompt and mode the median
of the rounds' own ratios with a 90 % bootstrap interval (the rounds resampled 10,000 times with a fixed seed), a
verdict against the floor and the tokens kept a target forward (of the last run):

- ``holds``: the interval's low end is at or above the floor;
- ``under``: its high end is under the floor (the mode lost, beyond this machine's noise);
- ``open``: the interval holds the floor (these rounds cannot tell; more rounds can).

Then, per mode, the median over the prompts, the lowest prompt and the count of each verdict. Rows of
``benchmarks/floor_control.py`` carry a negative control, ``greedy (again)``: greedy's work timed as a mode, whose
interval shows what these rounds can resolve on each prompt.

    python benchmarks/floor_table.py RESULTS.json [MORE.json ...] [--floor 0.95] [--bracket]

Several files are pooled per prompt and mode (their rounds put together), for a second run of the prompts that
stayed open.

``--bracket`` (rows with the control only) judges each drafting mode against both of a round's greedy runs: its
tok/s over the geometric mean of greedy's and the control's in the same round. The protocol puts those two at the
two ends of every round (ABC...Z, Z...CBA), so a drift in the machine's speed within a round falls on both sides of
every mode alike, and the baseline's own noise is halved in the log. Without it, a round's ratio carries the noise
of greedy's one run in full: every mode's ratios move together round by round, the control's with them. The
control's column stays its plain ratio over greedy, the noise gauge.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

# The negative control first where there is one (benchmarks/floor_control.py: greedy timed again under another name)
CONTROL = "greedy (again)"
DRAFTING = [CONTROL, "speculative", "pld", "suffix", "recycle", "lookahead"]


def interval(ratios: list[float], draws: int = 10_000, level: float = 0.90) -> tuple[float, float]:
    """The ``level`` bootstrap interval of the median of ``ratios`` (percentile method, a fixed seed)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    cut = (1 - level) / 2
    return medians[int(cut * draws)], medians[int((1 - cut) * draws) - 1]


def verdict(low: float, high: float, floor: float) -> str:
    return "holds" if low >= floor else "under" if high < floor else "open"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--floor", type=float, default=0.95)
    parser.add_argument("--bracket", action="store_true", help="judge the modes against both greedy runs a round")
    args = parser.parse_args()
    cells: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for path in args.files:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            cells[(row["prompt"], row["mode"])].append(row)
    prompts = list(dict.fromkeys(p for p, _ in cells))
    if args.bracket:
        for prompt in prompts:
            rounds = {m: sum(len(row["round_speedups"]) for row in cells[(prompt, m)]) for p, m in cells if p == prompt}
            if any(n != rounds.get(CONTROL) for n in rounds.values()):
                parser.error(f"--bracket needs the control's rounds beside every mode's: {rounds} on {prompt[:40]!r}")
    modes = [m for m in DRAFTING if any((p, m) in cells for p in prompts)]
    print("| prompt (tokens) | " + " | ".join(modes) + " | greedy's text |")
    print("|---" * (len(modes) + 2) + "|")
    tally: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for prompt in prompts:
        greedy = cells[(prompt, "greedy")][0]
        texts = []
        line = [f"{greedy.get('category', '')}: {prompt.splitlines()[-1][:40]} ({greedy['new_tokens']})"]
        for mode in modes:
            rows = cells.get((prompt, mode))
            if not rows:
                line.append("-")
                continue
            ratios = [r for row in rows for r in row["round_speedups"]]
            if args.bracket and mode != CONTROL:
                control = [r for row in cells[(prompt, CONTROL)] for r in row["round_speedups"]]
                ratios = [r / math.sqrt(c) for r, c in zip(ratios, control, strict=True)]
            median = statistics.median(ratios)
            low, high = interval(ratios)
            said = verdict(low, high, args.floor)
            tally[mode].append((median, said))
            texts.append(all(row["identical"] for row in rows))
            line.append(f"{median:.2f}x [{low:.2f}-{high:.2f}] " + (f"**{said}**" if said == "under" else said)
                        + f", {rows[-1]['tokens_per_forward']:.2f}/fwd")
        line.append("yes" if all(texts) else "NO")
        print("| " + " | ".join(line) + " |")
    print()
    for mode in modes:
        medians = [m for m, _ in tally[mode]]
        counts = {v: sum(1 for _, said in tally[mode] if said == v) for v in ("holds", "open", "under")}
        print(f"{mode}: median over the prompts {statistics.median(medians):.2f}x, lowest {min(medians):.2f}x; "
              + ", ".join(f"{v} {n}" for v, n in counts.items()))


if __name__ == "__main__":
    main()
