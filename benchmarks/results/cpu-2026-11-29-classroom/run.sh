#!/usr/bin/env bash
# Issue 75's item 12: 30 tabs opened at once, the time to each one's list, on the 2-core CPU machine, quiet. The fork
# server (bfe40d8 and after, "after") against its control (a5d6811, "before", run from a git worktree through a
# PYTHONPATH shim), alternated. Run from the repository root with the venv active; raw logs land beside this script.
set -u
out=$(dirname "$0")
git worktree add --detach /tmp/wt-before a5d6811
mkdir -p /tmp/shim-before/decode_tui && touch /tmp/shim-before/decode_tui/__init__.py
for f in core tui cli lessons themes; do ln -sfn /tmp/wt-before/$f /tmp/shim-before/decode_tui/$f; done
for side in after before after before; do
    if [ "$side" = before ]; then export PYTHONPATH=/tmp/shim-before; else unset PYTHONPATH; fi
    echo "== $side" >> "$out/burst.txt"
    python benchmarks/classroom.py --burst 30 --rounds 2 >> "$out/burst.txt" 2>> "$out/burst.err"
done
