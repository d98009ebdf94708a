#!/usr/bin/env bash
# Ranked trees priced past the padded widths from the tree budget's own forwards, and recycling's host work cut (a
# blocked top-k, the fill counted as written), against BEFORE, on the 2-core Intel CPU (AMX: bfloat16 by default).
# From the repository root with the venv active: `run.sh BEFORE [PHASE...]`, PHASE one of benchmarks/control.sh's
# `recycle_phase`: code-N, code-control, code-float32-N, code-float32-control, open-N, open-control,
# warm-N, warm-control, quiet[-N], hog, hog-float32[-N], hog-float32-control, bench, prompts.
set -eu
. benchmarks/control.sh
phase() { recycle_phase "$1"; }
results_run "$0" "$@"
