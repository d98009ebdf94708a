#!/usr/bin/env bash
# Token recycling's back-off to the text's commonest tokens where the pending token has no row (the change, 0600f16)
# against its control BEFORE (the commit before it, 379f644, from a git worktree), on the 2-core AMD EPYC of
# 2026-12-06. warm.pt and warm-first.* are the bf16 folder's (written at ffb2d9a): both sides start from the same
# matrix. From the repository root with the venv active: `run.sh BEFORE [PHASE...]`, PHASE as benchmarks/control.sh's
# recycle_phase runs them (open-N, open-control[-N], warm-N, warm-control[-N], code-N, quiet, hog).
set -eu
. benchmarks/control.sh
phase() { recycle_phase "$1"; }
results_run "$0" "$@"
