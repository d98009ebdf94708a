#!/usr/bin/env bash
# Issue 73's floor, on the 2-core CPU machine: every drafting mode by default against greedy on the shipped prompts
# where nothing can be copied (open-ended writing, how-to, questions on a text, translation), 96 new tokens.
# Run from the repository root with the venv active; raw logs land beside this script.
#   run.sh quiet   7 alternated rounds a prompt, nothing else running
#   run.sh hog     5 alternated rounds a prompt, beside one busy-looping Python process (a CPU hog)
set -u
out=$(dirname "$0")
modes=greedy,speculative,pld,suffix,recycle,lookahead
case "${1:-quiet}" in
quiet)
    decode-tui bench --modes "$modes" --repeats 7 --max-new-tokens 96 \
        --prompts "$out/no-copy.jsonl" --format json > "$out/quiet.json" 2> "$out/quiet.err" ;;
hog)
    python -c "while True: pass" &
    hog=$!
    trap 'kill $hog' EXIT
    decode-tui bench --modes "$modes" --repeats 5 --max-new-tokens 96 \
        --prompts "$out/no-copy.jsonl" --format json > "$out/hog.json" 2> "$out/hog.err" ;;
esac
