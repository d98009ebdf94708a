"""recycle's priced speed-up over greedy per prompt, one cell a process (its target forwards in brackets), for each
side of run.sh, the after sides by the commit they ran (meta.txt): the table of this folder's README (``python
summary.py``, from the repository root with its path)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent
# The decoding each "after" process ran, by its side and number (meta.txt: 6536729 decodes as 6616189 and f391a67 as
# 9346968): the change as first committed, then as mended twice.
AFTER = {"1": "6616189", "2": "6616189", "3": "9346968", "4": "9346968", "5": "cbfc1ad", "6": "cbfc1ad"}
WARM_AFTER = {"1": "6616189", "2": "9346968", "3": "9346968", "5": "cbfc1ad", "6": "cbfc1ad"}
COLUMNS = ("before", "6616189", "9346968", "cbfc1ad")


def main() -> None:
    cells: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for path in sorted(HERE.glob("*-*-[0-9].jsonl")):
        match = re.fullmatch(r"(short|open|warm)-(before|after)-(\d)", path.stem)
        if match is None:
            continue
        kind, side, number = match.groups()
        column = "before" if side == "before" else (WARM_AFTER if kind == "warm" else AFTER)[number]
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["mode"] == "recycle":
                prompt = row["prompt"].split("\n")[-1] if kind == "short" else row["prompt"]
                same = "" if row["identical"] else " NOT greedy's text"
                cell = f"{row['priced_speedup']:.3f} ({row['target_forwards']}){same}"
                cells[(kind, prompt[:40], column)].append(cell)
    print("| prompt | matrix | before (3234b81) | 6616189 | 9346968 | cbfc1ad |")
    print("|---|---|---|---|---|---|")
    for kind, prompt in dict.fromkeys((k, p) for k, p, _ in cells):
        matrix = "warm" if kind == "warm" else "cold"
        print(f"| {prompt} | {matrix} | " + " | ".join(", ".join(cells[(kind, prompt, c)]) or "-" for c in COLUMNS)
              + " |")


if __name__ == "__main__":
    main()
