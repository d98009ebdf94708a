"""The race: each mode measured alone (core/analysis/race.py), saved and read back, and replayed side by side in the
app."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from decode_tui.core.analysis.race import Lane, measure, speedup
from decode_tui.core.live import LiveParams
from decode_tui.core.params import DecodeConfig, DraftParams
from decode_tui.core.record.events import Finished, Mode, Started, TokenEmitted
from decode_tui.tui.race_app import RaceApp
from decode_tui.tui.recording import is_race, read_race, write_race
from decode_tui.tui.settings import Settings, with_mode
from decode_tui.tui.widgets.race_lane import RaceLane
from decode_tui.tui.widgets.stats_bar import StatsBar

from .conftest import tiny_model
from .fake_decoder import WORDS, FakeDecoder
from .test_autoregressive import loaded
from .test_tui import in_event_loop, until


def fake_lane(mode: Mode, step_s: float) -> Lane:
    """The fake decoder's run of ``mode``, one event every ``step_s`` seconds, its figures to match."""
    settings = with_mode(Settings(), mode)
    events = list(FakeDecoder().source(settings, LiveParams(settings.config.sampling, settings.config.draft))())
    timed = [(i * step_s, e) for i, e in enumerate(events)]
    last_t, last = timed[-1]
    assert isinstance(last, Finished)
    timed[-1] = (last_t, dataclasses.replace(last, elapsed_s=last_t, tokens_per_s=last.new_tokens / last_t))
    return Lane(mode, settings.config, tuple(timed))


def test_each_lane_is_its_mode_run_alone_and_greedy_pld_equals_greedy(byte_bpe: Any) -> None:
    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4), byte_bpe, 2)
    configs = {"greedy": DecodeConfig(mode="greedy", max_new_tokens=16, use_chat=False),
               "pld": DecodeConfig(mode="pld", max_new_tokens=16, use_chat=False,
                                   draft=DraftParams(max_ngram_size=2, num_pred_tokens=4))}
    said: list[str] = []
    lanes = measure(lm, "a b c a b c a b", configs, runs=3, progress=said.append)
    assert [lane.name for lane in lanes] == ["greedy", "pld"]
    assert said == ["warming up greedy", "warming up pld", "round 1 of 3: greedy alone", "round 1 of 3: pld alone",
                    "round 2 of 3: pld alone", "round 2 of 3: greedy alone", "round 3 of 3: greedy alone",
                    "round 3 of 3: pld alone"], "alternated: ABC, CBA, ABC"
    for lane in lanes:
        times = [t for t, _ in lane.events]
        assert times[0] == 0.0 and times == sorted(times), "seconds since the lane's first event, in order"
        assert isinstance(lane.events[0][1], Started) and lane.finished is not None
        assert lane.finished.new_tokens == sum(isinstance(e, TokenEmitted) for _, e in lane.events)
    greedy, pld = lanes
    assert pld.finished is not None and greedy.finished is not None
    assert pld.finished.token_ids == greedy.finished.token_ids
    assert len(pld.rates) == 3 and pld.finished.tokens_per_s == sorted(pld.rates)[1], "the median run is shown"
    spread = speedup(pld, greedy)
    ratios = [p / g for p, g in zip(pld.rates, greedy.rates, strict=True)]
    assert spread is not None and spread.runs == 3
    assert (spread.low, spread.median, spread.high) == pytest.approx(sorted(ratios)), "round by round ratios"
    with pytest.raises(ValueError, match="greedy and at least one other"):
        measure(lm, "a b", {"pld": configs["pld"]})


def test_a_saved_race_reads_back_lane_by_lane(tmp_path: Path) -> None:
    lanes = [fake_lane("greedy", 0.1), fake_lane("pld", 0.03), fake_lane("speculative", 0.05)]
    settings = Settings(prompt="Copy: the quick brown fox")
    path = tmp_path / "race.jsonl"
    write_race(path, settings, lanes, "cpu float32")
    assert is_race(path)
    read_settings, device, read_lanes = read_race(path)
    assert read_settings.prompt == settings.prompt and device == "cpu float32"
    assert [lane.name for lane in read_lanes] == ["greedy", "pld", "speculative"]
    for mine, theirs in zip(lanes, read_lanes, strict=True):
        assert mine.config == theirs.config
        assert [e for _, e in mine.events] == [e for _, e in theirs.events]
        assert [t for t, _ in mine.events] == pytest.approx([t for t, _ in theirs.events], abs=1e-4)
    path.write_text('{"event": "race", "version": 1, "lanes": [{"name": "greedy"}]}\n', encoding="utf-8")
    from decode_tui.core.errors import UsageError

    with pytest.raises(UsageError, match="is not a readable decode-tui race"):
        read_race(path)


def race_app(speed: float = 1.0) -> RaceApp:
    lanes = [fake_lane("greedy", 0.1), fake_lane("pld", 0.03), fake_lane("speculative", 0.05)]
    return RaceApp(Settings(prompt="Copy: the quick brown fox"), lanes, "cpu float32", speed=speed)


@in_event_loop
async def test_the_race_moves_each_lane_at_its_own_measured_pace() -> None:
    app = race_app()
    async with app.run_test(size=(150, 36)) as pilot:
        race = app.race
        race.paused = True  # the test moves the clock itself
        await pilot.pause(0.1)
        lanes = list(race.query(RaceLane))
        assert [lane.mode for lane in lanes] == ["greedy", "pld", "speculative"]
        pld_end = race.lanes[1].events[-1][0]
        race.clock = pld_end  # pld has finished; greedy (0.1 s an event) is a third of the way
        race.tick()
        await pilot.pause(0.05)
        greedy, pld, _ = lanes
        assert pld.view.finished is not None and pld.text == race.lanes[1].finished.text  # type: ignore[union-attr]
        assert greedy.view.finished is None and 0 < len(greedy.text) < len("".join(WORDS))
        expected = speedup(race.lanes[1], race.lanes[0])
        assert expected is not None and expected.median > 1.5 and expected.runs == 1, "the fake pld lane is faster"
        assert f"{expected.median:.2f}x greedy's speed (one run)" in pld.query_one(".lane-title").content.plain  # type: ignore[attr-defined]
        race.paused = False
        await until(pilot, lambda: race.done, timeout=10)
        await pilot.pause(0.1)
        assert [lane.text for lane in lanes] == [lane.finished.text for lane in race.lanes]  # type: ignore[union-attr]
        assert "the baseline" in greedy.query_one(".lane-title").content.plain  # type: ignore[attr-defined]
        race.action_restart()  # r: again, from the start (no tick runs before the checks: nothing is awaited)
        assert race.clock == 0.0 and not race.done and all(lane.text == "" for lane in lanes)


@in_event_loop
async def test_a_tick_while_lanes_are_torn_down_hands_nothing_over_and_raises_nothing() -> None:
    """The timer may tick while the screen's lanes are being removed (the app closing as the race plays)."""
    app = race_app()
    async with app.run_test(size=(150, 36)) as pilot:
        race = app.race
        race.paused = True
        await pilot.pause(0.1)
        await list(race.query(RaceLane))[2].remove()
        before = list(race._next)
        race.clock = race.lanes[0].events[-1][0]
        race.tick()
        assert race._next == before, "no lane was handed events while one was missing"


@in_event_loop
async def test_each_lane_says_its_figures_whole_and_alike_in_80_columns() -> None:
    """Lanes a third of 80 columns wide cut "finish: length" off and broke figures over lines."""
    app = race_app(speed=0)
    async with app.run_test(size=(80, 30)) as pilot:
        await until(pilot, lambda: app.race.done, timeout=10)
        await pilot.pause(0.1)
        for lane in app.race.query(RaceLane):
            bar = lane.query_one(StatsBar)
            lines = [bar.render_line(y).text.strip() for y in range(bar.content_size.height)]
            parts = [part for line in lines if line for part in line.split(" · ")]
            assert parts[0] == "finished" and parts[1].endswith(" tok") and parts[3].endswith(" fwd"), lines
            assert all(part.count(" ") <= 1 for part in parts), f"a figure broken over two lines: {lines}"
            # The title's two lines hold the speed-up and its spread: the long form lost "(one run)".
            title = lane.query_one(".lane-title")
            shown = " ".join(title.render_line(y).text.strip() for y in range(title.content_size.height))
            if lane.mode != "greedy":
                assert shown.endswith("(one run)"), f"the spread in view: {shown}"
            if lane.mode == "speculative":  # its long form takes three lines here: the short one
                assert "greedy's speed" not in shown and "x (one run)" in shown, shown
        await pilot.resize_terminal(200, 30)  # wide again: the words come back
        await pilot.pause(0.2)
        titles = [lane.query_one(".lane-title").render_line(0).text for lane in app.race.query(RaceLane)]
        assert "greedy's speed (one run)" in titles[1], titles


@in_event_loop
async def test_a_replayed_race_keeps_its_header_lines_in_80_columns() -> None:
    """A recording's name wrapped the first line and pushed the prompt out of the three-line header."""
    lanes = [fake_lane("greedy", 0.1), fake_lane("pld", 0.03), fake_lane("speculative", 0.05)]
    app = RaceApp(Settings(prompt="Copy: the quick brown fox"), lanes, "cpu float32", speed=0,
                  source="2026-11-24-a-long-name-for-the-code-edit-race.jsonl")
    async with app.run_test(size=(80, 30)) as pilot:
        await pilot.pause(0.2)
        header = app.race.query_one("#race-header")
        first, how, prompt = [header.render_line(y).text.rstrip() for y in range(3)]
        assert first.endswith("-code-edit-race.jsonl   smollm2 · cpu float32") and "REPLAY of …" in first, first
        assert len(first) < 80 and prompt.startswith(" prompt: Copy"), (first, prompt)
        assert how == " Each mode ran alone, warm, once; replayed at the pace it had.", how
        await pilot.resize_terminal(160, 30)  # wider: the whole name and sentence again
        await pilot.pause(0.2)
        first, how = [header.render_line(y).text.rstrip() for y in range(2)]
        assert "REPLAY of 2026-11-24-a-long-name" in first and how.startswith(" Each mode ran alone on this device")


@in_event_loop
async def test_a_race_header_cuts_a_long_prompt_with_an_ellipsis() -> None:
    """The panel cut the prompt at its edge, with nothing to say it went on."""
    lanes = [fake_lane("greedy", 0.1), fake_lane("pld", 0.03)]
    long = "Rename the variable total to running_sum   everywhere in this code, and return the whole code " * 3
    app = RaceApp(Settings(prompt=long), lanes, "cpu float32", speed=0)
    async with app.run_test(size=(80, 30)) as pilot:
        await pilot.pause(0.2)
        prompt = app.race.query_one("#race-header").render_line(2).text.rstrip()
        assert prompt.startswith(" prompt: Rename the variable total to running_sum everywhere") and prompt.endswith(
            "…") and len(prompt) <= 80, prompt


@pytest.mark.parametrize("modes", ["greedy", "pld,pld", "greedy,warp"])
def test_a_race_with_one_mode_or_an_unknown_one_is_refused(modes: str) -> None:
    from decode_tui.core.errors import EXIT_USAGE

    from .test_cli import assert_clean_failure, cli

    says = "Unknown mode 'warp'" if "warp" in modes else "A race needs at least 2 modes"
    assert_clean_failure(cli("race", "--modes", modes), EXIT_USAGE, says)


def test_race_measures_saves_and_the_saved_race_replays(tiny_model_dir: Path, isolated_env: dict[str, str],
                                                       tmp_path: Path) -> None:
    from .test_cli import cli

    path = tmp_path / "race.jsonl"
    done = cli("race", "--model", str(tiny_model_dir), "--modes", "pld,greedy", "-p", "a b c a b c", "--no-chat",
               "--max-new-tokens", "8", "--repeats", "2", "--record", str(path), "--no-play", env=isolated_env)
    assert done.returncode == 0, done.stderr
    _, _, lanes = read_race(path)
    assert [lane.name for lane in lanes] == ["greedy", "pld"] and all(len(lane.rates) == 2 for lane in lanes)
    finished = [lane.finished for lane in lanes]
    assert all(f is not None for f in finished)
    assert finished[0].token_ids == finished[1].token_ids  # type: ignore[union-attr]


@in_event_loop
async def test_the_app_races_its_prompt_on_a_key_and_a_replay_refuses() -> None:
    from decode_tui.tui.app import DecodeApp
    from decode_tui.tui.screens.race import RaceScreen

    fake = FakeDecoder()
    app = DecodeApp(with_mode(Settings(prompt="Copy: the quick brown fox"), "sample"), fake.source)
    async with app.run_test(size=(150, 40)) as pilot:
        await until(pilot, lambda: app.view.finished is not None)
        await pilot.press("R")
        await until(pilot, lambda: isinstance(app.screen, RaceScreen), timeout=10)
        race = app.screen
        assert isinstance(race, RaceScreen)
        assert [lane.name for lane in race.lanes] == ["greedy", "pld", "speculative", "sample"]
        assert [s.mode for s in fake.runs[-4:]] == ["greedy", "pld", "speculative", "sample"]
        assert all(s.prompt == "Copy: the quick brown fox" for s in fake.runs), "every lane races the same prompt"
        await until(pilot, lambda: race.done)
        await pilot.pause(0.1)
        assert [lane.text for lane in race.query(RaceLane)] == [lane.finished.text for lane in race.lanes]  # type: ignore[union-attr]
        runs = len(fake.runs)
        await pilot.press("m")  # the main app's keys do not reach the run behind the race
        await pilot.pause(0.1)
        assert app.settings.mode == "sample" and len(fake.runs) == runs
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, RaceScreen))
    replay = DecodeApp(Settings(), FakeDecoder().source, replaying="demo.jsonl")
    async with replay.run_test(size=(150, 40)) as pilot:
        await pilot.press("R")
        await pilot.pause(0.2)
        assert not isinstance(replay.screen, RaceScreen)
        assert any("a race runs each mode on the model" in m for m in replay.messages)


@in_event_loop
async def test_while_the_app_measures_a_race_the_stats_bar_says_where_it_is() -> None:
    """A toast for a few seconds, then 4-7 s of the normal screen with nothing saying a race was measured."""
    from decode_tui.tui.app import DecodeApp
    from decode_tui.tui.screens.race import RaceScreen
    from decode_tui.tui.widgets.stats_bar import StatsBar

    fake = FakeDecoder(delay=0.05)  # each race run takes half a second: the progress can be watched
    app = DecodeApp(with_mode(Settings(prompt="Copy: the quick brown fox"), "greedy"), fake.source)
    async with app.run_test(size=(150, 40)) as pilot:
        await until(pilot, lambda: app.view.finished is not None)
        await pilot.press("R")
        seen: set[str] = set()

        def note() -> bool:
            state = app.query_one(StatsBar).counters.state
            if state.startswith("measuring the race"):
                seen.add(state)
            return isinstance(app.screen, RaceScreen)

        await until(pilot, note, timeout=30)
        assert any("round 2 of 3" in state for state in seen), seen
