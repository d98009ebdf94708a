"""SVG snapshots of each mode's screen and each theme at a fixed size.

Driven by the deterministic fake decoder, so there is no clock, timing or live
model output in them: the stats come from the fake's fixed ``Finished``.
Update after an intended change with ``pytest tests/test_snapshots.py --snapshot-update``
and look at the SVGs before committing them.
"""

from __future__ import annotations

from typing import Any

import pytest

from decode_tui.lessons import shipped
from decode_tui.tui.app import DecodeApp
from decode_tui.tui.settings import Settings, with_mode

from .fake_decoder import FakeDecoder

SIZE = (120, 36)


async def finished(pilot: Any) -> None:
    app = pilot.app
    for _ in range(100):
        await pilot.pause(0.05)
        if app.pump is not None and app.pump.finished.is_set() and app.pump.events.empty():
            break
    await pilot.pause(0.1)


def app_for(mode: str, theme: str | None = None) -> DecodeApp:
    return DecodeApp(with_mode(Settings(), mode), FakeDecoder().source, theme=theme)


@pytest.mark.parametrize("mode", ["greedy", "sample", "beam", "speculative", "pld"])
def test_mode_screen(snap_compare: Any, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert snap_compare(app_for(mode), terminal_size=SIZE, run_before=finished)


@pytest.mark.parametrize("theme", ["presenter", "colorblind", "mono"])
def test_theme(snap_compare: Any, theme: str) -> None:
    assert snap_compare(app_for("speculative", theme), terminal_size=SIZE, run_before=finished)


@pytest.mark.parametrize("theme", ["dark", "presenter", "colorblind", "mono"])
def test_probability_colouring(snap_compare: Any, monkeypatch: pytest.MonkeyPatch, theme: str) -> None:
    """The text coloured by how likely each token was: the four steps of the scale, with the legend."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    fake = FakeDecoder(probs=[0.95, 0.6, 0.2, 0.03])

    async def colour(pilot: Any) -> None:
        await finished(pilot)
        await pilot.press("v")

    app = DecodeApp(with_mode(Settings(), "greedy"), fake.source, theme=theme)
    assert snap_compare(app, terminal_size=SIZE, run_before=colour)


def test_token_selected_with_boundaries(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)

    async def select(pilot: Any) -> None:
        await finished(pilot)
        await pilot.press("b", "left", "left", "left")

    assert snap_compare(app_for("sample"), terminal_size=SIZE, run_before=select)


@pytest.mark.parametrize("name", [lesson.name for lesson in shipped()])
def test_lesson_summary(snap_compare: Any, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Each lesson played from its shipped recording, at its end: its mode's panel, and the narration's summary with
    the recorded figures."""
    from decode_tui.cli.teaching import playback
    from decode_tui.lessons import load

    monkeypatch.delenv("NO_COLOR", raising=False)

    async def to_the_end(pilot: Any) -> None:
        app = pilot.app
        for _ in range(200):
            if app.view.finished is not None:
                break
            await pilot.press("n")
            await pilot.pause(0.05)
        await finished(pilot)

    assert snap_compare(playback(load(name), speed=0), terminal_size=SIZE, run_before=to_the_end)


def test_race_layout(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three lanes of a race at its end (the fake decoder's runs with fixed times)."""
    from decode_tui.tui.race_app import RaceApp

    from .test_race import fake_lane

    monkeypatch.delenv("NO_COLOR", raising=False)
    lanes = [fake_lane("greedy", 0.1), fake_lane("pld", 0.03), fake_lane("speculative", 0.05)]

    async def done(pilot: Any) -> None:
        for _ in range(100):
            await pilot.pause(0.05)
            if pilot.app.race.done:
                break
        await pilot.pause(0.1)

    app = RaceApp(Settings(prompt="Copy: the quick brown fox jumps over the lazy dog"), lanes, "cpu float32", speed=0)
    assert snap_compare(app, terminal_size=SIZE, run_before=done)


def test_stage_editor(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage editor over a sampling run, min-p turned up to 0.05."""
    monkeypatch.delenv("NO_COLOR", raising=False)

    async def edit(pilot: Any) -> None:
        await finished(pilot)
        await pilot.press("z")
        await pilot.pause(0.1)
        pilot.app.screen.query_one("OptionList").highlighted = 7  # min-p
        await pilot.press("right", "right")
        await pilot.pause(0.1)

    assert snap_compare(app_for("sample"), terminal_size=SIZE, run_before=edit)


def test_grammar_stage(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A constrained step: the grammar stage with what it allows and expects, and the raw candidates it refused,
    struck through; then min-p's cut in its own words."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    from decode_tui.core.record.events import Candidate, StageCandidates, TokenSampled
    from decode_tui.tui.widgets.candidates import CandidatesPanel

    raw = (Candidate(5, " Sure", 0.46), Candidate(6, "{", 0.31), Candidate(7, " Here", 0.12), Candidate(8, "```", 0.05))
    stages = (StageCandidates("raw", raw, chosen_prob=0.31, chosen_rank=2),
              StageCandidates("grammar", (Candidate(6, "{", 0.94), Candidate(9, '{"', 0.06)), chosen_prob=0.94,
                              chosen_rank=1, possible=2, removed=49150, removed_candidates=(raw[0], raw[2], raw[3]),
                              detail="allows 2 of 49,152 tokens: must write '{' next"),
              StageCandidates("temperature", (Candidate(6, "{", 0.88), Candidate(9, '{"', 0.12)), chosen_prob=0.88,
                              chosen_rank=1),
              StageCandidates("min_p", (Candidate(6, "{", 1.0),), chosen_prob=1.0, chosen_rank=1, possible=1,
                              removed=1, threshold=0.088))

    async def show(pilot: Any) -> None:
        await finished(pilot)
        pilot.app.query_one(CandidatesPanel).show(
            TokenSampled(step=0, token_id=6, text="{", prob=1.0, greedy=False, stages=stages))
        await pilot.pause(0.1)

    assert snap_compare(app_for("sample"), terminal_size=SIZE, run_before=show)
