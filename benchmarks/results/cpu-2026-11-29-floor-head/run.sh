#!/usr/bin/env bash
# Issue 73's floor at 42a632a, quiet, on the 2-core CPU machine (run from the repository root with the venv active):
# every drafting mode by default against greedy on the prompt set's no-copy prompts, 96 new tokens, 7 rounds.
out=$(dirname "$0")
decode-tui bench --modes greedy,speculative,pld,suffix,recycle,lookahead --repeats 7 --max-new-tokens 96 \
    --prompts "$out/no-copy.jsonl" --format json > "$out/quiet.json" 2> "$out/quiet.err"
