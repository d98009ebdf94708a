"""What recycle's warm runs at db86ea1 (``../cpu-2026-12-06-graft/warm-1.jsonl``) gained by their forwards alone:
greedy's forwards over recycle's, each at the widths' prices that process measured, beside the priced speed-up (the
forwards and the host's time) and each mode's host share.

    python benchmarks/results/cpu-2026-12-06-keys/ceiling.py     # from the repository root
"""

from __future__ import annotations

import json
from pathlib import Path

RUNS = Path(__file__).resolve().parent.parent / "cpu-2026-12-06-graft" / "warm-1.jsonl"

if __name__ == "__main__":
    rows = [json.loads(line) for line in RUNS.read_text().splitlines()]
    for greedy, recycle in zip(rows[0::2], rows[1::2], strict=True):
        prices = {int(w): ms for w, ms in recycle["prices_ms"].items()}
        plain = sum(prices[int(w)] * n for w, n in greedy["runs"][0]["widths"].items())
        for run in recycle["runs"]:
            forwards = sum(prices[int(w)] * n for w, n in run["widths"].items())
            print(f"{recycle['category']:>18}: forwards alone {plain / forwards:.3f}x, "
                  f"priced {run['priced_speedup']:.3f}x; host share {recycle['host_share']:.3f} "
                  f"(greedy's {greedy['host_share']:.3f})")
