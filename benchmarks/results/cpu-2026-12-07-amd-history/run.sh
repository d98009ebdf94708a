#!/usr/bin/env bash
# How a longer history of earlier runs warms token recycling's matrix: matrices after 1, 3, 6 and 12 first runs
# (history.txt in order, 128 tokens each, `generate --mode recycle`), then target forwards for 96 tokens of each
# prompt of ../cpu-2026-12-07-amd-probes/open.jsonl at fixed tree budgets from each (that folder's fixed_budget.py:
# the policy off, so the counts need no clock). From the repository root with the venv active.
set -eu
here=benchmarks/results/cpu-2026-12-07-amd-history
state=$(mktemp -d)
rm -f "$here/first.txt" "$here/fixed.txt"
n=0
while IFS= read -r prompt; do
    n=$((n + 1))
    decode-tui generate --mode recycle --max-new-tokens 128 --recycle-state "$state/m.pt" -p "$prompt" \
        >> "$here/first.txt" 2>&1
    case $n in 1|3|6|12) cp "$state/m.pt" "$state/m$n.pt" ;; esac
done < "$here/history.txt"
for n in 1 3 6 12; do
    echo "after $n first runs:" >> "$here/fixed.txt"
    python benchmarks/results/cpu-2026-12-07-amd-probes/fixed_budget.py "$state/m$n.pt" 4,8,16 2>/dev/null \
        >> "$here/fixed.txt"
done
rm -r "$state"
