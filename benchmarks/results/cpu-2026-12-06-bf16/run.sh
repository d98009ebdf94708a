#!/usr/bin/env bash
# bfloat16 by default on a CPU with AMX (the change: weights packed for AMX, an attention whose sums run in key order)
# against its control BEFORE (float32 by default, from a git worktree), on the 2-core Intel CPU of 2026-12-06. From
# the repository root with the venv active: `run.sh BEFORE [PHASE...]`, PHASE one of
#   control-N  greedy and recycle (cold), `bench --prompts open.jsonl`, 64 tokens, 3 repeats: BEFORE, then the change;
#   open-N     `floor_priced.py open.jsonl`: greedy and every drafting mode by accounting, cold, 96 tokens, 3 runs;
#   warm       the same, greedy and recycle, every run from warm.pt (made first at the change from warm-first.jsonl;
#              the one warm run read its prompts from open-1.jsonl, five rows a prompt: 15 prompts, each prompt 5 times);
#   quiet      `floor_priced.py short.jsonl`: the four short no-copy answers, every drafting mode, 3 runs;
#   hog        the same beside a CPU hog;  hog-garden-N: the garden question alone beside the hog;
#   bench      BENCHMARKS.md's table by device: a story (96 tokens, all eight modes) and the PLD demo's code edit
#              (64 tokens, greedy and the drafting modes), 5 repeats alternated;
#   prompts    `bench --prompts benchmarks/prompts.jsonl`, greedy and every drafting mode, 64 tokens, 3 repeats;
#   dtypes     greedy in float32 against greedy in bfloat16 (greedy_by_dtype.py), in one process, alternated.
set -eu
. benchmarks/control.sh
drafting=greedy,pld,suffix,recycle,lookahead
phase() {
    case $1 in
    control-*)
        for side in before after; do
            path=; [ $side = before ] && path=$CONTROL
            PYTHONPATH=$path decode-tui bench --modes greedy,recycle --max-new-tokens 64 --repeats 3 --format json \
                --prompts "$out/open.jsonl" > "$out/$1-$side.jsonl" 2> "$out/$1-$side.err"
        done ;;
    open-*) priced "$1" open.jsonl --modes $drafting ;;
    hog-garden-*) priced "$1" garden.jsonl --hog ;;
    bench)
        decode-tui bench --modes greedy,sample,beam,speculative,pld,suffix,recycle,lookahead --repeats 5 \
            --max-new-tokens 96 -p "Write a short story about a lighthouse keeper who finds a message in a bottle." \
            > "$out/all-modes-story.txt" 2>&1
        decode-tui bench --modes greedy,pld,suffix,speculative,recycle,lookahead --repeats 5 --max-new-tokens 64 \
            --seed 1 > "$out/drafting-code-edit.txt" 2>&1 ;;
    dtypes) python "$out/greedy_by_dtype.py" > "$out/dtypes.txt" 2> "$out/dtypes.err" ;;
    *) recycle_phase "$1" ;;  # warm, quiet, hog and prompts as the other folders run them
    esac
}
results_run "$0" "$@"
