"""The forward-pass timeline: one row per target forward, agreeing with the run's own counters."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from decode_tui.core.drafting.model_drafter import ModelDrafter
from decode_tui.core.drafting.prompt_lookup import PromptLookup
from decode_tui.core.params import SamplingParams
from decode_tui.core.record.detokenize import Detokenizer
from decode_tui.core.record.events import DraftVerified, Event, Finished, Started
from decode_tui.core.record.timeline import (
    ForwardRow,
    Timeline,
    expected_tokens_per_forward,
    per_position_rate,
    sparkline,
)
from decode_tui.core.record.transcript import Transcript
from decode_tui.core.strategies.autoregressive import autoregressive
from decode_tui.core.strategies.speculative import speculative

from .conftest import tiny_model
from .test_speculative import V, repetitive_prompt

STARTED = Started(mode="pld", model="tiny", prompt_token_ids=(1,), prompt_text="x", params={})


def watched(events: Any) -> tuple[list[ForwardRow], list[Event]]:
    timeline = Timeline()
    seen = list(timeline.watch([STARTED, *events]))
    return timeline.rows, seen


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["lookup", "model"])
def test_a_drafting_runs_rows_add_up_to_its_finished_counters(byte_bpe: Any, seed: int, kind: str) -> None:
    model = tiny_model("llama", vocab_size=V, seed=seed)
    drafter = PromptLookup(2, 5) if kind == "lookup" else ModelDrafter(tiny_model("qwen2", vocab_size=V, seed=9), V)
    transcript = Transcript("pld", repetitive_prompt(seed, 12), Detokenizer(byte_bpe), frozenset({V - 1}), 40)
    rows, events = watched(speculative(model, transcript, drafter, SamplingParams(), greedy=seed != 1,
                                       num_draft_tokens=5, generator=torch.Generator().manual_seed(seed)))
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.accepted is not None
    assert [r.forward for r in rows] == list(range(1, finished.target_forwards + 1))
    assert sum(r.tokens for r in rows) == finished.new_tokens
    assert sum(r.accepted or 0 for r in rows) == finished.accepted
    assert sum(r.k or 0 for r in rows) == finished.drafted
    verified = [e for e in events if isinstance(e, DraftVerified)]
    assert [r.k for r in rows if r.k is not None] == [len(v.verdicts) for v in verified]
    for r in rows:
        assert r.wall_ms >= 0
        if r.k is not None:  # a verifying forward: the strategy's own times, and accepted + 1 tokens at most
            assert r.draft_ms is not None and r.verify_ms is not None and r.verify_ms > 0
            assert r.tokens <= (r.accepted or 0) + 1
        else:
            assert r.tokens == 1  # the prefill, or a round with nothing to draft: a plain step


def test_a_greedy_run_has_a_row_per_token(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=0)
    transcript = Transcript("greedy", [1, 2, 3], Detokenizer(byte_bpe), frozenset({V - 1}), 12)
    rows, events = watched(autoregressive(model, transcript, SamplingParams(), greedy=True))
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert len(rows) == finished.target_forwards == finished.new_tokens
    assert all(r.tokens == 1 and r.k is None for r in rows)


def row(k: int | None, accepted: int | None) -> ForwardRow:
    return ForwardRow(1, (accepted or 0) + 1, k, accepted, None, None, 1.0)


def test_expected_tokens_per_forward_from_the_per_position_rate() -> None:
    rows = [row(None, None), row(3, 3), row(3, 0)]
    # Tested positions: 3 accepted in the first round; the second tested one and rejected it: a = 3 / 4.
    assert per_position_rate(rows) == pytest.approx(0.75)
    expected, observed = expected_tokens_per_forward(rows) or (0.0, 0.0)
    assert expected == pytest.approx((1 - 0.75**4) / 0.25)
    assert observed == pytest.approx((4 + 1) / 2)
    assert expected_tokens_per_forward([row(None, None)]) is None
    assert expected_tokens_per_forward([row(4, 4)]) == (5.0, 5.0)  # everything accepted: k + 1 each round


def test_sparkline_draws_a_bar_per_position() -> None:
    assert sparkline([1.0, 0.0, 0.5]) == "█▁▅"
    assert sparkline([]) == ""


@pytest.mark.parametrize("kind", ["lookup", "model"])
def test_the_forwards_screen_of_a_paused_run_counts_its_latest_round(byte_bpe: Any, kind: str) -> None:
    """Paused (or stepping) at a round's end, `f` lists every forward the stats bar counts, the latest included."""
    from decode_tui.tui.pump import StepTracker
    from decode_tui.tui.screens.forwards import ForwardsScreen

    model = tiny_model("llama", vocab_size=V, seed=0)
    drafter = PromptLookup(2, 5) if kind == "lookup" else ModelDrafter(tiny_model("qwen2", vocab_size=V, seed=9), V)
    transcript = Transcript("pld", repetitive_prompt(0, 12), Detokenizer(byte_bpe), frozenset({V - 1}), 40)
    steps, rounds = StepTracker(), 0
    trace: list[tuple[float, Event]] = [(0.0, STARTED)]
    for t, event in enumerate(speculative(model, transcript, drafter, SamplingParams(), greedy=True,
                                          num_draft_tokens=5)):
        trace.append((t * 0.01, event))
        rounds += isinstance(event, DraftVerified)
        if steps.closes_step(event) and rounds == 2:
            break  # the pump pauses here: the second round's tokens are all in
    forwards = max(getattr(e, "target_forwards", 0) or 0 for _, e in trace)
    screen = ForwardsScreen(trace)
    assert screen.finished is None and [r.forward for r in screen.timeline.rows] == list(range(1, forwards + 1))
    assert sum(1 for r in screen.timeline.rows if r.k is not None) == 2


# ------------------------------------------------------------ the draft's cost and the predicted speed-up


def test_leviathans_formula_and_why_a_well_accepted_draft_can_still_lose() -> None:
    from decode_tui.core.record.draft_stats import predicted_speedup

    assert predicted_speedup(0.9, 5, 0.0) == pytest.approx((1 - 0.9**6) / 0.1)  # a free draft: tokens a round
    assert predicted_speedup(0.9, 5, 0.2) == pytest.approx((1 - 0.9**6) / 0.1 / 2.0)
    assert predicted_speedup(1.0, 4, 0.25) == pytest.approx(5 / 2.0)  # every draft accepted: k + 1 tokens
    assert predicted_speedup(0.9, 5, 0.8) < 1.0  # 90 % accepted, but each draft step costs most of a target step
    assert predicted_speedup(0.9, 5, 0.2, verify=1.5) == pytest.approx((1 - 0.9**6) / 0.1 / 2.5)


def test_draft_stats_measure_c_against_a_plain_step_and_leave_out_the_first_round() -> None:
    from decode_tui.core.record.draft_stats import DraftStats, predicted_speedup

    stats = DraftStats()
    stats.record(4, 4, draft_s=1.0, verify_s=0.14, emitted=5)  # the first round also fed the prompt to the draft
    for k, n in ((4, 2), (2, 2), (4, 4), (2, 1)):
        # a draft forward 0.02 s; a verification 0.10 s + 0.01 s a drafted token (0.10 s: a plain step)
        stats.record(k, n, draft_s=0.02 * k, verify_s=0.10 + 0.01 * k, emitted=n + 1)
    assert stats.cost_ratio() == pytest.approx(0.2)
    assert stats.verify_steps() == pytest.approx(1.4)  # the median verification (0.14 s), in steps
    alpha = 13 / (13 + 2)  # accepted over tested: two rounds ended on a rejection
    assert stats.alpha() == pytest.approx(alpha)
    # One prediction, with what a verification really cost (1.4 steps), not the paper's 1.
    assert stats.predicted() == pytest.approx(predicted_speedup(alpha, 16 / 5, 0.2, verify=1.4))
    rounds_s = 1.14 + sum(0.02 * k + 0.10 + 0.01 * k for k in (4, 2, 4, 2))
    assert stats.observed() == pytest.approx((5 + 3 + 3 + 5 + 2) / rounds_s * 0.10)
    assert DraftStats().cost_ratio() is None and DraftStats().predicted() is None


def test_c_leaves_out_a_draft_that_first_caught_up_on_tokens_it_skipped() -> None:
    """After plain steps a draft model is fed every token it skipped before it drafts: that round's draft time
    is mostly the catch-up, no draft step's cost. An adaptive run that does not draft has little else, and
    counting those rounds made c 0.72 where a draft step cost 0.29 of a plain step (int4, SmolLM2, CPU)."""
    from decode_tui.core.record.draft_stats import DraftStats, caught_up
    from decode_tui.core.record.timeline import ForwardRow, draft_stats

    assert not caught_up(None) and not caught_up(1) and not caught_up(2) and caught_up(3)
    stats = DraftStats(plain_step_s=0.10)
    rows = []
    # Most rounds after the first catch up, as in a run that mostly takes plain steps.
    for i, (k, fed, draft_s) in enumerate(((4, 40, 1.0), (4, 1, 0.08), (2, 30, 0.50), (2, 12, 0.30),
                                          (2, 20, 0.40), (2, 2, 0.04))):
        stats.record(k, 1, draft_s=draft_s, verify_s=0.12, emitted=2, fed=fed)
        rows.append(ForwardRow(forward=i + 2, tokens=2, k=k, accepted=1, draft_ms=draft_s * 1e3, verify_ms=120.0,
                               wall_ms=200.0, step_ms=100.0, draft_fed=fed))
    assert stats.cost_ratio() == pytest.approx(0.2)  # 0.02 s a draft step, the catch-ups left out
    assert draft_stats(rows).cost_ratio() == pytest.approx(0.2)  # the same from the forwards a view has
    unknown = DraftStats(plain_step_s=0.10)  # a recording made before rounds said what they fed: all counted
    for k, draft_s in ((4, 1.0), (4, 0.08), (2, 0.50), (2, 0.30), (2, 0.40), (2, 0.04)):
        unknown.record(k, 1, draft_s=draft_s, verify_s=0.12, emitted=2)
    assert unknown.cost_ratio() == pytest.approx(1.5)  # the median of 0.02, 0.25, 0.15, 0.20 and 0.02 s a token


def test_the_cost_line_shows_c_the_prediction_and_the_measured_speed_up() -> None:
    from decode_tui.core.record.timeline import ForwardRow, draft_stats
    from decode_tui.tui.cost_view import cost_line

    rows = [ForwardRow(1, 1, None, None, None, None, 50.0)]
    rows += [ForwardRow(i + 2, n + 1, k, n, 20.0 * k, 100.0 + 30 * k, 0.0)
             for i, (k, n) in enumerate([(4, 4), (4, 3), (2, 2), (4, 4), (2, 1)])]
    stats = draft_stats(rows)
    line = cost_line(stats, measured=1.4)
    assert line is not None and "(inferred from the verifications)" in line  # no plain step timed
    predicted = stats.predicted()
    assert predicted is not None
    assert "c = 0.20 of it" in line and "measured 1.40x" in line
    assert "a verification v = 2.20" in line  # median of 220, 220, 160, 220 ms over 100 ms
    assert line.count("predicts") == 1 and f"predicts {predicted:.2f}x" in line, "one prediction, not two"
    short = cost_line(stats, short=True)
    assert short is not None and f"predicted {predicted:.2f}x" in short  # the panel says the same prediction
    assert cost_line(draft_stats(rows[:2])) is None  # the first round alone: no draft step timed
    # A plain step the run timed (on its DraftVerified events) is what the figures divide by.
    timed = [dataclasses.replace(r, step_ms=80.0) for r in rows]
    line = cost_line(draft_stats(timed), measured=1.4)
    assert line is not None and "a plain step of 80.0 ms (timed)" in line and "c = 0.25 of it" in line


def test_a_run_times_a_plain_step_once_and_every_view_divides_by_it(byte_bpe: Any) -> None:
    """c and v were inferred from the verifications: the panel, f and bench could each say another prediction.
    The run times one plain step at its start; its rounds carry it, and the run's Finished, the rows a viewer
    builds and their cost line give one and the same prediction."""
    from decode_tui.core.drafting.model_drafter import ModelDrafter
    from decode_tui.core.record.events import DraftVerified
    from decode_tui.core.record.timeline import Timeline, draft_stats
    from decode_tui.tui.cost_view import cost_line

    model = tiny_model("llama", vocab_size=V, seed=1)
    transcript = Transcript("speculative", repetitive_prompt(1, 12), Detokenizer(byte_bpe), frozenset({V - 1}), 40)
    timeline = Timeline()
    events = list(timeline.watch(speculative(model, transcript, ModelDrafter(tiny_model("llama", vocab_size=V,
                                                                                         seed=1), V),
                                             SamplingParams(), greedy=True, num_draft_tokens=4)))
    steps = {e.step_s for e in events if isinstance(e, DraftVerified)}
    (step,) = steps
    assert step is not None and step > 0
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.predicted_speedup is not None
    stats = draft_stats(timeline.rows)
    assert stats.plain_step_s == pytest.approx(step)
    assert stats.predicted() == pytest.approx(finished.predicted_speedup)
    line = cost_line(stats)
    assert line is not None and "(timed)" in line


def test_a_measured_speed_up_far_from_the_prediction_says_the_likely_cause() -> None:
    """A run on a busy machine said "4.18x predicted, this run 0.63x" and nothing else."""
    from decode_tui.core.record.draft_stats import DraftStats
    from decode_tui.tui.cost_view import cost_line

    busy = DraftStats(plain_step_s=0.05)
    for i, verify_s in enumerate((0.06, 0.30, 0.07, 0.25, 0.06, 0.28)):  # one draft length, times 5x apart
        busy.record(4, 4 if i % 2 else 3, draft_s=0.04, verify_s=verify_s)
    predicted = busy.predicted()
    assert predicted is not None
    cause = busy.far_from_prediction(predicted / 3)
    assert cause is not None and "the machine was busy" in cause
    assert busy.far_from_prediction(predicted * 1.1) is None, "close to the prediction: nothing to say"
    line = cost_line(busy, measured=predicted / 3)
    assert line is not None and "Far from the prediction" in line and "busy" in line
    short = cost_line(busy, measured=predicted / 3, short=True)
    assert short is not None and "far from it" in short
    falling = DraftStats(plain_step_s=0.05)
    for _ in range(4):
        falling.record(4, 1, draft_s=0.04, verify_s=0.07)  # accepted at the first position, never later
    assert "acceptance falls along the draft" in (falling.far_from_prediction(0.2) or "")


def test_a_plain_steps_time_never_comes_from_a_line_that_noise_tilted() -> None:
    """Under load a short draft's verification can time slower than a long one's: the line through them then
    crosses k = 0 near nothing, and c over it would read thousands. The cheapest median stands in instead."""
    from decode_tui.core.record.draft_stats import DraftStats

    stats = DraftStats()
    for k, verify_s in ((2, 0.05), (3, 0.20), (2, 0.05), (3, 0.20)):
        stats.record(k, k, draft_s=0.01 * k, verify_s=verify_s)
    assert stats.step_s() == pytest.approx(0.05)
    assert stats.cost_ratio() == pytest.approx(0.2)
    steady = DraftStats()
    for k, verify_s in ((1, 0.11), (5, 0.15), (1, 0.11)):
        steady.record(k, k, draft_s=0.01 * k, verify_s=verify_s)
    assert steady.step_s() == pytest.approx(0.10)  # the line's own value at k = 0, under the cheapest median
