"""Every value of ``Mode`` through every per-mode table, and through the app live with steps slower than its busy
threshold: from the start, after ``m``, and paused then stepped.

A mode missing from one table crashes only where that table is read, which for the busy label was half a second
into a run (suffix mode's ``KeyError`` at ``busy_label``): these tests read every table for every mode.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Mapping
from typing import Any

import pytest
from textual.widgets import ContentSwitcher

from decode_tui import lessons
from decode_tui.cli.flags import ModeChoice
from decode_tui.cli.options import ONLY_FOR, DecodingOptions, build_config
from decode_tui.core.modes import MODE_SPECS, MODES
from decode_tui.core.params import DEMO_PROMPTS
from decode_tui.core.record.events import Mode
from decode_tui.tui import run_view
from decode_tui.tui.run_view import BUSY_AFTER_S, RunView
from decode_tui.tui.widgets.mode_panels import PANEL_FOR_VIEW, panel_for

from .fake_decoder import FakeDecoder
from .test_tui import SIZE, in_event_loop, make, settle, until

# Every table keyed by mode, by where it lives: a mode's entry (core/modes.py) and what is built from it, and the
# one table that cannot be (an enum the command line's choices are typed with).
PER_MODE_TABLES: dict[str, Mapping[Any, object]] = {
    "core.modes.MODE_SPECS": MODE_SPECS,
    "tui.widgets.mode_panels.panel_for": {m: panel_for(m) for m in MODES},
    "core.params.DEMO_PROMPTS": DEMO_PROMPTS,
    "cli.flags.ModeChoice": {choice.value: choice for choice in ModeChoice},
}


def test_modes_are_the_registrys_entries_each_under_its_own_name() -> None:
    assert tuple(MODE_SPECS) == MODES and all(spec.name == mode for mode, spec in MODE_SPECS.items())


@pytest.mark.parametrize("table", PER_MODE_TABLES, ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_every_per_mode_table_covers_every_mode(table: str, mode: Mode) -> None:
    assert mode in PER_MODE_TABLES[table], f"{table} has no entry for {mode!r}"


@pytest.mark.parametrize("table", PER_MODE_TABLES, ids=str)
def test_no_per_mode_table_names_a_mode_that_is_not_one(table: str) -> None:
    assert set(PER_MODE_TABLES[table]) <= set(MODES), table


@pytest.mark.parametrize("mode", MODES)
def test_every_modes_entry_names_what_exists(mode: Mode) -> None:
    """A mode's entry is used by the app, the command line and the lessons: each thing it names must be there."""
    spec = MODE_SPECS[mode]
    assert spec.name == mode and spec.working_on and spec.demo_prompt.strip()
    assert spec.view in PANEL_FOR_VIEW, "the app has a panel for its view"
    # Every decoding option the command line takes: the options object's fields, and build_config's own (--compare).
    fields = {f.name for f in dataclasses.fields(DecodingOptions)} | set(inspect.signature(build_config).parameters)
    assert spec.options <= fields, spec.options - fields
    assert all(ModeChoice(mode) in ONLY_FOR[o] for o in spec.options), "the command line's checks take its options"
    assert spec.moments <= set(lessons.EVENTS), spec.moments - set(lessons.EVENTS)
    assert all(mode in lessons.PAUSE_MODES[m] for m in spec.moments), "a lesson in this mode may pause there"


@pytest.mark.parametrize("mode", MODES)
def test_the_busy_label_names_what_every_mode_is_doing_and_the_prefill_before_the_first_token(mode: Mode) -> None:
    from decode_tui.core.record.events import Started, TokenEmitted

    view = RunView(paused=False, now=0.0)
    view.apply([Started(mode=mode, model="m", prompt_token_ids=(1, 2, 3), prompt_text="p", params={})], 0.0,
               paused=False)
    assert view.busy_label(0.1, news=True, running=True, mode=mode) == ""
    label = view.busy_label(0.2 + BUSY_AFTER_S, news=False, running=True, mode=mode)
    assert label.startswith("busy ") and "prefill" in label and "3 tokens" in label, label
    view.apply([TokenEmitted(index=0, token_id=5, text="a", start=0, end=1, source="target", target_forwards=1)],
               1.0, paused=False)
    assert view.busy_label(1.0, news=True, running=True, mode=mode) == ""
    label = view.busy_label(1.1 + BUSY_AFTER_S, news=False, running=True, mode=mode)
    assert label == f"busy {0.1 + BUSY_AFTER_S:.1f} s: {MODE_SPECS[mode].working_on}", label


async def _busy_shown(pilot: Any, app: Any, fake: FakeDecoder | None = None) -> str:
    """Wait until the panels say the run is busy; the label. ``fake`` (one that holds its steps): then let the
    step end."""
    panels = app.query_one("#panels")
    await until(pilot, lambda: "busy" in str(panels.border_subtitle), timeout=10)
    label = str(panels.border_subtitle)
    if fake is not None:
        fake.release()
    return label


async def _quit_unharmed(pilot: Any, app: Any, fake: FakeDecoder | None = None) -> None:
    """The run went on with no error; q (the caller then sees status 0)."""
    assert app.error is None and app.is_running
    if fake is not None:
        fake.release(for_good=True)
    await pilot.press("q")


# Every step of the fake decoder outlasts the busy threshold, by enough that a loaded machine (CI's two workers)
# still draws the busy label, and the test sees it, before the step ends: 0.3 s past it was missed there, and 1 s
# past it once too (a paused pld step), so where a test must see a step's label the step is also held until it has.
SLOW = BUSY_AFTER_S + 1.0


@pytest.mark.parametrize("mode", MODES)
@in_event_loop
async def test_every_mode_runs_live_with_steps_slower_than_the_busy_threshold(mode: Mode) -> None:
    app, fake = make(mode, fake=FakeDecoder(delay=SLOW, held=True))
    async with app.run_test(size=SIZE) as pilot:
        label = await _busy_shown(pilot, app, fake)
        assert label.endswith(MODE_SPECS[mode].working_on) or "prefill" in label, label
        before = len(app.view.trace)
        await until(pilot, lambda: len(app.view.trace) > before, timeout=10)  # the run goes on after it
        await _busy_shown(pilot, app, fake)  # and says so again at its next slow step
        await _quit_unharmed(pilot, app, fake)
    assert app.return_code == 0


@pytest.mark.parametrize("mode", MODES)
@in_event_loop
async def test_m_onto_every_mode_runs_it_live_with_slow_steps(mode: Mode) -> None:
    before = MODES[(MODES.index(mode) - 1) % len(MODES)]
    app, fake = make(before, fake=FakeDecoder(delay=SLOW))
    async with app.run_test(size=SIZE) as pilot:
        await _busy_shown(pilot, app)
        await pilot.press("m")
        assert app.settings.mode == mode
        await until(pilot, lambda: len(fake.runs) == 2 and app.view.started is not None, timeout=10)
        label = await _busy_shown(pilot, app)
        assert app.view.started is not None and app.view.started.mode == mode, label
        await _quit_unharmed(pilot, app)
    assert app.return_code == 0


@pytest.mark.parametrize("mode", MODES)
@in_event_loop
async def test_every_mode_paused_then_stepped_with_slow_steps_runs_to_its_end(mode: Mode) -> None:
    fake = FakeDecoder(delay=SLOW, held=True)
    fake.release(for_good=True)  # the first step runs free
    app, _ = make(mode, fake=fake, start_paused=True)
    async with app.run_test(size=SIZE) as pilot:
        def stepped() -> bool:
            return app.pump is not None and app.pump.paused and app.pump.events.empty()

        await pilot.press("n")  # the first step (a drafting mode's is the prefill's token alone)
        await until(pilot, lambda: stepped() and len(app.view.trace) > 1, timeout=10)
        shown = len(app.view.trace)
        fake.hold_next()
        panels = app.query_one("#panels")
        for _ in range(4):  # a slow step, shown as busy while it runs, and held until that is seen
            # (a step whose events the decoder had ready when it paused ends at once, showing nothing: the next
            # one is then the slow one). Either way the wait ends on what happened, not on a clock: a held step
            # never ends, so on a loaded machine a busy label seen late is still seen.
            await until(pilot, stepped, timeout=30)
            await pilot.press("n")  # the pump runs at once: stepped() holds again only once the step has ended
            await until(pilot, lambda: "busy" in str(panels.border_subtitle) or stepped(), timeout=30)
            if "busy" in str(panels.border_subtitle):
                break
        assert "busy" in str(panels.border_subtitle), "no slow step was shown as busy"
        fake.release(for_good=True)
        # (a step may wait SLOW more than once: a draft round's proposal and its verification)
        await until(pilot, lambda: stepped() and len(app.view.trace) > shown, timeout=30)
        await pilot.press("space")
        await settle(pilot, app, until=30)
        assert app.view.finished is not None and app.view.finished.mode == mode and app.error is None
        assert app.query_one(ContentSwitcher).current == panel_for(mode)
        await pilot.press("q")
    assert app.return_code == 0


@pytest.mark.parametrize("size", [(80, 24), (150, 42)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("lesson", lessons.shipped(), ids=lambda lesson: lesson.name)
@in_event_loop
async def test_every_lesson_plays_to_its_end_with_the_busy_label_read_at_every_tick(
        lesson: lessons.Lesson, size: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay's steps are as slow as the recording's, so the busy label is read in every lesson's mode; with the
    threshold below zero it is read at every tick, whatever this machine's pace."""
    from decode_tui.cli.teaching import playback
    from decode_tui.tui.widgets.narration import Narration

    monkeypatch.setattr(run_view, "BUSY_AFTER_S", -1.0)
    app = playback(lesson, speed=0)
    async with app.run_test(size=size) as pilot:
        narration = app.query_one(Narration)
        await pilot.pause(0.2)
        deadline = time.monotonic() + 120
        while app.view.finished is None or "This run:" not in narration.text:
            assert app.error is None and app.is_running and time.monotonic() < deadline
            await pilot.press("n")
            await pilot.pause(0.05)
        await settle(pilot, app)
        assert app.view.counters.state == "finished" and app.error is None
        await pilot.press("q")
    assert app.return_code == 0


def _help_of(option: str) -> tuple[str, str]:
    """An option's help, and its panel's title (a help that names no mode is for the modes its panel names)."""
    from typing import get_args as args_of

    from decode_tui.cli import flags

    declared = getattr(flags, "".join(part.title() for part in option.split("_")) + "Opt")
    info = next(a for a in args_of(declared) if hasattr(a, "help"))
    return str(info.help), str(info.rich_help_panel)


@pytest.mark.parametrize("option", sorted(ONLY_FOR))
def test_an_options_help_names_the_modes_its_check_allows(option: str) -> None:
    """--tree-budget's help said "pld and suffix" where its check (and the code) took speculative too."""
    import re

    help_text, panel = _help_of(option)
    modes = r"\b(" + "|".join(MODES) + r")\b"
    prefix = re.match(r"([a-z, ]+):", help_text)  # "pld and suffix: the most tokens copied ..."
    named = set(re.findall(modes, prefix.group(1))) if prefix else set()
    named = named or set(re.findall(modes, panel.lower()))
    assert named == {m.value for m in ONLY_FOR[option]}, (option, help_text, panel)


@pytest.mark.parametrize("mode", [m for m in MODES if MODE_SPECS[m].drafter is not None])
def test_every_drafting_modes_builder_builds_a_drafter_that_says_what_its_entry_says(mode: Mode,
                                                                                      byte_bpe: Any) -> None:
    """A run builds the drafter its entry names; the drafter's kind, source and tree budget are its entry's."""
    from decode_tui.core.params import DecodeConfig
    from decode_tui.core.run import Run

    from .conftest import tiny_model
    from .test_autoregressive import loaded

    drafter_spec = MODE_SPECS[mode].drafter
    assert drafter_spec is not None
    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4), byte_bpe, 2)
    run = Run(lm, "ab ab ab ab", DecodeConfig(mode=mode, max_new_tokens=4, seed=1))
    drafter = run._drafter()
    try:
        assert (drafter.kind, drafter.source) == (drafter_spec.kind, drafter_spec.source)
        assert (drafter.tree_budget > 0) == (drafter_spec.trees == "measured"), "trees by default only if measured"
        assert drafter.draft_length(run.config.draft) == getattr(run.config.draft, drafter_spec.length)
    finally:
        drafter.close()


def test_the_docs_name_every_mode_and_every_member_of_the_drafter_protocol() -> None:
    """docs/events.md's `mode` row lists the modes; ARCHITECTURE.md's recipe names all the verifier asks of a
    drafter (it once named six of twelve)."""
    from pathlib import Path

    from decode_tui.core.drafting.drafters import Drafter

    root = Path(__file__).resolve().parents[1]
    mode_row = next(line for line in (root / "docs" / "events.md").read_text(encoding="utf-8").splitlines()
                    if line.startswith("| `mode` | `greedy`"))
    assert all(f"`{m}`" in mode_row for m in MODES), mode_row
    recipe = (root / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8").split("## Adding a mode")[1]
    members = {name for name in dir(Drafter) if not name.startswith("_")} | set(Drafter.__annotations__)
    assert len(members) >= 12
    missing = sorted(m for m in members if f"`{m}`" not in recipe)
    assert not missing, f"docs/ARCHITECTURE.md's recipe does not name {missing}"
