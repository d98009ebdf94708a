#!/usr/bin/env bash
# Issue 75's item 12: 30 tabs opened at once, the time to each one's list, on the 2-core CPU machine, quiet. Start
# screens kept ready ahead of their tabs (--ready-tabs, default 30: "after", this commit) against its control, the
# commit before it (7904613: the fork server alone, "before", run from a git worktree through a PYTHONPATH shim),
# alternated. Run from the repository root with the venv active; raw logs land beside this script.
set -u
out=$(dirname "$0")
git worktree add --detach /tmp/wt-ready-before 7904613
mkdir -p /tmp/shim-ready-before/decode_tui && touch /tmp/shim-ready-before/decode_tui/__init__.py
for f in core tui cli lessons themes; do ln -sfn /tmp/wt-ready-before/$f /tmp/shim-ready-before/decode_tui/$f; done
for side in after before after before; do
    if [ "$side" = before ]; then export PYTHONPATH=/tmp/shim-ready-before; else unset PYTHONPATH; fi
    echo "== $side" >> "$out/burst.txt"
    python benchmarks/classroom.py --burst 30 --rounds 2 >> "$out/burst.txt" 2>> "$out/burst.err"
done
git worktree remove --force /tmp/wt-ready-before
