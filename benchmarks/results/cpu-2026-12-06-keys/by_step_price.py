"""Recycle's cold story, process by process, beside the plain step's price each process measured: this session's
and the last's results folders (every ``open*.jsonl`` of ``cpu-2026-12-06-aligned`` and ``cpu-2026-12-06-graft``
whose recycle is the code's own, not a variant tried and dropped), sorted by that price.

    python benchmarks/results/cpu-2026-12-06-keys/by_step_price.py     # from the repository root
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent
SIDES = {"cpu-2026-12-06-aligned": ("open-1", "open-2", "open-control", "open-control-2"),
         "cpu-2026-12-06-graft": ("open-1", "open-control")}

if __name__ == "__main__":
    rows = []
    for folder, names in SIDES.items():
        for name in names:
            for line in (RESULTS / folder / f"{name}.jsonl").read_text().splitlines():
                row = json.loads(line)
                if row["mode"] == "recycle" and row["category"] == "open-ended writing":
                    step = row["prices_ms"]["1"]
                    ratios = {w: ms / step for w, ms in row["prices_ms"].items() if w in ("6", "8", "16")}
                    forwards = [run["target_forwards"] for run in row["runs"]]
                    rows.append((step, f"{folder}/{name}", row["priced_speedup"], forwards, ratios))
    for step, side, speedup, forwards, ratios in sorted(rows):
        widths = ", ".join(f"{w} positions {r:.2f}" for w, r in ratios.items())
        print(f"plain step {step:5.2f} ms: {speedup:.3f}x, forwards {forwards} ({widths} steps)  {side}")
