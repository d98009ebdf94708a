"""Benchmark: ``decode-tui bench`` on two checkouts of this repository, alternated, each side in a fresh process.

A change that was measured and kept keeps no off switch in the package: its control is the commit before it. This
script checks that commit out in a ``git worktree``, makes it importable as ``decode_tui`` beside the installed
(editable) one, and runs ``decode-tui bench`` on each side in turn (before, after, after, before, ... so that
neither side always goes first), collecting each mode's speed-up over greedy and its tokens/s from the bench's JSON.

    python benchmarks/worktree_bench.py --before d09d4d0 [--after .] --rounds 2 --out results.json \\
        -- --modes pld,speculative,suffix --repeats 3 --max-new-tokens 64

Everything after ``--`` goes to ``decode-tui bench``; ``--format json`` is added.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("core", "tui", "cli", "lessons", "themes")  # what pyproject.toml installs as decode_tui.*


def importable(checkout: Path, shim: Path) -> Path:
    """A folder holding a ``decode_tui`` package made of ``checkout``'s folders, for PYTHONPATH: a regular package
    found on the path comes before the editable install's finder."""
    package = shim / "decode_tui"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for folder in FOLDERS:
        if (checkout / folder).is_dir():
            (package / folder).symlink_to(checkout / folder)
    return shim


def bench(pythonpath: Path | None, args: list[str]) -> list[dict[str, Any]]:
    """One ``decode-tui bench`` in a fresh process, on the checkout at ``pythonpath`` (None: the installed one)."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    code = ("import sys\nfrom decode_tui.cli.main import main\n"
            f"sys.argv = ['decode-tui', 'bench', *{[*args, '--format', 'json']!r}]\nmain()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def row_key(row: dict[str, Any]) -> str:
    """A bench row's mode, after its prompt's first words where the bench ran a prompt set (``--prompts``)."""
    prompt = row.get("prompt")
    return f"{prompt.splitlines()[-1][:40]}: {row['mode']}" if isinstance(prompt, str) and "category" in row \
        else row["mode"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the commit to compare against")
    parser.add_argument("--after", default=".", help="a checkout folder (default: this working tree, as installed)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("bench", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    extra = [a for a in args.bench if a != "--"]
    with tempfile.TemporaryDirectory() as tmp:
        worktree = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.before], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            sides: dict[str, Path | None] = {
                "before": importable(worktree, Path(tmp) / "shim-before"),
                "after": None if Path(args.after).resolve() == ROOT else importable(Path(args.after).resolve(),
                                                                                   Path(tmp) / "shim-after"),
            }
            runs: dict[str, list[list[dict[str, Any]]]] = {"before": [], "after": []}
            for r in range(args.rounds):
                for side in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    rows = bench(sides[side], extra)
                    runs[side].append(rows)
                    print(f"round {r + 1} {side}: " + ", ".join(f"{row_key(row)} {row['speedup']:.2f}x "
                                                                f"({row['tokens_per_s']:.1f} tok/s)" for row in rows),
                          flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False)
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for side, rounds in runs.items():
        for mode in dict.fromkeys(row_key(row) for row in rounds[0]):
            speedups = [row["speedup"] for rows in rounds for row in rows if row_key(row) == mode]
            rates = [row["tokens_per_s"] for rows in rounds for row in rows if row_key(row) == mode]
            summary.setdefault(mode, {})[side] = {"speedup": statistics.median(speedups),
                                                  "speedup_range": [min(speedups), max(speedups)],
                                                  "tokens_per_s": statistics.median(rates),
                                                  "tokens_per_s_range": [min(rates), max(rates)]}
    for mode, by_side in summary.items():
        print(f"{mode}: " + "  ".join(f"{side} {v['speedup']:.2f}x ({v['speedup_range'][0]:.2f}-"
                                      f"{v['speedup_range'][1]:.2f}), {v['tokens_per_s']:.1f} tok/s"
                                      for side, v in by_side.items()))
    if args.out:
        args.out.write_text(json.dumps({"before": args.before, "rounds": args.rounds, "bench": extra,
                                        "summary": summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
