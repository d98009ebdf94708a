#!/usr/bin/env bash
# Token recycling's tree sized by its nodes (the change) against its control BEFORE (from a git worktree), by
# accounting (benchmarks/floor_priced.py, greedy and recycle, 3 runs a mode, each recycle run from an empty matrix):
# the four short no-copy answers (short.jsonl, 96 tokens asked) and three open-ended prompts (open.jsonl: a story,
# a how-to, an explanation; 96 tokens), quiet, and the open-ended ones again from a warm matrix (warm-*: warm.pt, made
# first by `decode-tui generate --mode recycle` at the change on three similar prompts, warm-first.jsonl); on the
# 2-core Intel CPU of 2026-12-05. From the repository root with the venv active: `run.sh BEFORE [SIDE...]`, SIDE one
# of {short,open,warm}-{before,after}[-N].
set -eu
out=$(dirname "$0")
before=$1
. benchmarks/control.sh
control "$before"
echo "after $(git rev-parse --short HEAD), before $before, sides ${*:2}, $(date -u +%FT%TZ)" >> "$out/meta.txt"
side() {  # side NAME [PYTHONPATH]
    case $1 in open*|warm*) prompts=open.jsonl ;; *) prompts=short.jsonl ;; esac
    case $1 in warm*) warm_matrix "$out"; state=(--recycle-state "$out/warm.pt") ;; *) state=() ;; esac
    PYTHONPATH=${2:-} python benchmarks/floor_priced.py "$out/$prompts" "$out/$1.jsonl" --runs 3 \
        --max-new-tokens 96 --modes greedy,recycle "${state[@]}" 2> "$out/$1.err"
    echo "$1 done $(date -u +%FT%TZ)" >> "$out/meta.txt"
}
shift
for name in ${*:-open-after-1 open-before-1 short-before-1 short-after-1}; do
    case $name in *before*) side "$name" "$CONTROL" ;; *) side "$name" ;; esac
done
control_done
date -u +%FT%TZ >> "$out/meta.txt"
