#!/usr/bin/env bash
# A recycling template grown from another prior, against the commit it patches, alternated phase by phase, on the
# 2-core Intel CPU (bfloat16). From the repository root with the venv active:
#   run.sh PATCH N PHASE...     PATCH one of flat.patch, online.patch, online-flat.patch (this folder); N the round;
#                               PHASE open-v, open-c, warm-v, warm-c, code-v, code-c (v: patched, c: the control)
# The patched side runs from a git worktree of HEAD with PATCH applied, through a shim package (PYTHONPATH), so the
# control runs the checkout's own code in the same session. This session's runs: HEAD 0877ade, flat.patch round 1,
# online.patch round 2, online-flat.patch round 3; HEAD 3780595 (the same code), flat.patch round 4; each round's
# phases in the order open-v open-c warm-v warm-c code-v code-c.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
patch=$1 n=$2
shift 2
variant=$(mktemp -d) shim=$(mktemp -d)
git worktree add -q --detach "$variant/tree" HEAD
trap 'git worktree remove --force "$variant/tree"; rm -rf "$variant" "$shim"' EXIT
git -C "$variant/tree" apply -p1 "$here/$patch"
mkdir -p "$shim/decode_tui" && touch "$shim/decode_tui/__init__.py"
for d in core tui cli lessons themes; do ln -s "$variant/tree/$d" "$shim/decode_tui/$d"; done
G=benchmarks/results/cpu-2026-12-06-graft
priced() {  # side prompts out [options...]
    local side=$1 prompts=$2 out=$3
    shift 3
    if [ "$side" = v ]; then export PYTHONPATH=$shim; else unset PYTHONPATH; fi
    python benchmarks/floor_priced.py "$prompts" "$here/$out.jsonl" --runs 3 --max-new-tokens 96 "$@" 2> "$here/$out.err"
}
for phase in "$@"; do
    side=${phase#*-}
    case $phase in
        open-?) priced "$side" $G/open.jsonl "open-$side$n" --modes greedy,recycle ;;
        warm-?) priced "$side" $G/open.jsonl "warm-$side$n" --modes greedy,recycle --recycle-state $G/warm.pt ;;
        code-?) priced "$side" $G/code.jsonl "code-$side$n" --modes greedy,pld,recycle ;;
        *) echo "unknown phase $phase" >&2; exit 2 ;;
    esac
    echo "$phase done $(date -u +%H:%M:%S)"
done
