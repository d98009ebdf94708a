#!/usr/bin/env bash
# The thread count timed in the warm-up (the change) against its control, the commit before it (BEFORE, from a git
# worktree), by accounting (benchmarks/floor_priced.py) on the four short no-copy answers (34-52 tokens), beside a
# CPU hog on one of the two cores (--hog), then quiet; on the 2-core CPU machine of 2026-12-01. From the repository
# root with the venv active: `run.sh BEFORE [SIDE...]`, SIDE one of hog-before-N, hog-after-N, quiet-after-N
# (default: hog-after-1 hog-before-1 hog-after-2 quiet-after-1, each a fresh process).
set -eu
out=$(dirname "$0")
before=$1
. benchmarks/control.sh
control "$before"
echo "after $(git rev-parse --short HEAD), before $before, sides ${*:2}, $(date -u +%FT%TZ)" >> "$out/meta.txt"
side() {  # side NAME [PYTHONPATH]
    case $1 in hog*) hog=--hog ;; *) hog= ;; esac
    PYTHONPATH=${2:-} python benchmarks/floor_priced.py "$out/short.jsonl" "$out/$1.jsonl" --runs 3 \
        --max-new-tokens 96 $hog 2> "$out/$1.err"
}
shift
for name in ${*:-hog-after-1 hog-before-1 hog-after-2 quiet-after-1}; do
    case $name in *before*) side "$name" "$CONTROL" ;; *) side "$name" ;; esac
    echo "$name done $(date -u +%FT%TZ)" >> "$out/meta.txt"
done
control_done
date -u +%FT%TZ >> "$out/meta.txt"
