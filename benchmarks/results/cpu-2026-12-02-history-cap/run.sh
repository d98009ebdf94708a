#!/usr/bin/env bash
# Prompt lookup's history-phase copies capped at the cheapest verification's price (the change) against its
# control, the commit before it (BEFORE, from a git worktree), by accounting (benchmarks/floor_priced.py, greedy
# and pld): the four short no-copy answers beside a CPU hog (one thread chosen) and quiet, and pld's demo code edit
# (64 tokens) beside the hog and quiet; on the 2-core CPU machine of 2026-12-02. From the repository root with the
# venv active: `run.sh BEFORE [SIDE...]`, SIDE one of {hog,quiet,codehog,code}-{before,after}[-N] (default: the
# list below, after and before alternated). OUT=FOLDER writes the sides there instead of beside this script (another
# session's trial of another pld change, compared the same way).
set -eu
out=${OUT:-$(dirname "$0")}
before=$1
. benchmarks/control.sh
control "$before"
echo "after $(git rev-parse --short HEAD), before $before, sides ${*:2}, $(date -u +%FT%TZ)" >> "$out/meta.txt"
side() {  # side NAME [PYTHONPATH]
    case $1 in code*) prompts=code.jsonl tokens=64 ;; *) prompts=short.jsonl tokens=96 ;; esac
    case $1 in hog*|codehog*) hog=--hog ;; *) hog= ;; esac
    PYTHONPATH=${2:-} python benchmarks/floor_priced.py "$out/$prompts" "$out/$1.jsonl" --runs 3 \
        --max-new-tokens $tokens --modes greedy,pld $hog 2> "$out/$1.err"
    echo "$1 done $(date -u +%FT%TZ)" >> "$out/meta.txt"
}
shift
for name in ${*:-hog-after-1 hog-before-1 hog-before-2 hog-after-2 quiet-after-1 quiet-before-1 codehog-after-1 codehog-before-1 code-before-1 code-after-1}; do
    case $name in *before*) side "$name" "$CONTROL" ;; *) side "$name" ;; esac
done
control_done
date -u +%FT%TZ >> "$out/meta.txt"
