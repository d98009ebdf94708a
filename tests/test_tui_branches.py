"""Branch here, the branches screen, switching and comparing, the probability colouring: the app driven by the
deterministic fake decoder (which honours a branch: the kept tokens, the forced one, then its words)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Tree

from decode_tui.core.record.events import Started, TokenEmitted
from decode_tui.tui.app import DecodeApp
from decode_tui.tui.recording import read_recording, replay
from decode_tui.tui.screens.branch_here import BranchHere
from decode_tui.tui.screens.branches import BranchesScreen
from decode_tui.tui.screens.compare_branches import CompareBranches
from decode_tui.tui.settings import settings_from_dict
from decode_tui.tui.widgets.stats_bar import StatsBar
from decode_tui.tui.widgets.text_pane import TextPane, probability_step

from .fake_decoder import WORDS, FakeDecoder
from .test_tui import SIZE, in_event_loop, make, settle, text, until


async def _branch_at(pilot: Any, app: DecodeApp, position: int, choose: str | None = None,
                     typed: str | None = None, fake: FakeDecoder | None = None) -> None:
    """Select token ``position``, open branch here and pick the first or ``second`` candidate, or type a text;
    with ``fake``, wait until the branch's run has ended."""
    runs = len(fake.runs) if fake else 0
    pane = app.query_one(TextPane)
    pane.selected = None
    await pilot.press(*["left"] * (len(pane.pieces) - position))
    assert pane.selected == position
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, BranchHere))
    if typed is not None:
        app.screen.query_one("#branch-text").focus()
        await pilot.press(*typed, "enter")
    else:
        await pilot.press("down", "enter") if choose == "second" else await pilot.press("enter")
    if fake is not None:
        await until(pilot, lambda: len(fake.runs) == runs + 1)
        await settle(pilot, app)


@in_event_loop
async def test_branch_here_forces_a_candidate_decodes_on_and_keeps_the_old_path() -> None:
    app, fake = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await _branch_at(pilot, app, 3, choose="second", fake=fake)  # the runner-up, " cat"
        branch = fake.runs[1].branch
        assert branch is not None and branch.kept == (0, 1, 2) and branch.forced_ids == (99,)
        # The picked candidate's figures from the parent's raw stage (p 0.3, second) and its token's entropy.
        (stats,) = branch.forced_stats
        assert stats is not None and stats[0] == pytest.approx(math.log(0.3)) and stats[1:] == (1.0, 2)
        assert text(app) == "".join(WORDS[:3]) + " cat" + "".join(WORDS[4:])
        pieces = app.query_one(TextPane).pieces
        assert [p.source for p in pieces[:4]] == ["target", "target", "target", "forced"]
        tree = app.branching.tree
        assert len(tree.branches) == 2 and tree.current == 1
        assert tree.branches[0].text == "".join(WORDS)  # the old path is kept
        assert tree.branches[1].parent == 0 and tree.branches[1].position == 3


@in_event_loop
async def test_a_typed_text_is_forced_and_a_failing_branch_is_dropped_with_its_message() -> None:
    app, fake = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await _branch_at(pilot, app, 2, typed=" purple", fake=fake)
        assert text(app).startswith("".join(WORDS[:2]) + " purple")
        assert app.branching.tree.branches[1].forced_text == " purple"
        await _branch_at(pilot, app, 1, typed="fail")
        await until(pilot, lambda: any("cannot represent" in m for m in app.messages))
        await until(pilot, lambda: app.branching.tree.current == 1)
        assert len(app.branching.tree.branches) == 2  # nothing lost: both earlier branches stay
        assert text(app).startswith("".join(WORDS[:2]) + " purple")


@in_event_loop
async def test_the_branches_screen_shows_a_stored_branch_without_decoding_and_compares_two() -> None:
    app, fake = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await _branch_at(pilot, app, 3, choose="second", fake=fake)
        await pilot.press("B")
        await until(pilot, lambda: isinstance(app.screen, BranchesScreen))
        labels = [str(node.label) for node in app.screen.query_one("#branches-tree", Tree).root.children]
        assert "the first run" in labels[0] and "ppl" in labels[0]
        assert all(len(label) <= 66 for label in labels), "a row fits an 80-column dialog: it is cut, not wrapped"
        await pilot.press("enter")  # the first run, highlighted first
        await until(pilot, lambda: text(app) == "".join(WORDS))
        assert len(fake.runs) == 2, "showing a stored branch decodes nothing"
        assert app.branching.tree.current == 0
        assert app.query_one(StatsBar).counters.result is not None
        await pilot.press("B")
        await until(pilot, lambda: isinstance(app.screen, BranchesScreen))
        await pilot.press("down", "c")
        await until(pilot, lambda: isinstance(app.screen, CompareBranches))
        shown = " ".join(str(w.render()) for w in app.screen.query(".compare-text"))
        assert " cat" in shown and " fox" in shown
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, CompareBranches | BranchesScreen))
        await pilot.press("space")  # a stored branch decodes nothing: the key says why instead of doing nothing
        await until(pilot, lambda: any("Branch #0's run finished" in m for m in app.messages))


@in_event_loop
async def test_enter_without_a_selection_or_in_a_replay_says_what_to_do() -> None:
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("enter")
        assert any("Select a token" in m for m in app.messages)
    app, _ = make(replaying="demo.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("left", "enter")
        assert any("replay" in m for m in app.messages)


@in_event_loop
async def test_probability_colouring_switches_the_text_style_and_shows_a_legend_and_the_perplexity() -> None:
    app, _ = make()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        pane = app.query_one(TextPane)
        provenance = pane.style_of("text-pane--target")
        await pilot.press("v")
        assert pane.colouring == "probability" and "≥90%" in str(pane.border_subtitle)
        likely = pane.style_of("text-pane--p-likely")
        assert likely != provenance
        assert any(span.style == likely for span in pane._text.spans)  # every fake token is at p = 0.6
        assert "perplexity 1.67" in str(app.query_one(StatsBar).content)
        await pilot.press("v")
        assert str(pane.colouring) == "provenance" and not pane.border_subtitle


def test_the_probability_scale_has_four_steps_from_sure_to_surprising() -> None:
    import math

    assert [probability_step(math.log(p)) for p in (0.95, 0.6, 0.2, 0.01)] == ["sure", "likely", "unsure",
                                                                               "surprising"]
    assert probability_step(None) is None


@in_event_loop
async def test_a_recording_keeps_every_branch_and_its_replay_switches_between_them_with_no_model(
        tmp_path: Path) -> None:
    recording = tmp_path / "run.jsonl"
    app, fake = make(record=recording)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await _branch_at(pilot, app, 3, choose="second", fake=fake)
        branched_text = text(app)
    header, events = read_recording(recording)
    assert "".join(e.text for _, e in events if isinstance(e, TokenEmitted)) == "".join(WORDS)
    assert list(header["branches"]) == [1]
    assert isinstance(header["branches"][1][0][1], Started)
    app = DecodeApp(settings_from_dict(header["settings"]), lambda _s, _l: replay(events, 0),
                    replaying=recording.name, branches=header["branches"])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert text(app) == "".join(WORDS)
        await pilot.press("B")
        await until(pilot, lambda: isinstance(app.screen, BranchesScreen))
        await pilot.press("down", "enter")
        await until(pilot, lambda: text(app) == branched_text)
        assert app.branching.tree.current == 1


def _cut_labels(screen: Any) -> list[str]:
    """The labels of ``screen`` wider than the box that holds them: their ends are cut, not wrapped."""
    from textual.widgets import Label

    return [f"#{label.id}: {label.size.width} cells in {label.parent.content_size.width}"
            for label in screen.query(Label) if label.size.width > label.parent.content_size.width]


def showing(app: DecodeApp, screen: type) -> Callable[[], bool]:
    return lambda: isinstance(app.screen, screen)


@in_event_loop
async def test_every_dialog_wraps_its_lines_on_an_80_column_terminal() -> None:
    """A Label is as wide as its text: the model picker's first line lost its keys ("... a .gguf file. e")."""
    from decode_tui.tui.screens.model_picker import ModelPicker
    from decode_tui.tui.screens.prompt_editor import PromptEditor
    from decode_tui.tui.screens.stage_editor import StageEditor

    app, fake = make("sample")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        opened: list[str] = []
        for key, screen in (("z", StageEditor), ("e", PromptEditor)):
            await pilot.press(key)
            await until(pilot, showing(app, screen))
            await pilot.pause()
            if isinstance(app.screen, StageEditor):
                await pilot.press("down", "right")  # a change, so that its message shows too
                await pilot.pause()
            assert _cut_labels(app.screen) == [], type(app.screen).__name__
            opened.append(type(app.screen).__name__)
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is app.screen_stack[0])
        app.action_load_model()
        await until(pilot, lambda: isinstance(app.screen, ModelPicker))
        await pilot.pause()
        assert _cut_labels(app.screen) == [], "ModelPicker"
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, ModelPicker))
        await _branch_at(pilot, app, 3, choose="second", fake=fake)
        pane = app.query_one(TextPane)
        pane.selected = None
        await pilot.press("left", "enter")
        await until(pilot, lambda: isinstance(app.screen, BranchHere))
        await pilot.pause()
        assert _cut_labels(app.screen) == [], "BranchHere"
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, BranchHere))
        await pilot.press("B")
        await until(pilot, lambda: isinstance(app.screen, BranchesScreen))
        await pilot.pause()
        assert _cut_labels(app.screen) == [], "BranchesScreen"
        await pilot.press("c")  # the first run, highlighted first, against the branch on screen
        await until(pilot, lambda: isinstance(app.screen, CompareBranches))
        await pilot.pause()
        assert _cut_labels(app.screen) == [], "CompareBranches"
        assert opened == ["StageEditor", "PromptEditor"]
