#!/usr/bin/env bash
# Issue 73's floor beside a CPU hog, on the two prompts whose cells came lowest beside it (the garden question, the
# German translation), with the negative control, 12 rounds, 96 new tokens asked; from the repository root with the
# venv active, on the 2-core CPU machine, nothing else running.
out=$(dirname "$0")
date -u +%H:%M:%S > "$out/hog.started"
python benchmarks/floor_control.py "$out/low.jsonl" "$out/hog.json" --rounds 12 --max-new-tokens 96 --hog \
    2> "$out/hog.err"
date -u +%H:%M:%S > "$out/hog.ended"
