#!/usr/bin/env bash
# Issue 73's floor after shadow rounds (4ad3c77) against its control (ebaa7e0, the commit before it), on the 2-core
# CPU machine, quiet. Run from the repository root with the venv active; raw logs land beside this script.
set -u
out=$(dirname "$0")
git worktree add --detach /tmp/wt-shadow-after 4ad3c77
# The four no-copy prompts where a tree drafter's median fell under 0.95x at 96 tokens (cpu-2026-11-29-floor-96:
# basil and tyre how-tos, the museum question, French), 3 repeats a bench, before/after/after/before.
python benchmarks/worktree_bench.py --before ebaa7e0 --after /tmp/wt-shadow-after --rounds 2 --out "$out/low.json" \
    -- --modes greedy,recycle,lookahead --repeats 3 --max-new-tokens 96 --prompts "$out/low.jsonl" \
    > "$out/low.txt" 2> "$out/low.err"
git worktree remove --force /tmp/wt-shadow-after
# Then the tree drafters alone on all eight no-copy prompts at the shadow commit's successor (1f15179: the same
# core), 96 new tokens, 7 rounds, quiet, as ../cpu-2026-11-29-floor-96/ measured them before.
decode-tui bench --modes greedy,recycle,lookahead --repeats 7 --max-new-tokens 96 \
    --prompts "$out/../cpu-2026-11-29-floor-96/no-copy.jsonl" --format json > "$out/trees7.json" 2> "$out/trees7.err"
