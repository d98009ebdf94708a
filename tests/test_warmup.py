"""Warm-up after loading, the fair comparison protocol, and a model spread over devices (--device-map).

The speed side of these (a first run at >= 0.9x the third; greedy against itself at 0.95-1.05x) is
measured by benchmarks/first_run.py and tests/test_gpu.py, not asserted here: what the CPU can check is
that the warm-up does the work a first run would otherwise do (the graphs are captured before the run,
not in it), that the comparison times only warm runs, alternated, and that a spread model gives the
tokens of the model on one device.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from decode_tui.core.analysis.compare import compare
from decode_tui.core.drafting.draft_models import DraftModel
from decode_tui.core.execution import forward as forward_module
from decode_tui.core.execution.model_state import state_of
from decode_tui.core.execution.widths import MAX_WIDTH, TRIES, width_costs
from decode_tui.core.model.loading import load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.params import DecodeConfig, DraftParams
from decode_tui.core.record.events import DraftVerified, Finished, Started
from decode_tui.core.run import Run
from decode_tui.core.warmup import warm_up

from .conftest import tiny_model
from .test_autoregressive import loaded
from .test_graphs import EagerGraphs

PROMPT = "ab ab ab cd ab ab ab cd ab ab ab cd"


@pytest.fixture
def lm(byte_bpe: Any) -> Any:
    return loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4), byte_bpe, 2)


@pytest.mark.parametrize("mode", ["greedy", "sample", "pld", "beam"])
def test_the_warm_up_captures_what_the_first_run_replays(lm: Any, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    monkeypatch.setattr(forward_module, "GRAPH_DEVICES", frozenset({"cpu"}))
    monkeypatch.setattr(forward_module, "GraphBackend", EagerGraphs)
    EagerGraphs.captures = 0
    config = DecodeConfig(mode=mode, max_new_tokens=40, seed=3)
    seconds = warm_up(lm, PROMPT, config)
    assert seconds > 0
    captured = EagerGraphs.captures
    # pld: the verification's padded width, and the one-token step of the plain steps where a lookup finds
    # nothing; beam: the N-row step and the reorder of its rows
    assert captured == (2 if mode in ("pld", "beam") else 1)
    events = list(Run(lm, PROMPT, config).events())
    assert EagerGraphs.captures == captured, "the first real run captured nothing: the warm-up did it"
    assert isinstance(events[-1], Finished) and events[-1].finish_reason != "cancelled"
    if mode == "pld":
        assert any(isinstance(e, DraftVerified) for e in events)
    pools = state_of(lm.model).pool
    assert not any(c.leased for caches in pools.values() for c in caches), "every cache handed back"


def test_a_warm_up_stops_early_and_changes_nothing_a_run_sees(lm: Any) -> None:
    config = DecodeConfig(mode="sample", max_new_tokens=60, seed=11)
    before = list(Run(lm, PROMPT, config).events())
    started: list[int] = []
    original = Run.events

    def counting(self: Run) -> Any:
        for event in original(self):
            started.append(1)
            yield event

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Run, "events", counting)
        warm_up(lm, PROMPT, config)
    assert 0 < len(started) < len(before) / 2, "the warm-up decoded a few steps, not the whole run"
    after = list(Run(lm, PROMPT, config).events())
    assert isinstance(before[-1], Finished) and isinstance(after[-1], Finished)
    assert before[-1].token_ids == after[-1].token_ids


@pytest.mark.parametrize("mode", ["greedy", "pld"])
def test_a_warm_up_says_how_far_along_it_is(lm: Any, mode: str) -> None:
    """A speculative warm-up showed one line for 16-35 s on a busy machine: it says its phase at each token and
    draft round, counting up to the tokens and rounds it stops at."""
    from decode_tui.core.warmup import WARM_ROUNDS, WARM_TOKENS, warming

    steps = warming(lm, PROMPT, DecodeConfig(mode=mode, max_new_tokens=40, seed=3))
    lines = []
    while True:
        try:
            lines.append(next(steps))
        except StopIteration as done:
            assert done.value > 0
            break
    lines = [line for line in lines if not _threads(line)]  # (tests/test_threads.py)
    # A drafting warm-up on a CPU first times the widths a verification may pad to (once, on a fresh model).
    timing = [line for line in lines if "timing verifications" in line]
    assert timing == ([f"warming up pld: timing verifications of 2 to {MAX_WIDTH} positions"] if mode == "pld" else [])
    assert not timing or lines[0] == timing[0]
    lines = [line for line in lines if line not in timing]
    assert lines[0] == f"warming up {mode}: the prompt's prefill"
    assert lines[1].startswith(f"warming up {mode}: ") and len(lines) > 2
    assert f"{WARM_TOKENS} of {WARM_TOKENS} tokens" in lines[-1] or mode == "pld"
    counted = [int(line.split(": ")[1].split()[0]) for line in lines[1:] if " tokens" in line]
    assert all(f"{n} of {WARM_TOKENS} tokens" in line or n > WARM_TOKENS for n, line in
               zip(counted, [line for line in lines[1:] if " tokens" in line], strict=True))
    assert not any(f"{n} of {WARM_TOKENS} tokens" in line for line in lines for n in range(WARM_TOKENS + 1, 99)), \
        "no count past its goal (a drafting warm-up said '15 of 8 tokens')"
    if mode == "pld":
        assert any(f"draft round 1 of {WARM_ROUNDS} verified" in line for line in lines), lines


def test_a_suffix_warm_up_names_its_budget_timing_and_a_long_prompt_warms_up_on_its_start_alone(
        lm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`run --mode suffix` said "warming up suffix…" for 10 s, and a 5,760-word prompt's prefill was paid by the
    warm-up and again by the run (first token at 307 s)."""
    from decode_tui.core import run as run_module
    from decode_tui.core import warmup

    prompts: list[str] = []
    real = run_module.Run

    class Spy(real):  # type: ignore[misc, valid-type]
        def __init__(self, lm: Any, prompt: str, *args: Any, **kwargs: Any) -> None:
            prompts.append(prompt)
            super().__init__(lm, prompt, *args, **kwargs)

    monkeypatch.setattr(run_module, "Run", Spy)
    lines = []
    steps = warmup.warming(lm, PROMPT, DecodeConfig(mode="suffix", max_new_tokens=16, seed=3))
    for line in steps:
        lines.append(line)
    lines = [line for line in lines if not _threads(line)]  # (tests/test_threads.py)
    assert lines[0] == "warming up suffix: timing forwards of a few widths, for the draft trees' size"
    assert lines[1] == f"warming up suffix: timing verifications of 2 to {MAX_WIDTH} positions"
    assert lines[2] == "warming up suffix: the prompt's prefill" and prompts == [PROMPT]
    monkeypatch.setattr(warmup, "WARM_PROMPT_CHARS", 60)  # the tiny model reads 512 tokens at most
    long = "ab cd " * 60
    warmup.warm_up(lm, long, DecodeConfig(mode="greedy", max_new_tokens=4, seed=3))
    assert prompts[-1] == long[: warmup.WARM_PROMPT_CHARS], "on the CPU its start alone"


def test_compare_times_warm_runs_alternated_and_reports_the_spread(lm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Warm-ups first (closed early, not timed), then AB, BA, AB; the speed-up is the median ratio."""
    order: list[tuple[str, bool]] = []
    original = Run.events

    def spy(self: Run) -> Any:
        timed = True
        try:
            yield from original(self)
        except GeneratorExit:
            timed = False
            raise
        finally:
            order.append((self.config.mode, timed))

    monkeypatch.setattr(Run, "events", spy)
    pld = DecodeConfig(mode="pld", max_new_tokens=30, draft=DraftParams(num_draft_tokens=4))
    greedy = DecodeConfig(mode="greedy", max_new_tokens=30)
    said: list[str] = []
    result = compare(lm, PROMPT, pld, greedy, runs=3, progress=said.append)
    assert said[:2] == ["round 1 of 3: greedy (baseline)", "round 1 of 3: pld"], "the progress names each side's mode"
    assert order == [("greedy", False), ("pld", False),
                     ("greedy", True), ("pld", True), ("pld", True), ("greedy", True), ("greedy", True), ("pld", True)]
    assert result["runs"] == 3 and result["baseline"] == "greedy"
    assert result["speedup_low"] <= result["speedup"] <= result["speedup_high"]
    # the ratio is the two median speeds' reported beside it: they agree (and, each round's speed-up bounding it
    # below and above, the ratio of medians always lies within the rounds' range)
    assert result["speedup"] == pytest.approx(result["tokens_per_s"] / result["greedy_tokens_per_s"])
    assert result["identical"] is True and result["first_divergence"] is None, "greedy PLD equals greedy"
    assert result["divergence_note"] is None
    with pytest.raises(ValueError, match="at least one run"):
        compare(lm, PROMPT, pld, greedy, runs=0)


def test_rounds_that_disagree_make_an_unreliable_figure_and_say_why() -> None:
    from decode_tui.core.analysis.compare import unreliable

    said = unreliable([1.29, 0.51, 1.42])  # a machine busy elsewhere during one round
    assert said is not None and "0.51x to 1.42x" in said and "busy" in said
    assert unreliable([1.03, 1.11, 1.18]) is None and unreliable([2.0]) is None
    speeds = unreliable([2.8, 15.9, 3.4], " tok/s")  # bench's speeds on a machine busy elsewhere
    assert speeds is not None and "2.8 tok/s to 15.9 tok/s" in speeds


def test_compare_finds_where_two_outputs_part(lm: Any) -> None:
    sample = DecodeConfig(mode="sample", max_new_tokens=30, seed=1)
    result = compare(lm, PROMPT, sample, dataclasses.replace(sample, seed=2), runs=1)
    assert result["identical"] is False and isinstance(result["first_divergence"], int)


def test_the_rounds_keep_greedys_two_best_candidates_at_each_step(lm: Any) -> None:
    """What a divergence is explained from: for greedy, a pair a step, the first of each the token greedy took."""
    from decode_tui.core.analysis.compare import timed_rounds

    tops: dict[str, Any] = {}
    greedy = DecodeConfig(mode="greedy", max_new_tokens=12)
    results = timed_rounds(lm, PROMPT, {"greedy": greedy, "pld": DecodeConfig(mode="pld", max_new_tokens=12)},
                           runs=1, tops=tops)
    tokens = results["greedy"][-1].token_ids
    assert len(tops["greedy"]) == len(tokens) and all(len(pair) == 2 for pair in tops["greedy"])
    assert [pair[0].token_id for pair in tops["greedy"]] == list(tokens)
    assert all(pair[0].prob >= pair[1].prob for pair in tops["greedy"])


def test_a_drafting_modes_divergence_at_a_near_tie_in_reduced_precision_is_explained_and_no_other() -> None:
    """Greedy PLD or speculative decoding that took greedy's runner-up, in bf16 or fp16, gets the numbers and the
    reason (a verification's pass rounds otherwise than a one-token step); in float32, a third token, a sampling
    mode or sampling verification, it gets none: there the divergence is not rounding's."""
    from decode_tui.core.analysis.compare import divergence_note
    from decode_tui.core.record.events import Candidate

    tops = [(Candidate(5, "a", 0.6), Candidate(6, "b", 0.3)), (Candidate(7, " the", 0.312), Candidate(8, " a", 0.309))]
    pld = DecodeConfig(mode="pld")
    note = divergence_note(pld, 1, [5, 8], tops, torch.bfloat16)
    assert note is not None and "' the' (0.312)" in note and "' a' (0.309)" in note and "bfloat16" in note
    assert divergence_note(DecodeConfig(mode="speculative"), 1, [5, 8], tops, torch.float16) is not None
    assert divergence_note(pld, 1, [5, 8], tops, torch.float32) is None
    assert divergence_note(pld, 1, [5, 9], tops, torch.bfloat16) is None  # not greedy's runner-up
    assert divergence_note(pld, None, [5, 7], tops, torch.bfloat16) is None
    assert divergence_note(DecodeConfig(mode="sample"), 1, [5, 8], tops, torch.bfloat16) is None
    assert divergence_note(DecodeConfig(mode="pld", draft_sample=True), 1, [5, 8], tops, torch.bfloat16) is None


@pytest.mark.parametrize("mode", ["greedy", "pld", "beam", "speculative"])
def test_a_model_spread_by_max_memory_gives_the_tokens_of_one_on_a_device(
        tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """accelerate's big-model inference on the CPU: what does not fit max_memory goes to the disk, and the
    layers there are brought in by hooks at each forward. The same code path spreads layers over GPUs."""
    monkeypatch.setenv("DECODE_TUI_CACHE", str(tmp_path))
    resolved = resolve(str(tiny_model_dir))
    whole = load_model(resolved, device="cpu", dtype="float32")  # what a spread model loads in on a CPU by default
    spread = load_model(resolved, device_map="sequential", max_memory={"cpu": 450_000})
    assert spread.dtype == torch.float32
    device_map: dict[str, str] = spread.model.hf_device_map  # type: ignore[assignment]
    assert {"cpu", "disk"} <= set(device_map.values()), f"the model was not split: {device_map}"
    assert spread.device == torch.device("cpu")
    config = DecodeConfig(mode=mode, max_new_tokens=24, seed=0,
                          draft=DraftParams(draft="self", num_draft_tokens=3))
    results = []
    for lm in (whole, spread):
        draft = DraftModel(lm.model, len(lm.tokenizer), "self") if mode == "speculative" else None
        events = list(Run(lm, "def add(a, b): return a + b\n" * 3, config, draft).events())
        assert isinstance(events[-1], Finished)
        results.append(events[-1].token_ids)
    assert results[0] == results[1]


def test_a_device_map_that_does_not_exist_or_clashes_with_a_device_is_refused(tiny_model_dir: Path) -> None:
    from decode_tui.core.errors import UsageError

    with pytest.raises(UsageError, match="Unknown device map 'everywhere'"):
        load_model(resolve(str(tiny_model_dir)), device_map="everywhere")
    with pytest.raises(UsageError, match="replaces --device cpu"):
        load_model(resolve(str(tiny_model_dir)), device="cpu", device_map="auto")


def test_bench_times_every_mode_alternated_against_greedy(lm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from decode_tui.core.analysis.compare import bench

    order: list[str] = []
    original = Run.events

    def spy(self: Run) -> Any:
        yield from original(self)
        order.append(self.config.mode)  # reached only by a run consumed to its end: a timed one

    monkeypatch.setattr(Run, "events", spy)
    configs = {"greedy": DecodeConfig(mode="greedy", max_new_tokens=30),
               "pld": DecodeConfig(mode="pld", max_new_tokens=30, draft=DraftParams(num_pred_tokens=4)),
               "sample": DecodeConfig(mode="sample", max_new_tokens=30, seed=3)}
    rows = {r.mode: r for r in bench(lm, PROMPT, configs, runs=2)}
    # timed (after the warm-ups, which stop early and never finish): forward, then backward
    assert order == ["greedy", "pld", "sample", "sample", "pld", "greedy"]
    assert set(rows) == {"greedy", "pld", "sample"}
    greedy, pld = rows["greedy"], rows["pld"]
    assert greedy.speedup == 1.0 and greedy.identical and greedy.target_forwards == greedy.new_tokens
    assert pld.identical and pld.first_divergence is None, "greedy PLD equals greedy"
    assert pld.target_forwards <= pld.new_tokens and pld.acceptance_rate is not None
    assert pld.tokens_per_forward == pytest.approx(pld.new_tokens / pld.target_forwards)
    for r in rows.values():
        assert r.tokens_per_s_low <= r.tokens_per_s <= r.tokens_per_s_high
        assert r.speedup_low <= r.speedup <= r.speedup_high and r.runs == 2
        assert len(r.round_speedups) == len(r.round_forwards) == 2
        assert (min(r.round_speedups), max(r.round_speedups)) == (r.speedup_low, r.speedup_high)
        assert r.round_forwards[-1] == r.target_forwards
    assert greedy.round_speedups == (1.0, 1.0)
    with pytest.raises(ValueError, match="greedy"):
        bench(lm, PROMPT, {"pld": configs["pld"]}, runs=1)


def test_a_recycling_warm_up_writes_no_matrix_and_the_run_says_it_starts_empty(lm: Any, tmp_path: Path) -> None:
    """A warm-up leaves no state behind: the matrix file the user named for a new run is the run's to write, and the
    run says it starts from no earlier run (a warm-up that wrote its few steps' rows made it say "from earlier
    runs")."""
    path = tmp_path / "new.pt"
    config = DecodeConfig(mode="recycle", max_new_tokens=24, draft=DraftParams(recycle_state=str(path)))
    warm_up(lm, PROMPT, config)
    assert not path.exists(), "the warm-up wrote the matrix"
    events = list(Run(lm, PROMPT, config).events())
    assert isinstance(events[0], Started) and events[0].notes is not None
    assert any("no earlier run" in n for n in events[0].notes)
    assert isinstance(events[-1], Finished) and path.exists(), "the run itself writes its matrix back"


@pytest.mark.parametrize("mode", ["greedy", "pld", "suffix"])
def test_a_drafting_warm_up_on_a_cpu_times_every_width_so_the_run_times_none(lm: Any, mode: str) -> None:
    """A verification at a width only there to time it cost a short answer a step or more (3 positions cost what 5
    do and more on a 2-core CPU): the warm-up times every width a verification may pad to, and the run that follows
    pads at once, timing nothing it did not need."""
    config = DecodeConfig(mode=mode, max_new_tokens=40, seed=3)
    warm_up(lm, PROMPT, config)
    costs = width_costs(lm.model)
    timed = {w: len(seconds) for w, seconds in costs.seconds.items()}
    # (the warm-up's own draft rounds may add a verification's time to the width it ran at)
    assert all(n == 0 for n in timed.values()) if mode == "greedy" else all(n >= TRIES for n in timed.values()), timed
    if mode == "greedy":
        return
    asked: list[int] = []
    untimed: list[int] = []
    width_for = costs.width_for

    def chosen(width: int, room: int) -> int:
        asked.append(width)
        if 2 <= width <= MAX_WIDTH:
            untimed.extend(v for v in range(width, max(width, min(MAX_WIDTH, room)) + 1)
                           if len(costs.seconds[v]) < TRIES)
        return width_for(width, room)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(costs, "width_for", chosen)
        assert not any("timing verifications" in line for line in _lines(lm, config)), "timed once, not every warm-up"
        list(Run(lm, PROMPT, config).events())
    assert asked, "the run verified something"
    assert not untimed, f"the run met widths still to time: {untimed}"


def _lines(lm: Any, config: DecodeConfig) -> list[str]:
    from decode_tui.core.warmup import warming

    return list(warming(lm, PROMPT, config))


def _threads(line: str) -> bool:
    """The warm-up's line for timing the thread count, said only where the process has more than one."""
    return "threads, for the count to decode on" in line
