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
. benchmarks/control.sh
phase() { recycle_phase "$1"; }
results_run "$0" "$@"
