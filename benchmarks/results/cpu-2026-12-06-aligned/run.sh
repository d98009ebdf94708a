#!/usr/bin/env bash
# Tree budgets of 2^k - 1 nodes (a forward of a power of two positions, whole tiles of the matrix unit) against
# BEFORE, on the 2-core Intel CPU (AMX: bfloat16 by default). From the repository root with the venv active:
# `run.sh BEFORE [PHASE...]`, PHASE one of benchmarks/control.sh's `recycle_phase`.
set -eu
. benchmarks/control.sh
phase() { recycle_phase "$1"; }
results_run "$0" "$@"
