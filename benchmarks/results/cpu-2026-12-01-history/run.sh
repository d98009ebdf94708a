#!/usr/bin/env bash
# Prompt lookup's history-phase back-off (the change) against its control, the commit before it (BEFORE, from a git
# worktree), by accounting (benchmarks/floor_priced.py, greedy, pld and suffix): the four short no-copy answers
# beside a CPU hog (one thread chosen) and quiet, and pld's demo code edit (64 tokens) quiet; on the 2-core CPU
# machine of 2026-12-01. From the repository root with the venv active: `run.sh BEFORE [SIDE...]`, SIDE one of
# {hog,quiet,code}-{before,after} (default: all six, after before alternated).
set -eu
out=$(dirname "$0")
before=$1
. benchmarks/control.sh
control "$before"
echo "after $(git rev-parse --short HEAD), before $before, sides ${*:2}, $(date -u +%FT%TZ)" >> "$out/meta.txt"
side() {  # side NAME [PYTHONPATH]
    case $1 in code*) prompts=code.jsonl tokens=64 ;; *) prompts=short.jsonl tokens=96 ;; esac
    case $1 in hog*) hog=--hog ;; *) hog= ;; esac
    PYTHONPATH=${2:-} python benchmarks/floor_priced.py "$out/$prompts" "$out/$1.jsonl" --runs 3 \
        --max-new-tokens $tokens --modes greedy,pld,suffix $hog 2> "$out/$1.err"
    echo "$1 done $(date -u +%FT%TZ)" >> "$out/meta.txt"
}
shift
for name in ${*:-hog-after hog-before quiet-before quiet-after code-after code-before}; do
    case $name in *before*) side "$name" "$CONTROL" ;; *) side "$name" ;; esac
done
control_done
date -u +%FT%TZ >> "$out/meta.txt"
