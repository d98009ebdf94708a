"""recycle's priced speed-up over greedy per prompt, one cell a process, for each side of run.sh: the table of this
folder's README (``python summary.py``, from this folder or with its path)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent


def main() -> None:
    cells: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for path in sorted(HERE.glob("*-*-[0-9].jsonl")):
        match = re.fullmatch(r"(short|open|warm)-(before|after)-(\d)", path.stem)
        if match is None:
            continue
        kind, side, _ = match.groups()
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["mode"] == "recycle":
                short = row["prompt"].split("\n")[-1][:40] if kind == "short" else row["prompt"][:40]
                forwards = f" ({row['target_forwards']})" if True else ""
                same = "" if row["identical"] else " NOT greedy's text"
                cells[(kind, short, side)].append(f"{row['priced_speedup']:.3f}{forwards}{same}")
    print("| prompt | matrix | before (3234b81) | after |")
    print("|---|---|---|---|")
    for kind, short in dict.fromkeys((k, s) for k, s, _ in cells):
        matrix = "warm" if kind == "warm" else "cold"
        print(f"| {short} | {matrix} | {', '.join(cells[(kind, short, 'before')])} | "
              f"{', '.join(cells[(kind, short, 'after')])} |")


if __name__ == "__main__":
    main()
