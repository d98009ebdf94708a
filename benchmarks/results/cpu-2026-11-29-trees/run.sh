#!/usr/bin/env bash
# Issue 73's floor after tree-aware pricing (47990ae) against its control (c11443b), on the 2-core CPU machine,
# quiet. Run from the repository root with the venv active; raw logs land beside this script.
set -u
out=$(dirname "$0")
git worktree add --detach /tmp/wt-after 47990ae
# The three prompts where a tree drafter's median fell under 0.95x (letter, garden question, French): 96 new
# tokens, 3 repeats a bench, before/after/after/before.
python benchmarks/worktree_bench.py --before c11443b --after /tmp/wt-after --rounds 2 --out "$out/low.json" \
    -- --modes greedy,suffix,recycle,lookahead --repeats 3 --max-new-tokens 96 --prompts "$out/low.jsonl" \
    > "$out/low.txt" 2> "$out/low.err"
