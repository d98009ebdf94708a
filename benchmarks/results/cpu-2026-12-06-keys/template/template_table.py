"""This folder's rounds as one table: recycle's priced speed-up on each prompt, patched (v) and control (c), and on
the code edits how far under pld each went.

    python benchmarks/results/cpu-2026-12-06-keys/template/template_table.py     # from the repository root
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROUNDS = {1: "flat.patch", 2: "online.patch", 3: "online-flat.patch", 4: "flat.patch"}


def medians(name: str) -> dict[str, dict[str, float]]:
    """Each prompt's (its first words and its last line's, to tell the code edits apart) mode -> priced speed-up."""
    by: dict[str, dict[str, float]] = {}
    for line in (HERE / f"{name}.jsonl").read_text().splitlines():
        row = json.loads(line)
        label = row["prompt"].split(".")[0][:48]
        by.setdefault(label, {})[row["mode"]] = row["priced_speedup"]
    return by


if __name__ == "__main__":
    for n, patch in ROUNDS.items():
        print(f"round {n}, {patch}:")
        for phase in ("open", "warm", "code"):
            cells = []
            for prompt, v in medians(f"{phase}-v{n}").items():
                c = medians(f"{phase}-c{n}")[prompt]
                cell = f"{prompt!r}: {v['recycle']:.3f}x / {c['recycle']:.3f}x"
                if "pld" in v:
                    cell += (f" (under pld {1 - v['recycle'] / v['pld']:.1%} / "
                             f"{1 - c['recycle'] / c['pld']:.1%})")
                cells.append(cell)
            print(f"  {phase}: " + "; ".join(cells))
