#!/usr/bin/env bash
# Token recycling at 59401c1 on the 2-core AMD EPYC of 2026-12-07: more warm processes (the same warm.pt as
# cpu-2026-12-06-amd-backoff), beside the probes this folder's README describes. From the repository root with the
# venv active: `run.sh BEFORE [PHASE...]`, PHASE as benchmarks/control.sh's recycle_phase runs them (warm-N at the
# checkout, warm-control-N at BEFORE).
set -eu
. benchmarks/control.sh
phase() { recycle_phase "$1"; }
results_run "$0" "$@"
