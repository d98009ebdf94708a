#!/usr/bin/env bash
# Every mode by default on this session's Intel CPU, for BENCHMARKS.md's table by device: a story (96 tokens, all
# eight modes) and the PLD demo's code edit (64 tokens, greedy and the drafting modes), 5 repeats alternated, from
# the repository root with the venv active.
set -eu
out=$(dirname "$0")
echo "bench at $(git rev-parse --short HEAD), $(date -u +%FT%TZ)" >> "$out/meta.txt"
decode-tui bench --modes greedy,sample,beam,speculative,pld,suffix,recycle,lookahead --repeats 5 --max-new-tokens 96 \
    -p "Write a short story about a lighthouse keeper who finds a message in a bottle." > "$out/all-modes-story.txt" 2>&1
decode-tui bench --modes greedy,pld,suffix,speculative,recycle,lookahead --repeats 5 --max-new-tokens 64 --seed 1 \
    > "$out/drafting-code-edit.txt" 2>&1
echo "bench done $(date -u +%FT%TZ)" >> "$out/meta.txt"
