#!/usr/bin/env bash
# Prompt lookup's history-phase copies halved after each miss at the first token (30fa1af, the change) against its
# control (BEFORE, from a git worktree), by accounting: the same sides as 2026-12-02's trial, run by its script into
# this folder (its code.jsonl and short.jsonl are this folder's). From the repository root with the venv active:
# `run.sh BEFORE [SIDE...]`; this session ran `run.sh c85d01d` with HEAD at 30fa1af.
set -eu
OUT=$(dirname "$0") exec bash benchmarks/results/cpu-2026-12-02-history-cap/run.sh "$@"
