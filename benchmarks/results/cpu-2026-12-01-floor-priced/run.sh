#!/usr/bin/env bash
# Issue 73's floor by accounting, on the 2-core CPU machine of 2026-12-01 (AMD EPYC family 25 model 17), quiet,
# from the repository root with the venv active: every drafting mode by default and greedy on the eight no-copy
# prompts, 96 new tokens, 3 runs a mode alternated, each run's forwards recorded and priced at widths timed apart.
out=$(dirname "$0")
{ echo "commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ)"; lscpu | grep -E 'Model name|^CPU family|^Model:'; } \
    > "$out/meta.txt"
python benchmarks/floor_priced.py "$out/no-copy.jsonl" "$out/priced.jsonl" --runs 3 --max-new-tokens 96 \
    2> "$out/priced.err"
date -u +%FT%TZ >> "$out/meta.txt"
