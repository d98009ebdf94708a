#!/usr/bin/env bash
# Token recycling's retrieval rounds (a copy where the text's last 4 tokens or more occurred before: SAM-Decoding's
# rule) against its control BEFORE (recycling's trees alone, from a git worktree), on the 2-core Intel CPU (AMX:
# bfloat16 by default). From the repository root with the venv active: `run.sh BEFORE [PHASE...]`, PHASE one of
#   code-N          `floor_priced.py code.jsonl`: greedy, pld and recycle (cold) by accounting on the three code edits
#                   (the PLD demo's and benchmarks/prompts.jsonl's two), 96 tokens, 3 runs;
#   code-control    the same at BEFORE;
#   open-N          `floor_priced.py open.jsonl`: greedy and recycle, cold, on the story, the how-to and the explanation;
#   open-control    the same at BEFORE;
#   warm            greedy and recycle from warm.pt (made first, at the change, from warm-first.jsonl);
#   quiet           `floor_priced.py short.jsonl`: the four short answers, greedy and every drafting mode;
#   bench           `bench` on the PLD demo's code edit: greedy, pld and recycle, 64 tokens, 5 repeats alternated.
set -eu
out=$(dirname "$0")
before=$1
shift
. benchmarks/control.sh
results_begin "$out" "$before" "$@"
for phase in "$@"; do
    case $phase in
        code-control) PYTHONPATH=$CONTROL priced "$phase" code.jsonl --modes greedy,pld,recycle ;;
        code-*) priced "$phase" code.jsonl --modes greedy,pld,recycle ;;
        open-control) PYTHONPATH=$CONTROL priced "$phase" open.jsonl --modes greedy,recycle ;;
        open-*) priced "$phase" open.jsonl --modes greedy,recycle ;;
        quiet) priced quiet short.jsonl ;;
        warm) warm_matrix "$out"; priced warm open.jsonl --modes greedy,recycle --recycle-state "$out/warm.pt" ;;
        bench)
            decode-tui bench --modes greedy,pld,recycle --repeats 5 --max-new-tokens 64 --seed 1 \
                > "$out/bench-code-edit.txt" 2>&1 ;;
        *) echo "unknown phase $phase" >&2; exit 2 ;;
    esac
    echo "$phase done $(date -u +%FT%TZ)" >> "$out/meta.txt"
done
control_done
