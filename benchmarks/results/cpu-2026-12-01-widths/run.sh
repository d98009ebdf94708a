#!/usr/bin/env bash
# Tree verifications padded to the cheapest width and the widths timed in the warm-up (the change) against its
# control, the commit before it (BEFORE, from a git worktree), by accounting (benchmarks/floor_priced.py) on the four
# short no-copy answers (34-52 tokens), where a step lost weighs most; quiet, on the 2-core CPU machine of
# 2026-12-01. From the repository root with the venv active: `run.sh BEFORE [SIDE...]`, SIDE one of before-N or
# after-N (default: before-1 after-1 after-2 before-2, each a fresh process).
set -eu
out=$(dirname "$0")
before=$1
. benchmarks/control.sh
control "$before"
echo "after $(git rev-parse --short HEAD), before $before, sides ${*:2}, $(date -u +%FT%TZ)" >> "$out/meta.txt"
side() {  # side NAME [PYTHONPATH]
    PYTHONPATH=${2:-} python benchmarks/floor_priced.py "$out/short.jsonl" "$out/$1.jsonl" --runs 3 \
        --max-new-tokens 96 2> "$out/$1.err"
}
shift
for name in ${*:-before-1 after-1 after-2 before-2}; do
    case $name in before*) side "$name" "$CONTROL" ;; *) side "$name" ;; esac
done
control_done
date -u +%FT%TZ >> "$out/meta.txt"
# Then, at the change alone, beside a CPU hog on one of the two cores (hog.jsonl, hog.err):
#   python benchmarks/floor_priced.py "$out/short.jsonl" "$out/hog.jsonl" --runs 3 --max-new-tokens 96 --hog \
#       2> "$out/hog.err"
# And the four 96-token no-copy answers at the change alone, quiet (long-after.jsonl, long-after.err):
#   python benchmarks/floor_priced.py "$out/long.jsonl" "$out/long-after.jsonl" --runs 3 --max-new-tokens 96 \
#       2> "$out/long-after.err"
