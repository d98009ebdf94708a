#!/usr/bin/env bash
# Issue 73's floor, quiet, at 0a16528 (decoding as at 42a632a), on the 2-core CPU machine, from the repository root
# with the venv active: every drafting mode by default and the negative control "greedy (again)" against greedy on
# the no-copy prompts, 96 new tokens, 18 rounds; rows flushed per prompt.
out=$(dirname "$0")
date -u +%H:%M:%S > "$out/quiet.started"
python benchmarks/floor_control.py "$out/no-copy.jsonl" "$out/quiet.json" --rounds 18 --max-new-tokens 96 \
    2> "$out/quiet.err"
date -u +%H:%M:%S > "$out/quiet.ended"
