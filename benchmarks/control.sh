# Sourced by a results folder's run.sh, from the repository root: `control BEFORE` checks the commit BEFORE out in a
# git worktree and sets CONTROL to a folder that makes it importable as decode_tui on PYTHONPATH, beside the
# installed (editable) one (as worktree_bench.py's importable() does); `control_done` removes the worktree.
# `warm_matrix OUT` writes token recycling's warm matrix OUT/warm.pt once (kept if there): `decode-tui generate --mode
# recycle` on each prompt of OUT/warm-first.jsonl, its output into OUT/warm-first.txt.
# `results_begin OUT BEFORE PHASE...` is `control BEFORE`, and notes in OUT/meta.txt which commits run which phases
# on which CPU; then `priced NAME PROMPTS [floor_priced options...]` runs floor_priced.py on OUT/PROMPTS into
# OUT/NAME.jsonl (96 tokens, 3 runs a mode), its progress into OUT/NAME.err.
# A results folder's run.sh (`set -eu; . benchmarks/control.sh; phase() { ...; }; results_run "$0" "$@"`) defines
# `phase NAME` (its folder in $out, the control on $CONTROL) and calls `results_run SCRIPT BEFORE PHASE...`: each
# phase in turn, noted in meta.txt when done, then the worktree removed. `recycle_phase NAME` is token recycling's
# phases, on the folder's code.jsonl, open.jsonl and short.jsonl (-control: at BEFORE):
#   code-N, code-control[-N]  greedy, pld and recycle (cold) by accounting on the code edits;
#   code-float32-N, code-float32-control  greedy, pld and suffix on them, the weights in float32;
#   open-N, open-control[-N]  greedy and recycle, cold, on the open prompts;
#   warm, warm-N, warm-control[-N]  the same from warm.pt (made first, at the change, from warm-first.jsonl);
#   quiet[-N]             the short answers, greedy and every drafting mode;
#   hog, hog-float32[-N], hog-float32-control  the same beside a CPU hog (-float32: the weights in float32, as a CPU
#                         without AMX runs them);
#   bench                 `bench` on the PLD demo's code edit: greedy, pld and recycle, 64 tokens, 5 repeats;
#   prompts               `bench --prompts benchmarks/prompts.jsonl`, greedy and every drafting mode, 64 tokens, 3 repeats.
control() {
    control_tmp=$(mktemp -d)
    git worktree add --detach "$control_tmp/before" "$1" > /dev/null
    mkdir -p "$control_tmp/shim/decode_tui"
    touch "$control_tmp/shim/decode_tui/__init__.py"
    for f in core tui cli lessons themes; do ln -s "$control_tmp/before/$f" "$control_tmp/shim/decode_tui/$f"; done
    CONTROL=$control_tmp/shim
}
control_done() {
    git worktree remove --force "$control_tmp/before"
}
warm_matrix() {
    [ -f "$1/warm.pt" ] && return
    python -c 'import json, sys; [print(json.loads(line)["prompt"]) for line in sys.stdin]' < "$1/warm-first.jsonl" |
        while read -r prompt; do
            decode-tui generate --mode recycle --max-new-tokens 128 --recycle-state "$1/warm.pt" -p "$prompt" \
                >> "$1/warm-first.txt" 2>&1
        done
}
results_begin() {
    results_out=$1
    control "$2"
    echo "after $(git rev-parse --short HEAD), before $2, phases ${*:3}, $(date -u +%FT%TZ)" >> "$1/meta.txt"
    lscpu | grep -E "Model name|Model:|^CPU\(s\)" >> "$1/meta.txt"
}
priced() {
    python benchmarks/floor_priced.py "$results_out/$2" "$results_out/$1.jsonl" --runs 3 --max-new-tokens 96 "${@:3}" \
        2> "$results_out/$1.err"
}
results_run() {
    out=$(dirname "$1")
    results_begin "$out" "$2" "${@:3}"
    for name in "${@:3}"; do
        phase "$name"
        echo "$name done $(date -u +%FT%TZ)" >> "$out/meta.txt"
    done
    control_done
}
recycle_phase() {
    case $1 in
        code-float32-control) PYTHONPATH=$CONTROL priced "$1" code.jsonl --modes greedy,pld,suffix --dtype float32 ;;
        code-float32-*) priced "$1" code.jsonl --modes greedy,pld,suffix --dtype float32 ;;
        code-control|code-control-*) PYTHONPATH=$CONTROL priced "$1" code.jsonl --modes greedy,pld,recycle ;;
        code-*) priced "$1" code.jsonl --modes greedy,pld,recycle ;;
        open-control|open-control-*) PYTHONPATH=$CONTROL priced "$1" open.jsonl --modes greedy,recycle ;;
        open-*) priced "$1" open.jsonl --modes greedy,recycle ;;
        warm-control|warm-control-*) warm_matrix "$out"
            PYTHONPATH=$CONTROL priced "$1" open.jsonl --modes greedy,recycle --recycle-state "$out/warm.pt" ;;
        warm|warm-*) warm_matrix "$out"; priced "$1" open.jsonl --modes greedy,recycle --recycle-state "$out/warm.pt" ;;
        quiet|quiet-*) priced "$1" short.jsonl ;;
        hog) priced hog short.jsonl --hog ;;
        hog-float32-control) PYTHONPATH=$CONTROL priced "$1" short.jsonl --hog --dtype float32 ;;
        hog-float32|hog-float32-*) priced "$1" short.jsonl --hog --dtype float32 ;;
        bench)
            decode-tui bench --modes greedy,pld,recycle --repeats 5 --max-new-tokens 64 --seed 1 \
                > "$out/bench-code-edit.txt" 2>&1 ;;
        prompts)
            decode-tui bench --modes greedy,pld,suffix,recycle,lookahead,speculative --max-new-tokens 64 --repeats 3 \
                --format json --prompts benchmarks/prompts.jsonl > "$out/prompts.jsonl" 2> "$out/prompts.err" ;;
        *) echo "unknown phase $1" >&2; exit 2 ;;
    esac
}
