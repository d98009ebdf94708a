#!/usr/bin/env bash
# Every drafting mode by default on open-ended text, on the 2-core CPU machine of 2026-12-01 (AMD EPYC family 25
# model 17, with avx512_bf16), quiet. Run from the repository root with the venv active: `run.sh [STEP...]`
# (steps 1 2 by default); raw logs land beside this script.
set -u
out=$(dirname "$0")
story="Write a short story about a lighthouse keeper who finds a message in a bottle."
howto="How do I keep basil alive on a windowsill? Give me practical tips."
explain="Explain why the sky is blue to a curious ten-year-old."
similar="Write a short story about a fisherman who finds a map in a bottle."

step1() {  # cold, by default, on three open-ended prompts: every drafting mode against greedy
    local name
    for name in story howto explain; do
        decode-tui bench --modes greedy,speculative,pld,suffix,recycle,lookahead --repeats 5 --max-new-tokens 96 \
            -p "${!name}" > "$out/open-$name.txt" 2>&1
    done
}

step2() {  # warm: a first run of a similar prompt fills a matrix, then every repeat starts from that file
    rm -f "$out/warm.pt"
    decode-tui generate --mode recycle --max-new-tokens 128 --recycle-state "$out/warm.pt" -p "$similar" \
        > "$out/warm-first.txt" 2>&1
    decode-tui bench --modes greedy,recycle --repeats 5 --max-new-tokens 96 --recycle-state "$out/warm.pt" \
        -p "$story" > "$out/warm-story.txt" 2>&1
}

step3() {  # the plain modes on the story, for the every-mode table's column of this machine
    decode-tui bench --modes greedy,sample,beam --repeats 5 --max-new-tokens 96 -p "$story" > "$out/plain-story.txt" 2>&1
}

{ echo "commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ), steps ${*:-1 2}"; lscpu | grep -E 'Model name|^CPU family|^Model:'; } >> "$out/meta.txt"
for step in ${*:-1 2}; do "step$step"; done
