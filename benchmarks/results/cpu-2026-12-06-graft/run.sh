#!/usr/bin/env bash
# Grafted copies judged by the length of the match each was copied after, against BEFORE, on the 2-core Intel CPU
# (AMX: bfloat16 by default). From the repository root with the venv active: `run.sh BEFORE [PHASE...]`, PHASE one of
# benchmarks/control.sh's `recycle_phase`.
set -eu
. benchmarks/control.sh
phase() { recycle_phase "$1"; }
results_run "$0" "$@"
