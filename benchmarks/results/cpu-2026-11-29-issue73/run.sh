#!/usr/bin/env bash
# The measurements behind BENCHMARKS.md's table of every mode and issue 73's figures, on the 2-core CPU machine.
# Run from the repository root with the venv active: `run.sh [STEP...]` (steps 1-4 by default); raw logs land
# beside this script.
set -u
out=$(dirname "$0")
story="Write a short story about a lighthouse keeper who finds a message in a bottle."
howto="How do I keep basil alive on a windowsill? Give me practical tips."
first="In the following Python code, rename the variable \`count\` to \`n\` everywhere. Return the whole code and nothing else.

def summarise(values):
    total = 0
    count = 0
    for value in values:
        if value is None:
            continue
        total += value
        count += 1
    if count == 0:
        return None
    mean = total / count
    print(f\"sum={total} count={count} mean={mean}\")
    return total, count, mean
"

step1() {  # every mode, quiet: the first drafting mode's demo (speculative's: a list to repeat) and a story
    local all=greedy,sample,beam,speculative,pld,suffix
    decode-tui bench --modes $all --repeats 5 --max-new-tokens 64 --seed 1 --format json \
        > "$out/all-modes-list.jsonl" 2> "$out/all-modes-list.err"
    decode-tui bench --modes $all --repeats 5 --max-new-tokens 64 --seed 1 --format json -p "$story" \
        > "$out/all-modes-story.jsonl" 2> "$out/all-modes-story.err"
}

step2() {  # the drafting modes by default on open-ended text, quiet, then beside a CPU hog (one busy core of two)
    local name
    for name in story howto; do
        decode-tui bench --modes greedy,pld,suffix,speculative --repeats 7 --max-new-tokens 96 -p "${!name}" \
            > "$out/open-$name-quiet.txt" 2>&1
    done
    python -c "while True: pass" &
    local hog=$!
    for name in story howto; do
        decode-tui bench --modes greedy,pld,suffix,speculative --repeats 7 --max-new-tokens 96 -p "${!name}" \
            > "$out/open-$name-hog.txt" 2>&1
    done
    kill $hog
}

step3() {  # suffix drafting with a history that holds the answer: the code edit after a first, similar task
    decode-tui generate --max-new-tokens 128 -p "$first" --format jsonl > "$out/first-task.jsonl" 2> "$out/first-task.err"
    decode-tui bench --modes greedy,pld,suffix --repeats 5 --max-new-tokens 128 --history "$out/first-task.jsonl" \
        > "$out/suffix-second-task.txt" 2>&1
}

step4() {  # the PLD demo's code edit (bench takes it where pld is the first drafting mode named)
    decode-tui bench --modes greedy,pld,suffix,speculative --repeats 5 --max-new-tokens 64 --seed 1 --format json \
        > "$out/drafting-code-edit.jsonl" 2> "$out/drafting-code-edit.err"
}

step5() {  # the quiet story again, 9 rounds: step 2's quiet story was disturbed once
    decode-tui bench --modes greedy,pld,suffix,speculative --repeats 9 --max-new-tokens 96 -p "$story" \
        > "$out/open-story-quiet-rerun.txt" 2>&1
}

echo "commit $(git rev-parse --short HEAD), $(date -u +%F), steps ${*:-1 2 3 4}" >> "$out/meta.txt"
for step in ${*:-1 2 3 4}; do "step$step"; done
