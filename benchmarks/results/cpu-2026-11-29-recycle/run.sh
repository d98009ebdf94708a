#!/usr/bin/env bash
# Token recycling (--mode recycle) against greedy and the other drafting modes on the 2-core CPU machine, quiet.
# Run from the repository root with the venv active: `run.sh [STEP...]` (steps 1-3 by default); raw logs land beside
# this script.
set -u
out=$(dirname "$0")
story="Write a short story about a lighthouse keeper who finds a message in a bottle."
howto="How do I keep basil alive on a windowsill? Give me practical tips."
explain="Explain why the sky is blue to a curious ten-year-old."
similar="Write a short story about a fisherman who finds a map in a bottle."

step1() {  # cold, by default, on three open-ended prompts: recycle and the other drafting modes against greedy
    local name
    for name in story howto explain; do
        decode-tui bench --modes greedy,recycle,pld,suffix --repeats 5 --max-new-tokens 96 -p "${!name}" \
            > "$out/open-$name.txt" 2>&1
    done
}

step2() {  # warm: a first run of a similar prompt fills a matrix, then every repeat starts from that file
    rm -f "$out/warm.pt"
    decode-tui generate --mode recycle --max-new-tokens 128 --recycle-state "$out/warm.pt" -p "$similar" \
        > "$out/warm-first.txt" 2>&1
    decode-tui bench --modes greedy,recycle --repeats 5 --max-new-tokens 96 --recycle-state "$out/warm.pt" \
        -p "$story" > "$out/warm-story.txt" 2>&1
}

step3() {  # copy-heavy: the PLD demo's code edit (bench's prompt where pld is the first drafting mode named)
    decode-tui bench --modes greedy,pld,recycle --repeats 5 --max-new-tokens 64 > "$out/code-edit.txt" 2>&1
}

echo "commit $(git rev-parse --short HEAD), $(date -u +%F), steps ${*:-1 2 3}" >> "$out/meta.txt"
for step in ${*:-1 2 3}; do "step$step"; done
# Also run, by hand, after step 2 (its warm.pt): the warm story with --no-adaptive, 3 repeats
# (warm-story-full-length.txt), and the explain prompt again with 7 repeats (open-explain-again.txt):
#   decode-tui bench --modes greedy,recycle --no-adaptive --repeats 3 --max-new-tokens 96 --recycle-state "$out/warm.pt" -p "$story"
#   decode-tui bench --modes greedy,recycle,pld,suffix --repeats 7 --max-new-tokens 96 -p "$explain"
# And at commit 19df64d, every mode on the shipped prompt set (prompts.jsonl here, summed up in BENCHMARKS.md):
#   decode-tui bench --modes greedy,pld,suffix,recycle --repeats 3 --max-new-tokens 48 \
#       --prompts benchmarks/prompts.jsonl --format json > "$out/prompts.jsonl"
