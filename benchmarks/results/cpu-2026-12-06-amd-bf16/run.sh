#!/usr/bin/env bash
# bfloat16 by default on a CPU with AVX512-BF16 and no AMX (the change: `--dtype auto` loads bfloat16 there too, made
# ready by cpu_bf16.py, whose products now sum at most 1024 inputs each and whose attention sums in float64) against
# its control BEFORE (float32 by default on such a CPU, from a git worktree), on the 2-core AMD EPYC of 2026-12-06.
# From the repository root with the venv active: `run.sh BEFORE [PHASE...]`, PHASE one of
#   widths     a forward over 1-16 positions in float32 and in bfloat16, one process (widths.py);
#   dtypes     greedy in float32 against greedy in bfloat16, one process, alternated (the bf16 folder's greedy_by_dtype.py, on the same prompts);
#   open-N, open-control  greedy and recycle, cold, by accounting on the open prompts (96 tokens, 3 runs);
#   drafting-N  greedy and every drafting mode on them, cold;
#   warm, code-N, code-control, quiet, hog, bench, prompts  as benchmarks/control.sh's recycle_phase runs them.
set -eu
. benchmarks/control.sh
phase() {
    case $1 in
    widths) python "$out/widths.py" > "$out/widths.txt" 2> "$out/widths.err" ;;
    dtypes) python benchmarks/results/cpu-2026-12-06-bf16/greedy_by_dtype.py > "$out/dtypes.txt" 2> "$out/dtypes.err" ;;
    drafting-*) priced "$1" open.jsonl --modes greedy,speculative,pld,suffix,recycle,lookahead ;;
    all-modes)
        decode-tui bench --modes greedy,sample,beam,speculative,pld,suffix,recycle,lookahead --repeats 5 \
            --max-new-tokens 96 -p "Write a short story about a lighthouse keeper who finds a message in a bottle." \
            > "$out/all-modes-story.txt" 2>&1
        decode-tui bench --modes greedy,pld,suffix,speculative,recycle,lookahead --repeats 5 --max-new-tokens 64 \
            --seed 1 > "$out/drafting-code-edit.txt" 2>&1 ;;
    *) recycle_phase "$1" ;;
    esac
}
results_run "$0" "$@"
