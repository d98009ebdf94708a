"""Pilot tests of the app, driven by a deterministic fake decoder that yields the real event types."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import io
import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from textual.binding import Binding
from textual.widgets import ContentSwitcher, Static, TextArea

from decode_tui.core.errors import UsageError
from decode_tui.core.modes import MODES
from decode_tui.core.params import SamplingParams
from decode_tui.core.record.events import DraftProposed, DraftVerified, Event, TokenSampled
from decode_tui.tui.app import DecodeApp
from decode_tui.tui.bindings import explained
from decode_tui.tui.pump import EventPump
from decode_tui.tui.recording import read_recording, replay
from decode_tui.tui.screens.help import HelpScreen
from decode_tui.tui.settings import KNOBS, Settings, adjust, with_mode
from decode_tui.tui.widgets.beam_panel import BeamPanel
from decode_tui.tui.widgets.candidates import CandidatesPanel
from decode_tui.tui.widgets.caption import Caption
from decode_tui.tui.widgets.draft_panel import DraftPanel
from decode_tui.tui.widgets.lookup_panel import LookupPanel
from decode_tui.tui.widgets.run_header import RunHeader
from decode_tui.tui.widgets.stats_bar import StatsBar
from decode_tui.tui.widgets.text_pane import TextPane
from decode_tui.tui.widgets.token_inspector import TokenInspector
from decode_tui.tui.widgets.too_small import TooSmall

from .fake_decoder import WORDS, FakeDecoder

SIZE = (130, 40)


def in_event_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test with asyncio (no pytest plugin needed)."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return wrapper


async def settle(pilot: Any, app: DecodeApp, until: float = 5.0) -> None:
    """Let the worker and the drain timer catch up with a run that ends by itself."""
    deadline = time.monotonic() + until
    while time.monotonic() < deadline:
        await pilot.pause(0.05)
        if app.pump is not None and app.pump.finished.is_set() and app.pump.events.empty():
            await pilot.pause(0.1)
            return
    raise AssertionError("the run did not finish")


async def until(pilot: Any, condition: Callable[[], object], timeout: float = 5.0) -> None:
    """Wait, a few milliseconds at a time, until ``condition()`` holds; fail after ``timeout`` seconds.

    A condition wait, not a sleep: it returns as soon as the app got there, however loaded the machine.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for the condition")
        await pilot.pause(0.02)


def paused_at(app: DecodeApp, expected: str) -> Callable[[], bool]:
    """The run stopped at a step end with ``expected`` shown, nothing left to drain."""
    return lambda: (text(app) == expected and app.pump is not None and app.pump.paused and app.pump.events.empty())


def make(mode: str = "greedy", fake: FakeDecoder | None = None, **kwargs: Any) -> tuple[DecodeApp, FakeDecoder]:
    fake = fake or FakeDecoder()
    return DecodeApp(with_mode(Settings(), mode), fake.source, **kwargs), fake


def text(app: DecodeApp) -> str:
    return app.query_one(TextPane).plain


@in_event_loop
async def test_a_run_streams_to_the_end() -> None:
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert text(app) == "".join(WORDS)
        stats = app.query_one(StatsBar)
        result = stats.counters.result
        assert stats.counters.state == "finished" and result is not None and result.new_tokens == len(WORDS)
        last = app.query_one(CandidatesPanel).last
        assert last is not None and last.token_id == len(WORDS) - 1


@in_event_loop
async def test_a_long_note_stays_long_enough_to_read_and_an_error_stays_longest() -> None:
    """A short toast stays 6 s; a draft's note of a few hundred characters stays about a second per 15 of them;
    an error stays 30 s, however short."""
    app, _ = make()
    note = ("the int4 draft keeps transformers' forward for 7 of its 30 attentions, where a check at its build "
            "found the fused form computing otherwise: each launches more kernels a step, which a GPU pays for "
            "in the draft's cost (benchmarks/fused_check.py shows each check).")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        app.say("paused")
        app.say(note)
        app.say("no", "error")
        await pilot.pause()
        timeouts = {n.message: n.timeout for n in app._notifications}
        assert timeouts["paused"] == 6 and timeouts["no"] == 30
        assert timeouts[note] == pytest.approx(len(note) / 15) and timeouts[note] > 15


@in_event_loop
async def test_the_stats_bar_names_the_kernels_a_background_compile_switched_the_run_to() -> None:
    from decode_tui.tui.pump import Notice

    fake = FakeDecoder()

    def source(settings: Settings, live: Any) -> Any:
        inner = fake.source(settings, live)

        def events() -> Any:
            yield Notice("kernels", "eager graphs, compiling 0/1")
            for i, event in enumerate(inner()):
                yield event
                if i == 3:
                    yield Notice("kernels", "compiled graphs")

        return events

    app = DecodeApp(Settings(), source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        stats = app.query_one(StatsBar)
        assert stats.counters.kernels == "compiled graphs"
        assert str(stats.content).endswith(" · kernels: compiled graphs")
        assert not any("graphs" in n.message for n in app._notifications), "the stats bar's, not a toast"
    plain, _ = make()
    async with plain.run_test(size=SIZE) as pilot:
        await settle(pilot, plain)
        assert "kernels" not in str(plain.query_one(StatsBar).content), "no background compile, no word of it"


@pytest.mark.parametrize("mode", ["greedy", "sample", "beam", "speculative", "pld", "suffix"])
@in_event_loop
async def test_each_mode_shows_its_panel(mode: str) -> None:
    app, _ = make(mode)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        panel = {"greedy": "panel-candidates", "sample": "panel-candidates", "beam": "panel-beam",
                 "speculative": "panel-draft", "pld": "panel-pld", "suffix": "panel-pld"}[mode]
        assert app.query_one(ContentSwitcher).current == panel
        if mode == "beam":
            assert app.query_one(BeamPanel).history[-1].step == 2
        if mode in ("speculative", "pld"):
            rounds = app.query_one("#pld-rounds" if mode == "pld" else "#panel-draft", DraftPanel).rounds
            assert [r.verified.accepted for r in rounds] == [3, 1]
            assert rounds[0].extra_text == " jumps"  # the bonus token's text, not its id
            assert app.query_one(StatsBar).counters.state == "finished"
        if mode == "pld":
            lookup = app.query_one(LookupPanel)
            assert lookup.last is not None and lookup.last.round == 1 and lookup.last_accepted == 1


@in_event_loop
async def test_paused_run_advances_one_step_per_key() -> None:
    app, _ = make(start_paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.3)
        # A run started paused has decoded nothing (it said "1 token, 0.2 tok/s" before any key): n is its first.
        assert app.pump is not None and app.pump.paused and text(app) == "" and app.view.counters.tokens == 0
        await pilot.press("n")
        await until(pilot, paused_at(app, WORDS[0]))
        await pilot.press("n")
        await until(pilot, paused_at(app, "".join(WORDS[:2])))
        await pilot.press("n", "n")
        await until(pilot, paused_at(app, "".join(WORDS[:4])))
        await pilot.press("space")  # resume
        await settle(pilot, app)
        assert text(app) == "".join(WORDS)


@in_event_loop
async def test_a_step_in_speculative_mode_is_a_whole_draft_round() -> None:
    app, _ = make("speculative", start_paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await until(pilot, paused_at(app, WORDS[0]))  # the prefill's token
        await pilot.press("n")
        await until(pilot, paused_at(app, "".join(WORDS[:5])))  # 3 accepted + the bonus, in one step
        assert "target kept 3" in str(app.query_one("#caption", Caption).content)
        await pilot.press("n")
        await until(pilot, paused_at(app, "".join(WORDS[:7])))
        line = str(app.query_one("#caption", Caption).content)
        assert "2nd rejected: p=0.12 < u·q=0.33" in line and "resampled ' the' from max(0, p-q)" in line, line


@in_event_loop
async def test_a_caption_too_long_for_its_line_ends_in_an_ellipsis() -> None:
    """At 80 columns a draft round's caption was cut mid-word with nothing to say so."""
    app, _ = make("speculative", start_paused=True)
    async with app.run_test(size=(80, 24)) as pilot:
        for shown in (WORDS[0], "".join(WORDS[:5]), "".join(WORDS[:7])):
            await pilot.press("n")
            await until(pilot, paused_at(app, shown))
        caption = app.query_one("#caption", Caption)
        whole = str(caption.content)
        line = _shown(caption)[0]
        assert len(whole) > caption.content_size.width and line.endswith("…"), (whole, line)
        assert whole.startswith(line[:-1]), "the line is the caption's start"


@in_event_loop
async def test_auto_pause_stops_at_the_first_rejection() -> None:
    app, _ = make("speculative", auto_pause=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: any("first rejection" in m for m in app.messages))
        await until(pilot, paused_at(app, "".join(WORDS[:7])))  # the round with the rejection is complete
        await pilot.press("space")
        await settle(pilot, app)
        assert app.query_one(StatsBar).counters.state == "finished"


@in_event_loop
async def test_restart_runs_again_from_the_start() -> None:
    app, fake = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("r")
        await settle(pilot, app)
        assert text(app) == "".join(WORDS) and len(fake.runs) == 2


@in_event_loop
async def test_a_restart_clears_the_last_runs_candidates() -> None:
    """A replay's r left "step 10: argmax" of the run before in the candidates panel until its next step."""
    from decode_tui.tui.widgets.candidates import CandidatesPanel

    loading = threading.Event()
    loading.set()
    app, fake = make(fake=FakeDecoder(loading=loading))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app)
            panel = app.query_one(CandidatesPanel)
            assert panel.last is not None
            loading.clear()  # the new run "loads" until set: none of its steps come
            await pilot.press("r")
            await until(pilot, lambda: len(fake.runs) == 2)
            await pilot.pause(0.2)
            assert panel.last is None and "step" not in str(panel.render())
    finally:
        loading.set()


@in_event_loop
async def test_cycling_the_mode_mid_run_restarts_in_the_next_mode() -> None:
    app, fake = make(fake=FakeDecoder(delay=0.05))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: text(app) != "")  # mid-run
        first = app.pump
        await pilot.press("m")
        await settle(pilot, app)
        assert first is not None and first.finished.wait(2)
        assert [s.mode for s in fake.runs] == ["greedy", "sample"]
        assert app.settings.mode == "sample" and text(app) == "".join(WORDS)
        for _ in range(len(MODES) - 1):  # sample -> ... -> suffix -> greedy
            await pilot.press("m")
        await settle(pilot, app)
        assert [s.mode for s in fake.runs][-1] == "greedy"
        assert any("restarts" in m for m in app.messages)


@in_event_loop
async def test_a_sampling_change_applies_at_the_next_step_without_a_restart() -> None:
    app, fake = make("sample", fake=FakeDecoder(delay=0.08))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: text(app) != "")  # mid-run
        await pilot.press("t")  # temperature 1.0 -> 0.9
        await settle(pilot, app)
        assert len(fake.runs) == 1, "no restart"
        sampled = [e for _, e in app.view.trace if isinstance(e, TokenSampled)]
        stages = [tuple(s.stage for s in e.stages) for e in sampled]
        assert stages[0] == ("raw", "top_k") and stages[-1] == ("raw", "temperature", "top_k")
        assert app.settings.config.sampling.temperature == pytest.approx(0.9)
        assert any("from the next step" in m for m in app.messages)


@in_event_loop
async def test_a_sampling_change_after_the_run_ended_says_it_applies_to_the_next_run() -> None:
    # "from the next step" after the last step promised a change the user would never see.
    app, fake = make("sample")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("t")  # temperature 1.0 -> 0.9, on a finished run
        said = app.messages[-1]
        assert said == "temperature 1 → 0.9, for the next run (this one has ended; r restarts)", said
        assert len(fake.runs) == 1, "a knob does not restart a finished run by itself"
        await pilot.press("r")
        await settle(pilot, app)
        assert len(fake.runs) == 2 and fake.runs[-1].config.sampling.temperature == pytest.approx(0.9)


@pytest.mark.parametrize("knob", KNOBS, ids=lambda k: k.id)
@in_event_loop
async def test_every_knob_key_changes_its_setting(knob: Any) -> None:
    mode = {"num_beams": "beam", "length_penalty": "beam", "num_draft_tokens": "pld", "max_ngram_size": "pld",
            "confidence_threshold": "speculative"}.get(knob.id, "sample")
    app, _ = make(mode)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        before = knob.get(app.settings)
        down, up = knob.keys
        # From the default, move away from the limit it sits at (top-p 1.0 cannot rise), then back.
        rises = adjust(app.settings, knob.id, 1).applies is not None
        away, back = (up, down) if rises else (down, up)
        await pilot.press(away)
        await until(pilot, lambda: knob.get(app.settings) != before)
        moved = knob.get(app.settings)
        assert moved > before if rises else moved < before
        await pilot.press(back)
        await until(pilot, lambda: knob.get(app.settings) != moved)
        assert knob.get(app.settings) < moved if rises else knob.get(app.settings) > moved
        await settle(pilot, app)


@in_event_loop
async def test_beams_restart_the_run_and_length_penalty_reranks_at_once() -> None:
    app, fake = make("beam")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        panel = app.query_one(BeamPanel)
        assert [h.text for h in panel.finished()] == ["The<eos>", "The quick brown"]
        for _ in range(8):  # lp 1.0 -> 3.0: long hypotheses win
            await pilot.press("L")
        await until(pilot, lambda: app.settings.config.beam.length_penalty == pytest.approx(3.0))
        assert len(fake.runs) == 1, "re-ranking needs no new run"
        assert [h.text for h in panel.finished()] == ["The quick brown", "The<eos>"]
        await pilot.press("W")
        await settle(pilot, app)
        assert len(fake.runs) == 2 and fake.runs[-1].config.beam.num_beams == 5
        assert len(panel.history[-1].beams) == 5


@in_event_loop
async def test_a_rerank_puts_one_length_penalty_on_screen_and_a_search_shows_its_progress() -> None:
    """After `L`/`l` the early-stopping test is re-scored with the penalty the table ranks by, and the text pane
    shows that penalty's best hypothesis; while the search runs, the stats bar counts its steps, not 0 tokens."""
    app, _ = make("beam", fake=FakeDecoder(delay=0.3))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.view.counters.beam_steps >= 1)
        await until(pilot, lambda: "step " in _shown(app.query_one(StatsBar))[0])
        line = _shown(app.query_one(StatsBar))[0]
        assert "beam tok/s" in line and "0 tokens" not in line and "0.0 tok/s" not in line.split("beam")[0], line
        await settle(pilot, app)
        panel, pane = app.query_one(BeamPanel), app.query_one(TextPane)
        assert "early stop (False): best attainable -0.600 vs worst finished -0.800" in _plain(panel)
        for _ in range(8):  # lp 1.0 -> 3.0
            await pilot.press("L")
        await until(pilot, lambda: app.settings.config.beam.length_penalty == pytest.approx(3.0))
        shown = _plain(panel)
        # the fake's last step: its best open beam has Σ log p -1.5 over 3 tokens; finished -1.5 (2), -2.4 (3)
        assert (f"re-scored for lp=3): best attainable {-1.5 / 27:.3f} vs worst finished {-1.5 / 8:.3f} → "
                "would go on") in shown.replace("\n", " "), shown
        assert pane.instead is None, "the run's own tokens are the best under lp=3"
        for _ in range(12):  # lp 3.0 -> 0.0: the short hypothesis wins
            await pilot.press("l")
        await until(pilot, lambda: app.settings.config.beam.length_penalty == pytest.approx(0.0))
        assert panel.finished()[0].text == "The<eos>" and pane.instead == "The<eos>"
        assert "The<eos>" in _plain(pane)


@in_event_loop
async def test_a_knob_that_does_nothing_in_this_mode_says_so() -> None:
    app, fake = make("greedy")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("T")
        await until(pilot, lambda: any("no effect in greedy mode" in m for m in app.messages))
        assert len(fake.runs) == 1


@in_event_loop
async def test_slow_motion_reaches_the_decoder_thread() -> None:
    app, _ = make(fake=FakeDecoder(delay=0.01))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("s", "s")  # the README: s slower, S faster
        assert app.pump is not None and app.pump.slow_motion_s == 0.1
        await pilot.press("S")
        assert app.pump.slow_motion_s == 0.05
        await pilot.press("S")
        assert app.pump.slow_motion_s == 0.0
        await settle(pilot, app)


@in_event_loop
async def test_editing_the_prompt_restarts_with_it_and_refuses_an_empty_one() -> None:
    app, fake = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("e")
        await until(pilot, lambda: app.screen.query(TextArea))
        area = app.screen.query_one(TextArea)
        area.text = "   "
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "empty" in str(app.screen.query_one("#prompt-error").render()))
        area.text = "Tell me about foxes."
        await pilot.press("ctrl+s")
        await settle(pilot, app)
        assert fake.runs[-1].prompt == "Tell me about foxes." and len(fake.runs) == 2


@in_event_loop
async def test_loading_a_missing_model_shows_why_and_keeps_the_current_one(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from decode_tui.core.model import registry

    monkeypatch.setattr(registry, "_hub_snapshot", lambda repo: None)  # no hub cache: nothing is on this machine
    monkeypatch.setenv("DECODE_TUI_CACHE", str(tmp_path))
    app, fake = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        app.action_load_model()
        await until(pilot, lambda: type(app.screen).__name__ == "ModelPicker")
        await pilot.pause()
        title, box = app.screen.query_one("#model-title"), app.screen.query_one("#model-box")
        assert title.size.width <= box.content_size.width and title.size.height > 1, "wrapped, not cut at the box"
        aliases = str(app.screen.query_one("#model-aliases", Static).render())
        assert "microsoft/Phi-3-mini-4k-instruct  (not on this machine)" in aliases, "which ones load here"
        assert "HuggingFaceTB/SmolLM2-135M-Instruct  (fetched when chosen)" in aliases, aliases
        await pilot.press(*"no-such-model", "enter")
        await until(pilot, lambda: any("no-such-model" in m for m in app.messages))
        assert app.settings.model == "smollm2" and len(fake.runs) == 1
        await pilot.press("r")
        await settle(pilot, app)
        assert app.is_running and len(fake.runs) == 2


@in_event_loop
async def test_help_themes_and_prompt_editing_work_while_the_model_loads() -> None:
    loaded = threading.Event()
    app, fake = make(fake=FakeDecoder(loading=loaded))
    try:
        async with app.run_test(size=SIZE) as pilot:
            stats = app.query_one(StatsBar)
            await until(pilot, lambda: stats.counters.state == "loading fake…")
            assert text(app) == ""
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen))
            await pilot.press("escape")
            await pilot.press("c")
            assert app.theme == "decode-presenter"
            await pilot.press("e")
            await until(pilot, lambda: app.screen.query(TextArea))
            app.screen.query_one(TextArea).text = "Tell me about foxes."
            await pilot.press("ctrl+s")
            await until(pilot, lambda: len(fake.runs) == 2 or app.settings.prompt == "Tell me about foxes.")
            # Still "loading": the edited run waits for the load to end, and nothing is lost.
            assert app.pump is not None and not app.pump.finished.is_set()
            loaded.set()
            await settle(pilot, app)
            assert [run.prompt for run in fake.runs][-1] == "Tell me about foxes." and len(fake.runs) == 2
            assert text(app) == "".join(WORDS) and stats.counters.state == "finished"
    finally:
        loaded.set()  # a failed assertion must not leave the fake's thread waiting


def test_a_name_that_gives_way_keeps_its_end_from_a_words_start() -> None:
    from decode_tui.tui.widgets.run_header import cut_keeping_end

    label = "the lesson's recording (04-speculative.jsonl)"
    assert cut_keeping_end(label, 28, 12) == "…(04-speculative.jsonl)", "not '…ding (04-speculative.jsonl)'"
    assert cut_keeping_end("/models/a-very-long-model-name", 12, 8) == "…-model-name"
    assert cut_keeping_end("short.jsonl", 40, 12) == "short.jsonl"
    assert cut_keeping_end(label, 16, 12) == "…culative.jsonl", "a cut that took the '(' leaves no stray ')'"


@in_event_loop
async def test_before_the_run_starts_the_header_says_no_auto_auto() -> None:
    """The header read "smollm2 · auto auto · GREEDY" until the first step: "auto" is "not chosen yet"."""
    from decode_tui.tui.widgets.run_header import RunHeader

    app, _ = make(start_paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.1)
        header = app.query_one(RunHeader)
        header.show(app.settings, None, "loading")
        assert "auto" not in header._shown.splitlines()[0], header._shown


def test_probabilities_below_a_tenth_keep_two_significant_digits() -> None:
    from decode_tui.tui.numbers import prob

    # The acceptance test read q 0.02 and p 0.01 beside u tested against p / q = 0.64: two decimals had made
    # p = 0.0128 into 0.01. Two significant digits keep the ratio readable from the figures shown.
    assert (prob(0.0128), prob(0.02), prob(0.064), prob(0.002), prob(4.1e-05)) == ("0.013", "0.02", "0.064", "0.002",
                                                                                   "4.1e-05")
    assert (prob(0.83), prob(0.12), prob(0.0999), prob(1.0), prob(0.0)) == ("0.83", "0.12", "0.10", "1.00", "0.00")
    assert float(prob(0.0128)) / float(prob(0.02)) == pytest.approx(0.0128 / 0.02, rel=0.05)


def test_bars_show_eighths_of_a_cell() -> None:
    from decode_tui.tui.numbers import bar

    # In a 4-cell bar (the shortest, an 80-column candidates panel) whole cells drew 6.1 % and 0.4 % both as one
    # cell, as tall as 20 %.
    assert (bar(0.061, 4), bar(0.004, 4), bar(0.2, 4), bar(0.0, 4), bar(1.0, 4)) == ("▎", "▏", "▊", "", "████")
    assert bar(0.061, 20) == "█▎" and bar(0.25, 20) == "█████"


@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.integers(1, 40))
def test_a_bar_fits_its_width_grows_with_p_and_shows_any_p_above_zero(a: float, b: float, width: int) -> None:
    from decode_tui.tui.numbers import EIGHTHS, bar

    def eighths(shown: str) -> int:
        return 8 * shown.count("█") + sum(EIGHTHS.index(ch) for ch in shown if ch != "█")

    assert len(bar(a, width)) <= width and (bar(a, width) != "") == (a > 0)
    if a <= b:
        assert eighths(bar(a, width)) <= eighths(bar(b, width))


def test_a_beams_text_is_quoted_without_escaping_its_quotes() -> None:
    from decode_tui.tui.widgets.beam_panel import quoted

    assert quoted(' is "Mermaid\'s Brew"') == '\' is "Mermaid\'s Brew"\'', "repr wrote Mermaid\\'s"
    assert quoted("a\nb\tc") == "'a\\nb\\tc'", "line breaks and tabs still show as escapes"


@in_event_loop
async def test_the_footer_shows_the_help_key_in_80_columns_and_every_key_at_130() -> None:
    """The footer showed bindings in their order with long descriptions, and "? Help" came last: cut off
    below about 130 columns, so nothing on screen said how to see the keys."""
    app, _ = make()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        footer = app.screen._compositor.render_strips()[-1].text
        assert "? Keys" in " ".join(footer.split()) and "n Step" in " ".join(footer.split()), footer
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        footer = " ".join(app.screen._compositor.render_strips()[-1].text.split())
        assert all(f"{key} {word}" in footer for key, word in (("?", "Keys"), ("f", "Forwards"), ("q", "Quit"))), \
            footer


def test_the_inspector_says_the_test_a_drafted_token_met() -> None:
    """It printed "u=-" under greedy verification, which draws no u, and never said what was compared."""
    from decode_tui.core.record.events import PositionVerdict
    from decode_tui.tui.widgets.token_inspector import verdict_line

    sampled = PositionVerdict(0, 5, p=0.3, q=0.6, u=0.55, verdict="rejected")
    assert verdict_line(sampled, copied=False) == ("drafted with q=0.600; the target's p=0.300; "
                                                   "u=0.550 ≥ min(1, p/q)=0.500 → rejected")
    greedy = PositionVerdict(1, 6, p=0.6, q=0.27, u=None, verdict="accepted")
    assert verdict_line(greedy, copied=False).endswith("p=0.600; it is the target's argmax → accepted")
    copy = PositionVerdict(2, 7, p=0.1, q=1.0, u=None, verdict="rejected")
    assert verdict_line(copy, copied=True) == ("copied from the text (q=1); the target's p=0.100; "
                                               "the target's argmax is another token → rejected")


@in_event_loop
async def test_selecting_a_token_shows_its_alternatives() -> None:
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("left", "left")
        inspector = app.query_one(TokenInspector)
        assert app.query_one(TextPane).selected == len(WORDS) - 2
        assert inspector.has_class("visible") and "' cat'" in _plain(inspector)
        await pilot.press("escape")
        assert app.query_one(TextPane).selected is None and not inspector.has_class("visible")
        await pilot.press("b")
        assert app.query_one(TextPane).boundaries


@in_event_loop
async def test_the_theme_key_cycles_all_four_themes() -> None:
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        seen = [app.theme]
        for _ in range(4):
            await pilot.press("c")
            seen.append(app.theme)
        assert seen == ["decode-dark", "decode-presenter", "decode-colorblind", "decode-mono", "decode-dark"]


@in_event_loop
async def test_no_color_starts_in_the_monochrome_theme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert app.theme == "decode-mono"


@in_event_loop
async def test_help_lists_every_binding() -> None:
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert isinstance(app.screen, HelpScreen)
        shown = app.screen.bindings_shown
        assert {b.id for b in shown} == {b.id for b in DecodeApp.BINDINGS if isinstance(b, Binding)}
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


@pytest.mark.parametrize("binding", DecodeApp.BINDINGS)
def test_every_binding_has_an_id_and_a_description(binding: object) -> None:
    assert getattr(binding, "id", None) and getattr(binding, "description", None)


def test_the_readme_names_every_binding_id_a_keymap_can_move() -> None:
    """A keymap moves keys by id: an id the README leaves out (forwards, race, screenshot were) cannot be found."""
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    said = readme[readme.index("The ids are in the third column"):]
    said = " ".join(said[: said.index("A file that is")].split())
    for binding in DecodeApp.BINDINGS:
        ident = str(getattr(binding, "id", ""))
        knob, _, direction = ident.rpartition(".")
        named = f"`{ident}`" in said or (direction in ("up", "down", "next", "previous", "clear")
                                         and f"`{knob}" in said) or f"`{knob}`" in said
        assert named, f"the README does not name the binding id {ident!r}"


def test_binding_ids_and_keys_are_unique() -> None:
    bindings = [b for b in DecodeApp.BINDINGS if isinstance(b, Binding)]
    keys = [k for b in bindings for k in b.key.split(",")]
    assert len({b.id for b in bindings}) == len(bindings) and len(set(keys)) == len(keys)


@in_event_loop
async def test_the_command_palette_offers_every_action_and_loading_a_model() -> None:
    from decode_tui.tui.commands import DecodeCommands

    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        provider = DecodeCommands(app.screen)
        names = [name for name, _, _ in provider._commands()]
        for binding in app.all_bindings():
            assert explained(binding) in names
        assert "Load another model…" in names and "Mode: pld" in names
        await pilot.press("ctrl+p")
        await until(pilot, lambda: type(app.screen).__name__ == "CommandPalette")


@in_event_loop
async def test_export_then_replay_plays_the_same_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    app, _ = make("speculative")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("x")
        original = text(app)
    exported = tmp_path / "decode-tui-trace-speculative-1.jsonl"
    header, events = read_recording(exported)
    assert header["settings"]["config"]["mode"] == "speculative"
    replayed = DecodeApp(with_mode(Settings(), "speculative"), lambda s, live: replay(events, 0.0),
                         replaying=exported.name)
    async with replayed.run_test(size=SIZE) as pilot:
        await settle(pilot, replayed)
        assert text(replayed) == original
        rounds = replayed.query_one("#panel-draft", DraftPanel).rounds
        assert [r.verified.accepted for r in rounds] == [3, 1]
        said = len(replayed.messages)
        # A replay cannot change its mode or prompt: the footer does not offer the keys, and they say why.
        footer = replayed.screen._compositor.render_strips()[-1].text
        assert "Mode" not in footer and "Prompt" not in footer and "Pause" in footer, footer
        await pilot.press("m")
        await until(pilot, lambda: len(replayed.messages) == said + 1)
        assert replayed.settings.mode == "speculative" and "cannot change" in replayed.messages[-1]
    live, _ = make("speculative")
    async with live.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "Mode" in live.screen._compositor.render_strips()[-1].text)
        assert "Prompt" in live.screen._compositor.render_strips()[-1].text, "a live run offers them"


@in_event_loop
async def test_record_writes_a_replayable_file(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    app, _ = make("pld", record=path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["event"] == "recording"
    assert json.loads(lines[-1])["event"] == "finished"
    _, events = read_recording(path)
    assert [type(e).__name__ for _, e in events][:2] == ["Started", "TokenEmitted"]


@pytest.mark.parametrize("content", ["", "not json\n", '{"event": "recording", "version": 1}\n{"event": "bogus"}\n'])
def test_a_bad_recording_is_refused_with_a_message(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UsageError):
        read_recording(path)


@in_event_loop
async def test_a_replay_pauses_and_steps_like_a_live_run() -> None:
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        recorded = list(app.view.trace)
    replayed = DecodeApp(Settings(), lambda s, live: replay(recorded, 0.0), start_paused=True, replaying="x")
    async with replayed.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await until(pilot, paused_at(replayed, WORDS[0]))
        await pilot.press("n")
        await until(pilot, paused_at(replayed, "".join(WORDS[:2])))


def more_said(app: DecodeApp, said: int) -> bool:
    return len(app.messages) > said


@in_event_loop
async def test_what_a_replay_cannot_do_says_why_and_what_to_do_where_the_user_is() -> None:
    """In a replay m (the mode), e (the prompt), R (a race), the palette's mode entries and Enter on a token (a
    branch) each say why not. In a terminal the advice is a command to type; opened from the start screen (a
    browser's tab of a classroom, which has no shell) it is the list's: q goes back to it."""
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        recorded = list(app.view.trace)
    for from_list in (False, True):
        replayed = DecodeApp(Settings(), lambda s, live: replay(recorded, 0.0), replaying="x.jsonl",
                             from_list=from_list)
        async with replayed.run_test(size=SIZE) as pilot:
            await settle(pilot, replayed)
            for key in ("m", "e", "R"):
                said = len(replayed.messages)
                await pilot.press(key)
                await until(pilot, functools.partial(more_said, replayed, said))
            replayed.switch_mode_to("pld")  # what the palette's "Mode: pld" calls
            await pilot.pause()
            advice = replayed.messages[-4:]
            assert all("This is a replay of x.jsonl" in m for m in advice), advice
            if from_list:
                assert all("q goes back to the list" in m and "decode-tui" not in m for m in advice), advice
            else:
                assert all("`decode-tui " in m for m in advice), advice


@in_event_loop
async def test_a_replay_of_a_mid_run_export_is_labelled_and_ends_with_the_recorded_figures() -> None:
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        # Exported mid-run: the first few tokens, not the finished event; t as recorded, 0.5 s a token.
        cut = [(0.5 * i, e) for i, (_, e) in enumerate(app.view.trace[:5])]
    assert not any(type(e).__name__ == "Finished" for _, e in cut)
    tokens = sum(type(e).__name__ == "TokenEmitted" for _, e in cut)
    replayed = DecodeApp(Settings(), lambda s, live: replay(cut, 0.0), replaying="mid-run.jsonl")
    async with replayed.run_test(size=SIZE) as pilot:
        await settle(pilot, replayed)
        stats = replayed.query_one(StatsBar)
        assert stats.counters.state == "recording ends here", "a replay that stops mid-run ends, not left running"
        assert stats.counters.elapsed_s == pytest.approx(0.5 * (len(cut) - 1)), "the recorded time, not the wall clock"
        await pilot.pause(0.3)
        assert stats.counters.elapsed_s == pytest.approx(0.5 * (len(cut) - 1)), "and the clock stopped"
        assert any(f"{tokens} tokens" in m and "recording ends here" in m for m in replayed.messages)
        assert "REPLAY of mid-run.jsonl" in _plain(replayed.query_one(RunHeader))


@in_event_loop
async def test_a_long_recording_or_model_name_gives_way_in_the_header_and_the_prompt_stays() -> None:
    """A first line wider than the terminal wrapped, and pushed the prompt out of the header's three lines."""
    long_name = "the lesson's recording (07-adaptive-draft-length.jsonl)"
    long_model = "/home/someone/checkpoints/an-organisation/a-very-long-model-name-Instruct-v2"
    settings = dataclasses.replace(with_mode(Settings(), "speculative"), model=long_model)
    app = DecodeApp(settings, FakeDecoder().source, replaying=long_name)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        first, params, prompt = _shown(app.query_one(RunHeader))
        assert first.endswith("SPECULATIVE · finished") and len(first) < 80, first
        assert first.startswith(" REPLAY …-length.jsonl  …") and "-Instruct-v2 · cpu float32" in first, first
        assert prompt.startswith(" prompt: ") and "k≤" in params, (params, prompt)
    app = DecodeApp(with_mode(Settings(), "speculative"), FakeDecoder().source, replaying=long_name)
    async with app.run_test(size=(80, 24)) as pilot:  # a lesson at 80 columns: only the recording's name gives way
        await settle(pilot, app)
        first = _shown(app.query_one(RunHeader))[0]
        assert first.endswith("…ve-draft-length.jsonl  smollm2 · cpu float32 · SPECULATIVE · finished"), first
        assert len(first) < 80, first
    app = DecodeApp(settings, FakeDecoder().source, replaying="x.jsonl")
    async with app.run_test(size=(160, 24)) as pilot:  # room for both: nothing is cut
        await settle(pilot, app)
        assert f"REPLAY of x.jsonl   {long_model}  ·" in _shown(app.query_one(RunHeader))[0]
        await pilot.resize_terminal(80, 24)  # and a finished run's header fits again when the terminal shrinks
        await pilot.pause(0.2)
        first = _shown(app.query_one(RunHeader))[0]
        assert len(first) < 80 and first.endswith("SPECULATIVE · finished"), first


@in_event_loop
async def test_the_stats_bar_keeps_every_figure_whole_in_80_columns() -> None:
    """The full line (105 cells for a finished speculative run) was cut mid-figure at 80 columns."""
    app, _ = make("speculative")
    async with app.run_test(size=(160, 40)) as pilot:  # room: the full labels
        await settle(pilot, app)
        wide = _shown(app.query_one(StatsBar))[0].strip().split(" · ")
        assert wide[:2] == ["finished", "7 tokens"] and "3 target forwards" in wide and wide[-1] == "finish: length"
    app, _ = make("speculative")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        bar = app.query_one(StatsBar)
        (line,) = _shown(bar)
        parts = line.strip().split(" · ")
        assert parts[:2] == ["finished", "7 tok"] and "3 fwd" in parts and "kept 71%" in parts, line
        assert parts[-1] == wide[-2] and "finish:" not in line, "the finish reason (the caption says it) goes first"
        assert parts[2] == wide[2] and parts[2].endswith(" tok/s"), "the rate stays"


@in_event_loop
async def test_a_slow_step_shows_a_busy_indicator_that_goes_when_the_step_comes() -> None:
    app, _ = make("speculative", fake=FakeDecoder(delay=1.5))
    async with app.run_test(size=SIZE) as pilot:
        panels = app.query_one("#panels")
        deadline = time.monotonic() + 5
        while "busy" not in str(panels.border_subtitle) and time.monotonic() < deadline:
            await pilot.pause(0.05)
        label = str(panels.border_subtitle)
        assert label.startswith("busy ") and "verifying" in label, label
        before = len(app.view.trace)
        await until(pilot, lambda: len(app.view.trace) > before)
        # the indicator goes once the step's events arrive
        await until(pilot, lambda: "busy" not in str(panels.border_subtitle))
        await pilot.press("q")


@in_event_loop
async def test_quit_mid_run_leaves_no_thread_running() -> None:
    app, _ = make(fake=FakeDecoder(WORDS * 50, delay=0.01))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: text(app) != "")  # mid-run
        pump = app.pump
        await pilot.press("q")
    assert pump is not None and pump.finished.wait(5), "the decoder thread stopped"
    assert app.return_code == 0


@in_event_loop
async def test_quitting_right_after_a_burst_of_restarts_exits_within_a_second() -> None:
    """m, w, W, r within a second queue runs behind runs; q must still end every one of them at once."""
    import threading

    pumps: list[EventPump] = []
    app, _ = make("beam", fake=FakeDecoder(WORDS * 50, delay=0.2))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.pump is not None)
        for key in ("m", "w", "W", "r", "m", "r"):
            await pilot.press(key)
            if app.pump is not None and app.pump not in pumps:
                pumps.append(app.pump)
        started = time.monotonic()
        await pilot.press("q")
    assert all(p.finished.wait(1.0) for p in pumps), "a queued run's thread was left waiting"
    assert time.monotonic() - started < 2.0
    assert app.return_code == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("decode-tui-decoder") and t.is_alive()
                and not t.daemon and any(not p.finished.is_set() for p in pumps)]


@in_event_loop
async def test_the_last_run_of_a_burst_of_restarts_runs_to_its_end() -> None:
    """Runs replaced while still queued never start; the one queued behind them must not wait for them."""
    app, _ = make("greedy", fake=FakeDecoder(delay=0.05))
    async with app.run_test(size=SIZE) as pilot:
        for key in ("r", "r", "m", "r", "m"):
            await pilot.press(key)
        await settle(pilot, app, until=10)
        assert app.query_one(StatsBar).counters.state == "finished"
        assert app.settings.mode == "beam"


def test_quitting_while_a_run_loads_a_model_exits_within_a_second() -> None:
    """A run inside a load (from_pretrained: seconds, or minutes for a big model) cannot stop at a step boundary;
    the app's exit must not wait for it."""
    loading = threading.Event()

    def source(settings: Settings, live: Any) -> Any:
        def events() -> Any:
            loading.set()
            time.sleep(6)  # a model load that nothing can interrupt
            yield from ()
        return events

    async def drive() -> None:
        app = DecodeApp(Settings(), source)
        async with app.run_test(size=SIZE) as pilot:
            while not loading.is_set():
                await pilot.pause(0.05)
            await pilot.press("q")

    started = time.monotonic()
    asyncio.run(drive())  # including the event loop's shutdown, which joins its default executor
    assert time.monotonic() - started < 3.0


@in_event_loop
async def test_a_mode_change_shows_the_new_panel_at_once_and_empty() -> None:
    app, fake = make("speculative", fake=FakeDecoder(delay=0.05))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await until(pilot, lambda: app.query_one("#panel-draft", DraftPanel).rounds)
        fake.delay = 30.0  # the next run shows nothing for a long while: what is on screen is the reset
        await pilot.press("m")  # speculative -> pld
        switcher = app.query_one("#panels", ContentSwitcher)
        assert switcher.current == "panel-pld", "switched in the key's handler, not after the old run ends"
        assert app.query_one("#pld-rounds", DraftPanel).rounds == []
        await pilot.press("q")


@pytest.mark.parametrize("num_beams", [2, 4])
@in_event_loop
async def test_a_beam_run_to_the_length_limit_shows_no_placeholder_on_screen(byte_bpe: Any, num_beams: int) -> None:
    """The real beam search on a tiny model, to max_new_tokens: nothing below -1e8 in the events or on screen."""
    import re

    from decode_tui.core.params import BeamParams, DecodeConfig
    from decode_tui.core.run import Run

    from .conftest import tiny_model
    from .test_autoregressive import loaded

    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=3, initializer_range=0.05), byte_bpe, 2)
    lm = dataclasses.replace(lm, eos_token_ids=frozenset())  # no EOS: the search must run to the limit
    config = DecodeConfig(mode="beam", max_new_tokens=6, beam=BeamParams(num_beams, 1.0, "never", num_beams))
    settings = dataclasses.replace(Settings(), config=config)
    app = DecodeApp(settings, lambda s, live: lambda: Run(lm, s.prompt, s.config, live=live).events())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, until=90)  # a wait, not a timing: a full CI on two cores once took over 30 s
        screen = " ".join(_plain(w) for w in (app.query_one(BeamPanel), app.query_one(Caption)))
        numbers = [float(x) for x in re.findall(r"-?\d+\.\d+", screen)]
        assert numbers and min(numbers) > -1e8, screen
        assert "no beam left open" in _plain(app.query_one(Caption)) or "finished" in _plain(app.query_one(Caption))
    events = [e for _, e in app.view.trace]
    assert any(type(e).__name__ == "BeamStepped" for e in events)
    assert "-1000000000" not in "".join(e.to_json() for e in events)


@in_event_loop
async def test_ctrl_c_exits_with_130_and_stops_the_decoder() -> None:
    app, _ = make(fake=FakeDecoder(WORDS * 50, delay=0.01))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: text(app) != "")  # mid-run
        pump = app.pump
        await pilot.press("ctrl+c")
    assert pump is not None and pump.finished.wait(5)
    assert app.return_code == 130


@in_event_loop
async def test_a_failing_run_shows_its_message_and_the_app_stays_usable() -> None:
    fake = FakeDecoder(WORDS[:2], fail_with=UsageError("The prompt is 9000 tokens long, but fake reads at most "
                                                        "8192 tokens. Shorten the prompt."))
    app, _ = make(fake=fake)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert app.error is not None and "Shorten the prompt" in app.error
        assert app.query_one(StatsBar).counters.state == "error"
        assert app.outcome() == (2, "decode-tui: the last run failed: " + app.error)  # a usage error's own status
        await pilot.press("space", "m")  # still answers keys, and can start another run
        await settle(pilot, app)
        assert app.is_running and len(fake.runs) == 2


@in_event_loop
async def test_a_bug_in_the_decoder_thread_keeps_its_traceback_and_ends_the_command_with_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected exception in a run was shown as the last run's failure and the command exited 0, with no
    traceback kept: it is a bug, like one in the app. The app stays usable; the command ends with 1 and the line
    that says where the traceback is, even after a later run went well."""
    monkeypatch.setenv("DECODE_TUI_CACHE", str(tmp_path))
    fake = FakeDecoder(WORDS[:2], fail_with=RuntimeError("an index out of range"))
    app, _ = make(fake=fake)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        code, said = app.outcome()
        assert code == 1 and said is not None and "RuntimeError: an index out of range" in said, said
        reports = list((tmp_path / "crashes").glob("crash-*.txt"))
        assert len(reports) == 1 and str(reports[0]) in said
        text = reports[0].read_text(encoding="utf-8")
        assert "Traceback" in text and "an index out of range" in text and "fake_decoder.py" in text
        assert app.error is not None and str(reports[0]) in app.error  # the toast says where, too
        fake.fail_with = None
        await pilot.press("m")  # a run after it goes well
        await settle(pilot, app)
        assert app.error is None and app.outcome()[0] == 1


def test_the_command_ends_with_the_apps_outcome_and_says_it(capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`_run_app` turns a quit (status 0) into the outcome's status, and prints its line once the app is gone."""
    import typer

    from decode_tui.cli import commands
    from decode_tui.cli.commands import _run_app

    monkeypatch.setattr(commands, "need_terminal", lambda command: None)  # the test's stdin is no terminal
    # An earlier test in this worker may have started a background compile, after which _run_app ends the process
    # with os._exit (as it must in the app, where a compile thread cannot be stopped): not this test's subject.
    monkeypatch.delitem(sys.modules, "decode_tui.core.execution.background_compile", raising=False)

    class Quit:
        pump = None

        def __init__(self, outcome: tuple[int, str | None]) -> None:
            self.said = outcome

        def run(self) -> int:
            return 0

        def outcome(self) -> tuple[int, str | None]:
            return self.said

    for outcome in ((1, "decode-tui: the run stopped on a bug"), (3, "decode-tui: the last run failed: no"), (0, None)):
        with pytest.raises(typer.Exit) as ended:
            _run_app(Quit(outcome), "run")
        assert ended.value.exit_code == outcome[0]
        assert capsys.readouterr().err == ("" if outcome[1] is None else outcome[1] + "\n")


@in_event_loop
async def test_a_too_small_terminal_shows_a_notice_instead_of_the_layout() -> None:
    app, fake = make()
    async with app.run_test(size=(60, 15)) as pilot:
        await settle(pilot, app)
        notice = app.query_one(TooSmall)
        assert notice.display and not app.query_one("#main").display
        assert "60×15" in _plain(notice)
        # Keys other than q do nothing behind the notice: no new mode, no restart, no dialog, no notification.
        await pilot.press("m", "r", "question_mark")
        await settle(pilot, app)
        assert app.settings.mode == "greedy" and len(fake.runs) == 1 and app.screen is app.screen_stack[0]
        assert not app._notifications
        await pilot.resize_terminal(*SIZE)
        await until(pilot, lambda: not notice.display and app.query_one("#main").display)
        await pilot.press("m")
        await until(pilot, lambda: app.settings.mode != "greedy")
        # A dialog open when the terminal shrinks gives way to the notice (it was drawn over it).
        from decode_tui.tui.screens.help import HelpScreen

        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert all(child.display for child in app.screen.children)
        await pilot.resize_terminal(60, 15)
        await until(pilot, lambda: not any(child.display for child in app.screen.children))
        assert notice.display
        await pilot.resize_terminal(*SIZE)
        await until(pilot, lambda: all(child.display for child in app.screen.children))


def test_adjust_clamps_at_the_limits_and_validates() -> None:
    settings = Settings()
    settings = settings.replace_config(sampling=SamplingParams(top_p=1.0))
    change = adjust(settings, "top_p", +1)
    assert change.applies is None and "limit" in change.message
    low = settings.replace_config(mode="sample", sampling=SamplingParams(temperature=0.0))
    assert adjust(low, "temperature", -1).applies is None


def test_the_pump_runs_a_source_to_its_end_in_order() -> None:
    def source() -> Any:
        app, fake = make()
        return fake.source(with_mode(Settings(), "speculative"), app.live)()

    pump = EventPump(source)
    pump.run()
    events: list[Event] = pump.drain()
    assert type(events[0]).__name__ == "Started" and type(events[-1]).__name__ == "Finished"


def test_a_queued_run_that_is_stopped_never_waits_for_the_run_before_it() -> None:
    """A burst of restarts queues runs behind runs; stopping one that waits must free its thread at once."""
    import threading

    never = threading.Event()  # the previous run's end, which never comes (a decoder stuck elsewhere)
    started: list[int] = []

    def source() -> Any:
        started.append(1)
        return iter(())

    pump = EventPump(source, after=never)
    thread = threading.Thread(target=pump.run)
    thread.start()
    pump.stop()
    thread.join(timeout=2)
    assert not thread.is_alive(), "the queued run still waits after stop()"
    assert pump.finished.is_set() and started == [], "stopped before it started: it never decoded"



def test_a_pump_that_waits_until_shown_holds_the_run_at_its_start_until_the_ui_says_so() -> None:
    """The decoder waits after Started (before any forward pass) until the UI has shown the run's start; a UI
    that never says so costs at most SHOWN_WAIT_S once, and a stop releases the wait at once."""
    from decode_tui.tui import pump as pump_module

    def source() -> Any:
        app, fake = make()
        return fake.source(with_mode(Settings(), "greedy"), app.live)()

    pump = EventPump(source, wait_until_shown=True)
    thread = threading.Thread(target=pump.run)
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while pump.events.empty() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)
        held = pump.drain()
        assert [type(e).__name__ for e in held] == ["Started"], "nothing decoded before the start is shown"
        pump.shown.set()
        thread.join(timeout=5)
        rest = pump.drain()
        assert type(rest[-1]).__name__ == "Finished" and len(rest) > len(WORDS)
    finally:
        pump.stop()
        thread.join(timeout=5)

    for release in ("timeout", "stop"):
        unseen = EventPump(source, wait_until_shown=True)
        started = time.monotonic()
        if release == "stop":
            threading.Timer(0.05, unseen.stop).start()
        else:
            pump_module.SHOWN_WAIT_S, was = 0.1, pump_module.SHOWN_WAIT_S
        try:
            unseen.run()
        finally:
            if release == "timeout":
                pump_module.SHOWN_WAIT_S = was
        assert unseen.finished.is_set() and time.monotonic() - started < 2.0, release
        names = [type(e).__name__ for e in unseen.drain()]
        assert names[-1] == ("Finished" if release == "timeout" else "Started"), release


@in_event_loop
async def test_a_runs_first_forward_pass_waits_until_the_app_has_shown_its_start() -> None:
    """In the app the run's start is painted (the prompt, the cleared panels) before the decoder goes on past
    Started, so the new run's first paint never competes with decoding; a restart does the same."""
    from decode_tui.tui import pump as pump_module

    app, fake = make()
    seen: list[tuple[bool, bool]] = []
    original = fake._events

    def watched(settings: Settings, live: Any) -> Any:
        for i, event in enumerate(original(settings, live)):
            if i == 1:  # the decoder is past Started: had the app taken it in and drawn it by then?
                assert app.pump is not None
                seen.append((app.pump.shown.is_set(), app.view.started is not None))
            yield event

    fake._events = watched  # type: ignore[method-assign]
    # The order is what is tested, not how soon: on a loaded machine (four test workers on two cores) the app's
    # first paint can take longer than the wait's 0.25 s, after which the decoder rightly goes on anyway.
    pump_module.SHOWN_WAIT_S, was = 30.0, pump_module.SHOWN_WAIT_S
    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app)
            await pilot.press("r")
            await until(pilot, lambda: len(fake.runs) == 2)
            await settle(pilot, app)
            assert text(app) == "".join(WORDS)
    finally:
        pump_module.SHOWN_WAIT_S = was
    assert seen == [(True, True), (True, True)], "each run went on only once its start was shown"
    app_off, _ = make()
    app_off.show_start_first = False
    async with app_off.run_test(size=SIZE) as pilot:
        await settle(pilot, app_off)
        assert text(app_off) == "".join(WORDS)
        assert app_off.pump is not None and not app_off.pump.wait_until_shown

def _plain(widget: Any) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    content = widget.content
    console.print(content)
    return console.export_text()


@pytest.mark.real_model
def test_the_app_runs_the_embedded_model_end_to_end(smollm2: Any) -> None:
    from decode_tui.core.params import DecodeConfig
    from decode_tui.core.run import Run

    def source(settings: Settings, live: Any) -> Any:
        return lambda: Run(smollm2, settings.prompt, settings.config, live=live).events()

    @in_event_loop
    async def drive() -> None:
        settings = Settings(prompt="What is the capital of France?", config=DecodeConfig(max_new_tokens=16))
        app = DecodeApp(settings, source)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, app, until=60)
            stats = app.query_one(StatsBar)
            assert stats.counters.state == "finished" and stats.counters.result is not None
            assert text(app) == stats.counters.result.text and "Paris" in stats.counters.result.text

    drive()


@in_event_loop
async def test_the_auto_pause_key_arms_the_running_decoder() -> None:
    app, _ = make("speculative", fake=FakeDecoder(delay=0.3))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("a")
        assert app.auto_pause and app.pump is not None and app.pump.auto_pause is not None
        await until(pilot, lambda: any("first rejection" in m for m in app.messages))
        await until(pilot, lambda: app.pump is not None and app.pump.paused)
        await pilot.press("a", "space")
        assert app.pump.auto_pause is None
        await settle(pilot, app)


def test_each_mode_opens_on_its_own_demo_prompt_but_keeps_the_users() -> None:
    from decode_tui.cli.main import read_prompt
    from decode_tui.core.modes import CODE_EDIT_PROMPT
    from decode_tui.core.params import DEMO_PROMPTS

    settings = Settings()
    assert settings.prompt == DEMO_PROMPTS["greedy"]
    pld = with_mode(settings, "pld")
    assert pld.prompt == CODE_EDIT_PROMPT, "PLD's demo edits text that is in the prompt: there is something to copy"
    assert with_mode(pld, "beam").prompt == DEMO_PROMPTS["beam"] != DEMO_PROMPTS["greedy"]
    mine = dataclasses.replace(settings, prompt="my own words")
    assert with_mode(mine, "pld").prompt == "my own words"
    assert read_prompt(None, None, "speculative") == DEMO_PROMPTS["speculative"]
    assert read_prompt("hello", None, "pld") == "hello"


def test_the_readmes_keys_table_is_the_apps_bindings() -> None:
    """Every key the README lists is bound, and every binding is listed (the help screen shows the bindings)."""
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| keys | does |"):]
    table = table[: table.index("\n\n")]
    names = {"←": "left", "→": "right", "esc": "escape", "?": "question_mark"}
    listed: set[str] = set()
    for row in table.splitlines()[2:]:
        keys_cell = row.split("|")[1]
        for group in re.findall(r"`([^`]+)`", keys_cell):
            listed.update(names.get(key, key) for key in group.split())
    bound = {key for binding in DecodeApp(Settings(), FakeDecoder().source).all_bindings()
             for key in binding.key.split(",")}
    textual_own = {"ctrl+p"}  # the command palette is Textual's
    unlisted_on_purpose = {"f1", "ctrl+c"}  # the same as ? and q
    assert listed - textual_own == bound - unlisted_on_purpose


@in_event_loop
async def test_a_long_draft_token_is_shown_in_full_somewhere() -> None:
    long = " a_very_long_identifier_name_that_no_column_holds"
    words = [*WORDS[:5], long, *WORDS[6:]]
    app, _ = make("speculative", fake=FakeDecoder(words))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        shown = " ".join(_plain(app.query_one("#panel-draft", DraftPanel)).split())
        assert "…" in shown and "in full:" in shown
        assert repr(long) in shown.replace(" ", "") or long.strip() in shown.replace(" ", "")


@in_event_loop
async def test_the_forwards_screen_shows_each_forward_and_the_whatif_grid() -> None:
    from textual.widgets import DataTable

    from decode_tui.tui.screens.forwards import ForwardsScreen

    app, _ = make("pld")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForwardsScreen))
        screen = app.screen
        table = screen.query_one(DataTable)
        assert table.row_count == 3  # the prefill and two verifying rounds, as the fake's Finished counts
        overlay = screen.query_one("#forwards-body")
        for scrolled in (overlay, table):  # no track in the terminal's colour down the overlay's right edge
            assert scrolled.styles.scrollbar_background == overlay.styles.background
        assert [table.get_row_at(i)[2:4] for i in range(3)] == [["-", "-"], ["3", "3"], ["3", "1"]]
        # The bar says what its marks are: two rounds of 3 drafts, all accepted and then 2 rejected.
        assert str(list(table.columns.values())[-1].label) == "█ token · rejected draft"
        assert [table.get_row_at(i)[-1] for i in (1, 2)] == ["████", "██··"]
        acceptance = _plain(screen.query_one("#forwards-acceptance", Static))
        assert "Acceptance by draft position 1-3" in acceptance and "observed" in acceptance
        whatif = _plain(screen.query_one("#forwards-whatif", Static))
        assert "What if: target forwards prompt lookup would need" in whatif
        order = [w.id for w in screen.query_one("#forwards-body").children]
        assert order.index("forwards-table") < order.index("forwards-whatif"), "rounds first, then the what-if"
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, ForwardsScreen))

    app, _ = make("sample")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForwardsScreen))
        assert "a sample run" in _plain(app.screen.query_one("#forwards-whatif", Static))
        assert "No draft was verified" in _plain(app.screen.query_one("#forwards-acceptance", Static))
        body = app.screen.query_one("#forwards-body").children
        assert [type(w).__name__ for w in body][-1] == "DataTable", "plain steps: the what-if above, the rows below"


def _shown(panel: Any) -> list[str]:
    """The lines a panel paints now, as plain text."""
    return [panel.render_line(y).text.rstrip() for y in range(panel.content_size.height)]


@in_event_loop
async def test_the_draft_panel_shows_the_adaptive_policys_decision() -> None:
    from decode_tui.tui.widgets.draft_panel import DraftPanel

    app, _ = make("speculative")
    async with app.run_test(size=SIZE) as pilot:
        panel = app.query_one("#panel-draft", DraftPanel)
        panel.set_adaptive("adaptive: plain steps: at acceptance 20% no draft length beats a plain step")
        await pilot.pause()
        assert any("adaptive: plain steps" in line for line in _shown(panel)), _shown(panel)  # alone, no rounds
        await settle(pilot, app)
        panel.set_adaptive("adaptive: drafting up to 20: it beats a plain step")
        await pilot.pause()
        assert any("adaptive: drafting up to 20" in line for line in _shown(panel)), _shown(panel)  # under them


@in_event_loop
async def test_a_short_rounds_panel_shows_the_newest_rounds_and_the_latest_test() -> None:
    """Cut at the bottom, the panel would show the oldest of its ten rounds and hide the newest one's test."""
    from decode_tui.tui.run_view import Round

    app, _ = make("pld")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        panel = app.query_one("#pld-rounds", DraftPanel)
        first, second = panel.rounds
        more = [Round(r.proposed, dataclasses.replace(r.verified, round=i), r.extra_text)
                for i, r in enumerate([first, second] * 6, start=2)]
        panel.add(more, (1.0, 0.5, 0.25))
        await pilot.pause()
        shown = _shown(panel)
        assert len(panel.rounds) == 10 and len(shown) < 20, "ten rounds and their test do not fit here"
        labels = [line.split()[0] for line in shown if line[:1] == "r" and line[1:2].isdigit()]
        assert labels and labels[-1] == "r13", shown
        assert labels == [f"r{i}" for i in range(14 - len(labels), 14)], "the newest rounds, oldest first"
        assert "r4" not in labels, shown
        assert any(line.startswith("round 13: 3 drafted") for line in shown), shown
        assert shown[-1].startswith("acceptance by position  1:100%  2:50%  3:25%"), shown


@pytest.mark.parametrize("size", [SIZE, (80, 24)])
@in_event_loop
async def test_a_tree_round_is_drawn_with_its_path_first_and_its_verdicts(size: tuple[int, int]) -> None:
    app, _ = make("suffix")
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app)
        panel = app.query_one("#pld-rounds", DraftPanel)
        assert [r.verified.accepted for r in panel.rounds] == [3, 1]
        shown = _shown(panel)
        rows = [line for line in shown if line[:1] == "r" and line[1:2].isdigit()]
        assert rows[-1].split()[:4] == ["r1", "tree", "1/4", "✓over"], rows
        if size == SIZE:  # the older round's row too where there is room
            assert rows[0].split()[:3] == ["r0", "tree", "3/5"] and "(+2 nodes)" in rows[0], rows
            assert "✓quick" in rows[0] and "✓fox" in rows[0] and "cat" not in rows[0], "the kept path, not the tree"
        start = next(i for i, line in enumerate(shown) if line.startswith("round 1: 4-node tree, 1 accepted"))
        tree = [line.strip() for line in shown[start + 1 : start + 5]]
        # The accepted child first at the root, its children under it, then the sibling the target left.
        assert tree[0].startswith("✓' over'") and tree[0].split()[-1] == ("runs" if size == SIZE else "0.80"), tree
        assert tree[1].startswith("✗' a'") and tree[2].startswith("✗' an'"), tree
        assert tree[3].startswith("✗' under'") and tree[3].endswith("this run" if size == SIZE else "0.10"), tree
        assert shown[start + 1].index("✓") < shown[start + 2].index("✗"), "a child indented under its parent"
        assert any("→ ' the': the target's own token" in line for line in shown), shown
        stats = app.query_one(StatsBar)
        assert stats.counters.tree_nodes == 4 and "tree of 4 nodes" in str(stats.content)


@in_event_loop
async def test_a_narrow_rounds_panel_keeps_each_position_of_the_test_on_one_line() -> None:
    app, _ = make("speculative")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        shown = _shown(app.query_one("#panel-draft", DraftPanel))
        header = next(i for i, line in enumerate(shown) if line.split()[:4] == ["token", "q", "p", "u"])
        assert shown[header].split() == ["token", "q", "p", "u", "vs", "p/q"], shown
        rows = shown[header + 2:header + 5]  # the round's three positions: accepted, rejected, not tested
        assert [row.split()[-1] for row in rows] == ["✓", "✗", "·"], shown
        assert rows[1].split()[-4:-1] == ["0.60", "0.12", "0.55≥0.20"], "q, p and u against min(1, p/q)"

    for size in (SIZE, (120, 36)):  # wide enough: the full table, each row whole ("·not tested" wrapped at 120)
        app, _ = make("speculative")
        async with app.run_test(size=size) as pilot:
            await settle(pilot, app)
            shown = _shown(app.query_one("#panel-draft", DraftPanel))
            header = shown.index(next(line for line in shown if line.split()[:1] == ["token"]))
            assert shown[header].split() == ["token", "q", "p", "u", "test", "verdict"], shown
            rows = shown[header + 2:header + 5]
            assert [row.split()[-1] for row in rows] == ["✓accepted", "✗rejected", "tested"], shown
            assert rows[2].split()[-2:] == ["·not", "tested"] and rows[1].split()[2:4] == ["0.60", "0.12"], shown


@in_event_loop
async def test_a_long_round_wraps_under_its_first_token_not_under_its_label() -> None:
    from decode_tui.tui.run_view import Round

    app, _ = make("speculative")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        panel = app.query_one("#panel-draft", DraftPanel)
        last = panel.rounds[-1]
        texts = (" alpha", " beta", " gamma", " delta", " epsilon")
        verdicts = tuple(dataclasses.replace(last.verified.verdicts[0], position=i, verdict="accepted")
                         for i in range(len(texts)))
        long = Round(dataclasses.replace(last.proposed, token_ids=tuple(range(5)), texts=texts),
                     dataclasses.replace(last.verified, round=9, verdicts=verdicts, accepted=5,
                                         extra_kind="bonus"), " zeta")
        panel.add([long], (1.0,))
        await pilot.pause()
        shown = _shown(panel)
        at = next(i for i, line in enumerate(shown) if line.startswith("r9 "))
        end = next(i for i, line in enumerate(shown) if line.startswith("round 9:"))
        row = shown[at:end]
        column = row[0].index("✓") - 1  # where the first token starts, its leading space included
        assert len(row) > 1 and all(line[:column].strip() == "" for line in row[1:]), row
        words = " ".join(row).split()
        assert words[3:] == ["✓alpha", "✓beta", "✓gamma", "✓delta", "✓epsilon", "→", "★zeta"], row


@in_event_loop
async def test_a_short_lookup_panel_keeps_the_match_and_the_copy_in_view() -> None:
    """Cut at the bottom, an 80x24 terminal would show the context before the match and hide the match."""
    from decode_tui.core.record.events import DraftProposed

    app, _ = make("pld")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        panel = app.query_one(LookupPanel)
        words = [f" w{i}" for i in range(300)]
        panel.reset(tuple(words))
        proposed = DraftProposed(round=5, drafter="lookup", token_ids=(1, 2), texts=(" w201", " w202"),
                                 match_start=198, match_end=201, copy_start=201, copy_end=203, max_tokens=2)
        panel.show(proposed, 2)
        await pilot.pause()
        shown = " ".join(_shown(panel))
        assert "' w198 w199 w200'" in shown and " w201 w202" in shown, shown


@contextlib.asynccontextmanager
async def lookup_panel_showing(mode: str, proposed: DraftProposed, kept: int) -> AsyncIterator[LookupPanel]:
    """The app in ``mode``, its lookup panel emptied, then showing the round ``proposed`` with ``kept`` kept."""
    app, _ = make(mode)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        panel = app.query_one(LookupPanel)
        panel.reset(())
        panel.show(proposed, kept)
        await pilot.pause()
        yield panel


@in_event_loop
async def test_the_lookup_panel_draws_what_a_drafter_drafted_from_row_by_row() -> None:
    """Lookahead's window levels and harvested n-grams, recycling's rows read and written: each row under its label,
    a written row's changed guesses styled apart from those it kept."""
    from decode_tui.core.record.events import DraftRow

    rows = (DraftRow("row", (1, 2, 3), (" the", " sea", " ship")),
            DraftRow("written", (4, 5, 6), (" sea", " was", " is")),
            DraftRow("was", (4, 5, 7), (" sea", " was", " and")),
            DraftRow("row", (8,), (" calm",)))
    proposed = DraftProposed(round=7, drafter="recycle", token_ids=(2,), texts=(" sea",), parents=(-1,), rows=rows)
    async with lookup_panel_showing("recycle", proposed, 1) as panel:
        shown = " ".join(" ".join(_shown(panel)).split())
        for line in ("round 7: recycle drafted a tree of 1 node; the target kept 1", "row the → sea · ship",
                     "written sea → was · is", "was sea → was · and", "row calm → (no guesses yet)"):
            assert line in shown, (line, shown)
        text = panel._text(0)
        assert text is not None

        def style_at(at: int) -> list[str]:
            return [str(span.style) for span in text.spans if span.start <= at < span.end]

        written = text.plain.index("written")
        kept, changed = text.plain.index(" was", written), text.plain.index(" is", written)
        assert style_at(kept) and style_at(changed) and style_at(kept) != style_at(changed), \
            "the changed guess is marked, the kept one not"


@in_event_loop
async def test_the_lookahead_window_is_drawn_as_a_grid_whose_columns_are_its_n_grams() -> None:
    """Issue 74: lookahead's Jacobi window level by level, each level's i-th token under the level above's, so that
    a column read down is the n-gram it becomes; the harvested n-grams below it."""
    from rich.cells import cell_len

    from decode_tui.core.record.events import DraftRow

    rows = (DraftRow("level 1", (1, 2, 3), (" the", " a", " 夜")),
            DraftRow("level 2", (4, 5, 6), (" seashore", " b", " c")),
            DraftRow("harvested", (7, 8), (" x", " y")))
    proposed = DraftProposed(round=2, drafter="lookahead", token_ids=(2,), texts=(" a",), parents=(-1,), rows=rows)
    async with lookup_panel_showing("lookahead", proposed, 0) as panel:
        text = panel._text(0)
        assert text is not None
        lines = {line.split("  ", 1)[0]: line for line in text.plain.splitlines()}
        one, two = lines["level 1"], lines["level 2"]
        assert one.index(" a") == two.index(" b") and cell_len(one[: one.index(" 夜")]) == \
            cell_len(two[: two.index(" c")]), "each level's i-th token in the same column"
        assert "harvested" in lines and " x ·  y" in lines["harvested"]


@in_event_loop
async def test_the_lookup_panel_counts_one_token_as_one() -> None:
    """It said "copied 1 tokens" and "the text's last 1 tokens '.' were seen before"."""
    from decode_tui.core.record.events import DraftProposed

    app, _ = make("pld")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        panel = app.query_one(LookupPanel)
        panel.reset(tuple(f" w{i}" for i in range(20)))
        copied = DraftProposed(round=3, drafter="lookup", token_ids=(1,), texts=(" w6",), match_start=5,
                               match_end=6, copy_start=6, copy_end=7, max_tokens=4)
        panel.show(copied, 0)
        await pilot.pause()
        shown = " ".join(_shown(panel))
        assert "the last 1-gram ' w5' was found at token 5 of the prompt; copied 1 token after it" in shown, shown
        suffix = DraftProposed(round=4, drafter="lookup", token_ids=(1,), texts=(" w9",), match_start=19,
                               match_end=20, max_tokens=4, sources=("this run",))
        panel.show(suffix, 0)
        await pilot.pause()
        shown = " ".join(_shown(panel))
        assert "the text's last token ' w19' was seen before (this run); drafted 1 token of what followed it" in shown
        longer = DraftProposed(round=5, drafter="lookup", token_ids=(1, 2), texts=(" w9", " w10"), match_start=18,
                               match_end=20, max_tokens=4, sources=("this run", "this run"))
        panel.show(longer, 0)
        await pilot.pause()
        shown = " ".join(_shown(panel))
        assert "the text's last 2 tokens ' w18 w19' were seen before (this run); drafted 2 tokens of what followed " \
               "them" in shown, shown


@in_event_loop
async def test_a_small_candidates_panel_shows_every_stage_with_fewer_candidates_and_shorter_bars() -> None:
    """Cut at the bottom, an 80x24 terminal hid top-k and top-p, the distribution the token is drawn from."""
    from decode_tui.core.record.events import Candidate, StageCandidates

    app, _ = make("sample")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        panel = app.query_one(CandidatesPanel)
        names = ("raw", "repetition_penalty", "temperature", "top_k", "top_p")
        words = [" a rather long candidate", " b", " c", " d", " e"]
        stages = tuple(StageCandidates(name, tuple(Candidate(i, w, 0.5 - 0.1 * i)  # type: ignore[arg-type]
                                                   for i, w in enumerate(words))) for name in names)
        panel.show(TokenSampled(step=7, token_id=1, text=" b", prob=0.4, greedy=False, stages=stages,
                                target_forwards=8))
        await pilot.pause()
        shown = _shown(panel)
        width = panel.content_size.width
        assert len(shown) <= panel.content_size.height and all(len(line) <= width for line in shown)
        assert [line for line in shown if line in ("raw logits", "repetition penalty", "temperature", "top-k",
                                                   "top-p")] == ["raw logits", "repetition penalty", "temperature",
                                                                 "top-k", "top-p"], shown
        rows = [line for line in shown if line.endswith("%")]
        assert len(rows) >= 5 and all(row.rstrip().endswith(("50.0%", "40.0%", "30.0%", "20.0%", "10.0%"))
                                      for row in rows), "each row whole: label, bar and share on one line"
        assert shown[-1].endswith("50.0%") or shown[-1].endswith("40.0%"), "the last stage's best candidates"


@in_event_loop
async def test_a_tall_candidates_panel_shows_more_of_the_candidates_a_step_carries() -> None:
    """Greedy showed 5 of the 10 candidates a step carries, above twenty empty lines."""
    from decode_tui.core.record.events import Candidate, Stage, StageCandidates

    app, _ = make("greedy")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        panel = app.query_one(CandidatesPanel)
        ten = tuple(Candidate(i, f" w{i}", 0.3 - 0.02 * i) for i in range(10))
        panel.show(TokenSampled(step=2, token_id=0, text=" w0", prob=0.3, greedy=True,
                                stages=(StageCandidates("raw", ten),)))
        await pilot.pause()
        rows = [line for line in _shown(panel) if line.endswith("%")]
        assert len(rows) == 10 and "' w0'" in rows[0] and "' w9'" in rows[-1], rows
        # Five stages of ten in the same panel: as many a stage as fit (at least the five it always showed), and
        # every line within the panel.
        names: tuple[Stage, ...] = ("raw", "repetition_penalty", "temperature", "top_k", "top_p")
        panel.show(TokenSampled(step=3, token_id=0, text=" w0", prob=0.3, greedy=False,
                                stages=tuple(StageCandidates(name, ten) for name in names)))
        await pilot.pause()
        shown = _shown(panel)
        written = [line for line in shown if line]
        assert written[-1].endswith("%") and "top-p" in written, "the last stage in view"
        per_stage = len([line for line in shown if line.endswith("%")]) / 5
        assert per_stage == panel.room_top >= 5, shown
        assert panel.room_top < 10, "five stages of ten do not fit this panel"


@in_event_loop
async def test_a_narrow_candidates_panel_with_room_below_shows_more_candidates_with_shorter_bars() -> None:
    """At 80 columns the bars are shortened to fit, and the panel did not grow into its empty lines then."""
    from decode_tui.core.record.events import Candidate, StageCandidates

    app, _ = make("sample")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        panel = app.query_one(CandidatesPanel)
        ten = tuple(Candidate(i, f" candidate{i}", 0.3 - 0.02 * i) for i in range(10))
        for step in (5, 6):  # the second paint builds what the first learned, at once
            panel.show(TokenSampled(step=step, token_id=0, text=" candidate0", prob=0.3, greedy=False,
                                    stages=(StageCandidates("raw", ten), StageCandidates("top_k", ten))))
            await pilot.pause()
            shown = _shown(panel)
            rows = [line for line in shown if line.endswith("%")]
            assert len(rows) == 2 * panel.room_top and panel.room_top > 5, shown
            assert all(len(line) <= panel.content_size.width for line in shown)
            assert len([line for line in shown if line]) <= panel.content_size.height


@in_event_loop
async def test_a_token_drawn_from_below_the_top_candidates_shows_at_every_stage_with_its_rank() -> None:
    from decode_tui.core.record.events import Candidate, StageCandidates

    app, _ = make("sample")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        panel = app.query_one(CandidatesPanel)
        top = tuple(Candidate(i, f" w{i}", 0.15 - 0.01 * i) for i in range(10))
        stages = (StageCandidates("raw", top, chosen_prob=0.004, chosen_rank=31),
                  StageCandidates("temperature", top, chosen_prob=0.02, chosen_rank=12),
                  StageCandidates("top_p", (*top[:4], Candidate(77, " zed", 0.05)), chosen_prob=0.05, chosen_rank=5))
        panel.show(TokenSampled(step=3, token_id=77, text=" zed", prob=0.05, greedy=False, stages=stages))
        await pilot.pause()
        shown = _shown(panel)
        drawn = [line for line in shown if "' zed'" in line and not line.startswith("step")]
        assert len(drawn) == 3 and all(line.startswith("▶") for line in drawn), shown
        assert drawn[0].endswith("0.4% #31") and drawn[1].endswith("2.0% #12"), drawn
        assert drawn[2].endswith("5.0%"), "among the top candidates: no rank needed"
        # As many candidates a stage as the panel has room for (more than five at this size), the drawn one below.
        assert panel.room_top > 5
        # (the top-p stage kept five)
        assert len([line for line in shown if line.endswith("%") or "#" in line]) == 2 * panel.room_top + 5 + 2, shown
        # The token inspector (a token selected with the arrows) shows it too, below the final stage's best six.
        from decode_tui.core.record.events import TokenEmitted

        inspector = app.query_one(TokenInspector)
        surprise = TokenSampled(step=3, token_id=77, text=" zed", prob=0.02, greedy=False, stages=stages[:2])
        inspector.show(TokenEmitted(index=3, token_id=77, text=" zed", start=0, end=4), surprise, None, {})
        rows = _plain(inspector).splitlines()
        assert any("' zed'" in row and row.rstrip().endswith("2.0% #12") for row in rows), rows
        # Its title is one line (it wrapped at the table's width, ~25 columns), and the end of text, which writes
        # no text, is named as the candidates name it, not ''.
        eos = TokenSampled(step=4, token_id=2, text="<|im_end|>", prob=0.9, greedy=True, stages=stages[:1])
        inspector.show(TokenEmitted(index=4, token_id=2, text="", start=4, end=4, logprob=-0.1, entropy=0.5, rank=1),
                       eos, None, {})
        rows = _plain(inspector).splitlines()
        assert rows[0].startswith("token 5: '<|im_end|>' (id 2, target) · p"), rows
        assert rows[0].rstrip().endswith("H 0.50"), rows


@in_event_loop
async def test_a_short_beam_panel_keeps_the_early_stopping_test_after_the_open_beams() -> None:
    app, _ = make("beam")  # four beams
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        panel = app.query_one(BeamPanel)
        shown = _shown(panel)
        assert "step 3: open beams" in shown[0], shown
        stop = [i for i, line in enumerate(shown) if line.startswith("early stop (False)")]
        assert stop, f"the early-stopping test is cut: {shown}"
        finished = [i for i, line in enumerate(shown) if line.startswith("finished hypotheses")]
        assert not finished or finished[0] > stop[0], "the test first, where not everything fits"
        beams = shown[:stop[0]]
        assert "…" not in "".join(beams) and all(f"{-(0.5 * 3 + b) / 3:.3f}" in "".join(beams) for b in range(4)), \
            f"every score whole in a narrow panel: {beams}"

        # A real model's tails (28 characters) wrapped over three lines a beam in a text column, and pushed the
        # test out: now each beam is its figures' line and its tail's, cut from the left to fit.
        last = panel.history[-1]
        long = [dataclasses.replace(b, text_tail=f"a mythical sea creature no. {b.beam} that was") for b in last.beams]
        panel.add([dataclasses.replace(last, step=last.step + 1, beams=tuple(long))])
        await pilot.pause()
        shown = _shown(panel)
        test_at = next(i for i, line in enumerate(shown) if line.startswith("early stop (False)"))
        assert len(shown[2:test_at]) == 2 * len(long), shown
        for figures, tail in zip(shown[2:test_at:2], shown[3:test_at:2], strict=True):
            assert figures.split()[1].count("←") == 1 and tail.startswith("   '…") and tail.endswith(" that was'")
            assert len(tail) <= panel.content_size.width, tail

    app, _ = make("beam")
    async with app.run_test(size=SIZE) as pilot:  # room for everything: the usual order
        await settle(pilot, app)
        shown = _shown(app.query_one(BeamPanel))
        at = {key: next(i for i, line in enumerate(shown) if line.startswith(key))
              for key in ("finished hypotheses", "pruned:", "early stop")}
        assert at["finished hypotheses"] < at["pruned:"] < at["early stop"], shown


def test_the_whatif_grids_price_settings_with_the_runs_own_verify_times(byte_bpe: Any) -> None:
    from rich.table import Table

    from decode_tui.core.drafting.prompt_lookup import PromptLookup
    from decode_tui.core.params import SamplingParams
    from decode_tui.core.record.detokenize import Detokenizer
    from decode_tui.core.record.events import Started
    from decode_tui.core.record.timeline import Timeline
    from decode_tui.core.record.transcript import Transcript
    from decode_tui.core.strategies.speculative import speculative
    from decode_tui.tui.screens.forwards import whatif_tables

    from .conftest import tiny_model
    from .test_speculative import V, repetitive_prompt

    prompt = repetitive_prompt(0, 14)
    started = Started(mode="pld", model="tiny", prompt_token_ids=tuple(prompt), prompt_text="x",
                      params={"max_new_tokens": 40, "eos_token_ids": [V - 1]})
    transcript = Transcript("pld", prompt, Detokenizer(byte_bpe), frozenset({V - 1}), 40)
    events = [started, *speculative(tiny_model("llama", vocab_size=V, seed=0), transcript, PromptLookup(1, 6),
                                    SamplingParams(), greedy=True, num_draft_tokens=6)]
    timeline = Timeline()
    for i, event in enumerate(events):
        timeline.add(event, i * 0.01)
    assert len({r.k for r in timeline.rows if r.k is not None}) >= 2, "the run verified drafts of several lengths"
    grids = whatif_tables(events, timeline)
    titles = [str(g.title) for g in grids if isinstance(g, Table)]
    assert len(titles) == 2 and "Estimated speed-up" in titles[1]
    greedy_only = [e for e in events if not isinstance(e, DraftVerified)]  # no verify times: forwards only
    parts = whatif_tables(greedy_only, Timeline())
    assert any(isinstance(p, str) and "decode-tui whatif" in p for p in parts)


@in_event_loop
async def test_the_svg_key_saves_the_screen_for_a_slide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    app, _ = make("greedy")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("x")  # a trace exported first: the SVG is still the first one, and its toast goes
        await until(pilot, lambda: list(tmp_path.glob("*.jsonl")))
        assert "trace of" in app.messages[-1]
        await pilot.press("X")
        await until(pilot, lambda: list(tmp_path.glob("*.svg")))
        (svg,) = tmp_path.glob("*.svg")
        text = svg.read_text(encoding="utf-8")
        assert svg.name == "decode-tui-greedy-1.svg" and "<svg" in text
        assert "trace" not in text, "the slide shows the run, not the last toast"
        assert any("screen saved to decode-tui-greedy-1.svg" in m for m in app.messages)


@in_event_loop
async def test_the_grammar_and_cutoff_stages_say_what_they_cut_and_show_the_refused_tokens_struck() -> None:
    from rich.style import Style

    from decode_tui.core.record.events import Candidate, StageCandidates

    app, _ = make("sample")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        panel = app.query_one(CandidatesPanel)
        raw = (Candidate(5, " Sure", 0.5), Candidate(6, "{", 0.3), Candidate(7, " I", 0.1))
        stages = (StageCandidates("raw", raw),
                  StageCandidates("grammar", (Candidate(6, "{", 1.0),), chosen_prob=1.0, chosen_rank=1, possible=2,
                                  removed=49150, removed_candidates=(raw[0], raw[2]),
                                  detail="allows 2 of 49,152 tokens: must write '{' next"),
                  StageCandidates("min_p", (Candidate(6, "{", 1.0),), possible=1, removed=1, threshold=0.1,
                                  entropy=None))
        panel.show(TokenSampled(step=0, token_id=6, text="{", prob=1.0, greedy=False, stages=stages))
        await pilot.pause()
        shown = _shown(panel)
        assert any(line.startswith("grammar: allows 2 of 49,152 tokens: must write '{' next") for line in shown), shown
        struck = [y for y, line in enumerate(shown) if line.startswith("✗ ")]
        assert len(struck) == 2, shown
        assert "' Sure'" in shown[struck[0]] and shown[struck[0]].endswith("50.0%"), shown
        segments = list(panel.render_line(struck[0]))
        assert any(seg.style is not None and Style.parse("strike") in [Style(strike=seg.style.strike)]
                   for seg in segments if seg.text.strip()), "refused candidates are struck through"
        assert any(line.startswith("min-p: cut p < min_p × p_max = 10.0%: 1 removed, 1 left") for line in shown), \
            "\n".join(shown)


@in_event_loop
async def test_a_draft_token_the_grammar_cut_is_shown_as_cut_not_tested() -> None:
    from decode_tui.core.record.events import PositionVerdict
    from decode_tui.tui.run_view import Round

    app, _ = make("pld")
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot, app)
        panel = app.query_one("#pld-rounds", DraftPanel)
        first = panel.rounds[0]
        verdicts = (PositionVerdict(0, 1, 0.9, 1.0, None, "accepted"), PositionVerdict(1, 2, 0.0, 1.0, None, "cut"),
                    PositionVerdict(2, 3, 0.0, 1.0, None, "untested"))
        proposed = dataclasses.replace(first.proposed, token_ids=(1, 2, 3), texts=(" a", " b", " c"))
        verified = dataclasses.replace(first.verified, round=9, verdicts=verdicts, accepted=1)
        panel.add([Round(proposed, verified, first.extra_text)], (1.0,))
        await pilot.pause()
        shown = _shown(panel)
        row = next(line for line in shown if "' b'" in line and "cut by the grammar" in line)
        assert "⊘cut by the grammar" in row, shown
        assert any(line.strip().startswith("⊘cut by the grammar: it forbids") for line in shown), shown


@in_event_loop
async def test_the_stage_editor_lists_every_stage_and_changes_one_from_the_next_step() -> None:
    from textual.widgets import Label, OptionList

    from decode_tui.tui.screens.stage_editor import StageEditor

    app, _ = make("sample")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("z")
        await until(pilot, lambda: isinstance(app.screen, StageEditor))
        options = app.screen.query_one(OptionList)
        labels = [str(options.get_option_at_index(i).prompt).split("  ")[0] for i in range(options.option_count)]
        assert labels == ["repetition penalty", "no-repeat n-gram size", "min new tokens", "temperature", "top-h",
                          "top-k", "top-p", "min-p", "typical-p", "epsilon cutoff", "eta cutoff"]
        options.highlighted = 7  # min-p
        await pilot.press("right", "right")
        assert app.settings.config.sampling.min_p == 0.05
        assert app.live.snapshot().sampling.min_p == 0.05, "applied from the next step, as the other knobs are"
        said = str(app.screen.query_one("#stages-said", Label).render())
        # The run has ended (settled above), so the change waits for the next one, and says so.
        assert "min-p 0.02 → 0.05, for the next run (this one has ended; r restarts)" in said, said
        assert "0.05" in str(options.get_option_at_index(7).prompt)
        await pilot.press("left", "left", "left")
        assert app.settings.config.sampling.min_p is None, "0 turns min-p off, as GenerationConfig's None"
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, StageEditor))

    app, _ = make("greedy")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("z")
        await until(pilot, lambda: isinstance(app.screen, StageEditor))
        # The bad words are typed: tab reaches their field, where the keys (z and the arrows too) are text.
        await pilot.press("tab", *"zoo, sorry", "left", "right", "enter")
        assert app.settings.config.sampling.bad_words == ("zoo", "sorry")
        assert app.live.snapshot().sampling.bad_words == ("zoo", "sorry"), "applied from the next step"
        said = str(app.screen.query_one("#stages-said", Label).render())
        assert "bad words none → 'zoo', 'sorry', for the next run (this one has ended" in said, said
        assert "'zoo', 'sorry'" in str(app.screen.query_one("#stages-words", Label).render())
        await pilot.press("end", ",", "enter")
        said = str(app.screen.query_one("#stages-said", Label).render())
        assert "holds an empty word" in said and app.settings.config.sampling.bad_words == ("zoo", "sorry"), said
        await pilot.press("shift+tab")
        app.screen.query_one(OptionList).highlighted = 8  # typical-p
        await pilot.press("left")
        said = str(app.screen.query_one("#stages-said", Label).render())
        assert "no effect in greedy mode" in said, said
