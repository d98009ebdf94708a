# Sourced by a results folder's run.sh, from the repository root: `control BEFORE` checks the commit BEFORE out in a
# git worktree and sets CONTROL to a folder that makes it importable as decode_tui on PYTHONPATH, beside the
# installed (editable) one (as worktree_bench.py's importable() does); `control_done` removes the worktree.
# `warm_matrix OUT` writes token recycling's warm matrix OUT/warm.pt once (kept if there): `decode-tui generate --mode
# recycle` on each prompt of OUT/warm-first.jsonl, its output into OUT/warm-first.txt.
# `results_begin OUT BEFORE PHASE...` is `control BEFORE`, and notes in OUT/meta.txt which commits run which phases
# on which CPU; then `priced NAME PROMPTS [floor_priced options...]` runs floor_priced.py on OUT/PROMPTS into
# OUT/NAME.jsonl (96 tokens, 3 runs a mode), its progress into OUT/NAME.err.
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
