#!/usr/bin/env bash
# Issue 73's floor and issue 74's lookahead, on the 2-core CPU machine, quiet (nothing else running).
# Run from the repository root with the venv active; raw logs land beside this script.
set -u
out=$(dirname "$0")
# Every drafting mode by default against greedy on the shipped prompts where nothing can be copied (open-ended
# writing, how-to, questions on a text, translation), 64 new tokens, 3 alternated rounds a prompt.
decode-tui bench --modes greedy,speculative,pld,suffix,recycle,lookahead --repeats 3 --max-new-tokens 64 \
    --prompts "$out/no-copy.jsonl" --format json > "$out/no-copy.json" 2> "$out/no-copy.err"
# Again, longer, on the three prompts where a mode's median fell under 0.95x (letter, garden question, French): 96
# new tokens, 5 rounds, the modes that fell there (low.json).
decode-tui bench --modes greedy,suffix,recycle,lookahead --repeats 5 --max-new-tokens 96 \
    --prompts "$out/low.jsonl" --format json > "$out/low.json" 2> "$out/low.err"
