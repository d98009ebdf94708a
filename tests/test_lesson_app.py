"""Every shipped lesson played in the app from its recording, with no model: its narration, its pauses, `n`.

The recordings are the ones that ship (made on the embedded model with
``decode-tui lesson NAME --live --record``); a test here fails if a lesson's
pauses are not all reached in its recording, if the recording is not of the
lesson as written, or if loading a model is attempted.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from decode_tui.cli.flags import ModeChoice
from decode_tui.cli.teaching import lesson_config, playback
from decode_tui.core.record.events import Finished
from decode_tui.lessons import Lesson, Pause, PauseTracker, parse, shipped
from decode_tui.tui.app import DecodeApp
from decode_tui.tui.recording import read_recording
from decode_tui.tui.settings import Settings, with_mode
from decode_tui.tui.widgets.narration import Narration, pause_text

from .fake_decoder import WORDS, FakeDecoder
from .test_tui import SIZE, in_event_loop, settle, text, until

LESSONS = shipped()


def reached(lesson: Lesson) -> tuple[list[Pause], Finished]:
    """The pauses the lesson's recording reaches, in order, and its last event."""
    assert lesson.recording_path is not None and lesson.recording_path.exists(), f"{lesson.name} ships a recording"
    _, events = read_recording(lesson.recording_path)
    tracker = PauseTracker(lesson.pauses)
    pauses = [p for p in (tracker.check(event) for _, event in events) if p is not None]
    last = events[-1][1]
    assert isinstance(last, Finished)
    return pauses, last


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.name)
def test_each_recording_is_of_its_lesson_and_reaches_every_pause(lesson: Lesson) -> None:
    pauses, last = reached(lesson)
    assert sorted(pauses, key=lesson.pauses.index) == list(lesson.pauses), "every pause happens in the recording"
    assert last.mode == lesson.mode
    header, _ = read_recording(lesson.recording_path)  # type: ignore[arg-type]
    settings = header["settings"]
    assert settings["prompt"] == lesson.prompt and settings["model"] == "smollm2"
    # Re-record after changing a lesson's settings: the recording must show what the file says. (Read as a replay
    # reads it: a field added since the recording was made, such as a new sampling stage, is at its default.)
    from decode_tui.tui.settings import settings_from_dict

    recorded, configured = settings_from_dict(settings).config, lesson_config(lesson, {})
    # A history file is named by its path where the recording was made: the same file, beside the lesson.
    assert [Path(p).name for p in recorded.draft.history] == [Path(p).name for p in configured.draft.history]
    assert dataclasses.replace(recorded, draft=dataclasses.replace(recorded.draft, history=())) == \
        dataclasses.replace(configured, draft=dataclasses.replace(configured.draft, history=()))
    assert set(settings["config"]) <= set(dataclasses.asdict(lesson_config(lesson, {})))


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.name)
@in_event_loop
async def test_each_lesson_plays_from_its_recording_pausing_at_its_moments(lesson: Lesson,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from decode_tui.core.model import loading

    def no_model(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a lesson played from its recording loads no model")

    monkeypatch.setattr(loading, "load_model", no_model)
    monkeypatch.setenv("DECODE_TUI_CACHE", "/nonexistent/no-models-here")
    pauses, last = reached(lesson)
    app = playback(lesson, speed=0)
    async with app.run_test(size=SIZE) as pilot:
        narration = app.query_one(Narration)
        await pilot.pause(0.2)
        assert narration.text == lesson.intro and app.pump is not None and app.pump.paused and text(app) == ""
        for pause in pauses:
            await pilot.press("n")  # on to the next moment: a whole stretch of the run, not one step
            said = pause_text(pause, live=False, name=lesson.name)
            await until(pilot, lambda said=said: said in narration.text)  # type: ignore[misc]
            if pause.try_ and not pause.try_in_replay:
                assert f"decode-tui lesson {lesson.name} --live" in narration.text, "a recording cannot try; live can"
            elif pause.try_:  # a key that works in a replay too is offered as it is
                assert f"Try: {pause.try_}" in narration.text and "--live" not in narration.text
            if lesson.mode == "beam" and pause.on == "beam finished":
                await pilot.press("L")  # a replay re-ranks its finished hypotheses: that changes no recorded event
                assert app.settings.config.beam.length_penalty > 1.0
                assert not any("cannot change" in m for m in app.messages)
        if app.view.finished is None:
            await pilot.press("n")
        await settle(pilot, app)
        await until(pilot, lambda: "This run:" in narration.text)
        assert lesson.summary in narration.text and f"{last.new_tokens} tokens" in narration.text
        assert text(app) == last.text or lesson.mode == "beam"  # beam search shows its hypotheses
        assert app.error is None


@in_event_loop
async def test_a_live_lesson_offers_what_to_try_and_n_goes_on_to_the_next_pause() -> None:
    lesson = parse('name = "mine"\ntitle = "Mine"\nmode = "greedy"\nprompt = "p"\nintro = "Look."\n'
                   '[[pause]]\non = "token 2"\ntext = "Two."\ntry = "Press T."\n'
                   '[[pause]]\non = "token 5"\ntext = "Five."\n', "mine.toml")
    fake = FakeDecoder(delay=0.2)  # slow enough to see the run go on past a pause
    app = DecodeApp(with_mode(Settings(), "greedy"), fake.source, start_paused=True,
                    lesson=lesson)
    async with app.run_test(size=SIZE) as pilot:
        narration = app.query_one(Narration)
        await pilot.pause(0.1)
        assert narration.text == "Look."
        await pilot.press("n")
        # Each pause says the moment it speaks of: the run moves on past it.
        await until(pilot, lambda: narration.text == "At token 2: Two.\nTry: Press T.")
        assert text(app) == "".join(WORDS[:2])
        await pilot.press("n")
        await until(pilot, lambda: narration.text == "At token 5: Five.")
        assert text(app) == "".join(WORDS[:5])
        await pilot.press("space")  # running on past it: the text stays, said to be the last pause's
        await until(pilot, lambda: narration.text.startswith("Said at the last pause; the run has moved on since.\n"
                                                             "At token 5: Five."))
        await settle(pilot, app, until=10)
        await until(pilot, lambda: "This run:" in narration.text)
        await pilot.press("r")  # a restart starts the lesson over, on its intro
        await until(pilot, lambda: narration.text == "Look." and len(fake.runs) == 2)


async def to_the_summary(pilot: Pilot[Any], app: DecodeApp, lesson: Lesson) -> Narration:
    """Go on (n) through every moment of ``lesson`` to its end: its narration panel, showing the summary."""
    narration = app.query_one(Narration)
    for _ in lesson.pauses:
        await pilot.press("n")
        await pilot.pause(0.1)
    await settle(pilot, app)
    await until(pilot, lambda: "This run:" in narration.text)
    return narration


@in_event_loop
async def test_a_lesson_opened_from_the_list_says_q_goes_back_to_it() -> None:
    """Played from the start screen (``--from-list``, as the list and a classroom tab play it), q's words in the
    footer, the help and the summary are "back to the list", not "quit"."""
    lesson = next(lesson for lesson in LESSONS if lesson.name == "beam-search")
    app = playback(lesson, speed=0, from_list=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: "Back to the list" in app.screen._compositor.render_strips()[-1].text)
        footer = " ".join(app.screen._compositor.render_strips()[-1].text.split())
        assert "q Back to the list" in footer and "Quit" not in footer, footer
        assert [b.description for b in app.all_bindings() if b.id == "quit"] == ["Back to the list"]
        narration = await to_the_summary(pilot, app, lesson)
        assert narration.hint == "r: run it again · q: back to the list"
    plain = playback(lesson, speed=0)
    async with plain.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: "q Quit" in " ".join(plain.screen._compositor.render_strips()[-1].text.split()))


@in_event_loop
async def test_in_80x24_the_summary_reads_as_prose_and_the_keys_stay_in_view() -> None:
    """The summary's last line, the keys to press, was pushed out of the panel, and its text kept the line
    breaks written in the lesson file, mid-sentence at 80 columns."""
    lesson = next(lesson for lesson in LESSONS if lesson.name == "beam-search")
    app = playback(lesson, speed=0)
    async with app.run_test(size=(80, 24)) as pilot:
        narration = await to_the_summary(pilot, app, lesson)
        await pilot.pause(0.1)
        screen = app.screen._compositor.render_strips()  # the screen as painted, borders included
        shown = [screen[y].text for y in range(narration.region.y, narration.region.bottom)]
        assert "r: run it again · q: quit" in shown[-1], shown
        body = " ".join(line.strip(" │╭╮╰╯─") for line in shown[1:-1])
        assert "how much a longer answer is favoured" in " ".join(body.split()), shown
        # The beam panel has six lines here: the early-stopping test, which the last pause is about, is in them,
        # and so is the best finished hypothesis, which it calls the answer (a beam finished at this last step).
        from decode_tui.tui.widgets.beam_panel import BeamPanel

        region = app.query_one(BeamPanel).content_region
        panel = [screen[y].text[region.x:region.right].strip() for y in range(region.y, region.bottom)]
        assert panel[0].startswith("early stop (False): best attainable"), panel
        assert "finished hypotheses" in panel and any(line.startswith("1   26") for line in panel), panel
        shown = [line for line in panel if line]
        assert not shown[-1].startswith("ancestry ("), panel  # a tree's heading only with some of its tree


def test_a_lesson_in_another_mode_drops_the_settings_of_its_own() -> None:
    beam = next(lesson for lesson in LESSONS if lesson.mode == "beam")
    config = lesson_config(beam, {"mode": ModeChoice("greedy"), "max_new_tokens": 5})
    assert config.mode == "greedy" and config.max_new_tokens == 5


@pytest.mark.skipif(shutil.which("tmux") is None, reason="no tmux here; the Pilot test above plays every lesson")
@pytest.mark.parametrize("name", ["speculative", "beam-search"])
def test_two_lessons_play_in_a_real_terminal_with_no_model_on_disk(name: str, tmp_path: Path) -> None:
    """The console script in tmux, with empty model caches and the hub offline: the intro, `n`, the first
    pause's narration, `q`, exit 0."""
    from .serving import SCRIPT

    lesson = next(lesson for lesson in LESSONS if lesson.name == name)
    first, _ = reached(lesson)
    socket, status = f"decode-tui-test-{os.getpid()}-{name}", tmp_path / "status"
    env = {**os.environ, "DECODE_TUI_CACHE": str(tmp_path / "empty-cache"), "HF_HOME": str(tmp_path / "empty-hf"),
           "HF_HUB_OFFLINE": "1", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    command = f"{shlex.quote(SCRIPT)} lesson {name}; echo $? > {shlex.quote(str(status))}"
    tmux = ["tmux", "-L", socket, "-f", "/dev/null"]

    def screen() -> str:
        done = subprocess.run([*tmux, "capture-pane", "-p", "-t", "lesson"], capture_output=True, text=True, env=env)
        return " ".join(done.stdout.replace("│", " ").split())  # the narration panel wraps; compare words

    def wait_for(words: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while " ".join(words.split())[:60] not in screen():
            if time.monotonic() > deadline:
                raise AssertionError(f"{words[:60]!r} never showed; the screen: {screen()}")
            time.sleep(0.2)

    subprocess.run([*tmux, "new-session", "-d", "-s", "lesson", "-x", "132", "-y", "42", command], env=env, check=True)
    try:
        wait_for(lesson.intro)
        subprocess.run([*tmux, "send-keys", "-t", "lesson", "n"], env=env, check=True)
        wait_for(first[0].text)
        subprocess.run([*tmux, "send-keys", "-t", "lesson", "q"], env=env, check=True)
        deadline = time.monotonic() + 30
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.read_text().strip() == "0"
    finally:
        subprocess.run([*tmux, "kill-server"], env=env, capture_output=True)
    assert not (tmp_path / "empty-cache").exists() or not any((tmp_path / "empty-cache").iterdir()), "nothing fetched"


def _events(name: str) -> list[Any]:
    lesson = next(lesson for lesson in LESSONS if lesson.name == name)
    assert lesson.recording_path is not None
    return [event for _, event in read_recording(lesson.recording_path)[1]]


def test_what_each_lesson_says_of_its_run_is_true_of_its_recording() -> None:
    """The claims a lesson's texts make about the run it plays, checked where a test can check them (the words
    were rewritten where they were not: acceptance did not fall with the position, copies were not mostly
    accepted, one round was on screen where the text spoke of the latest rounds)."""
    from decode_tui.core.record.events import DraftVerified, TokenSampled

    # repetition-penalty, token 3: "the words already written have dropped" at the penalty stage.
    events = _events("repetition-penalty")
    step = next(e for e in events if isinstance(e, TokenSampled) and e.step == 2)
    started = events[0]
    written = set(started.prompt_token_ids) | {e.token_id for e in events if isinstance(e, TokenSampled)
                                                and e.step < 2}
    raw = {c.token_id: c.prob for c in step.stages[0].candidates}
    penalised = {c.token_id: c.prob for c in step.stages[1].candidates}
    # dropped: lower after the penalty, or out of its top candidates altogether
    assert any(t in written and (t not in penalised or penalised[t] < raw[t]) for t in raw)
    # speculative, first rejection: "u was above min(1, p / q)".
    rounds = [e for e in _events("speculative") if isinstance(e, DraftVerified)]
    first = next(v for r in rounds for v in r.verdicts if v.verdict == "rejected")
    assert first.u is not None and first.u >= first.threshold
    # prompt-lookup intro: "this run shows both", whole copies accepted and copies rejected at their first token.
    rounds = [e for e in _events("prompt-lookup") if isinstance(e, DraftVerified)]
    assert any(r.extra_kind == "bonus" for r in rounds) and any(r.accepted == 0 for r in rounds)
    # when-drafting-does-not-pay: "about one token per forward", each verification checking up to eleven.
    finished = _events("when-drafting-does-not-pay")[-1]
    assert finished.new_tokens / finished.target_forwards < 1.1
    # adaptive-draft-length, token 24: the first copy (k = 4) rejected at once, one-token drafts since.
    events = _events("adaptive-draft-length")
    tokens, rounds = 0, []
    for e in events:
        tokens += type(e).__name__ == "TokenEmitted"
        if isinstance(e, DraftVerified) and tokens < 24:
            rounds.append(e)
    assert len(rounds) >= 3 and (len(rounds[0].verdicts), rounds[0].accepted) == (4, 0)
    assert all(len(r.verdicts) == 1 for r in rounds[1:])
    # min-p, token 1: "how few of the 49,152 tokens passed" a cut at 0.1 x the top token's probability; token 8:
    # "where the model is sure, the threshold is high and it keeps a handful; where it hesitates, more survive".
    steps = [e for e in _events("min-p") if isinstance(e, TokenSampled)]
    cuts = [next(s for s in e.stages if s.stage == "min_p") for e in steps]
    assert cuts[0].possible is not None and cuts[0].possible < 50
    tops = [next(s for s in e.stages if s.stage == "temperature").candidates[0].prob for e in steps]
    for cut, top in zip(cuts, tops, strict=True):
        assert cut.threshold == pytest.approx(0.1 * top, rel=1e-3)
    possible = [c.possible or 0 for c in cuts]
    assert min(possible) <= 10 and max(possible) >= 100, possible
    assert _events("min-p")[-1].finish_reason == "eos"


def test_what_the_why_trees_lesson_says_is_true_of_its_recording() -> None:
    from decode_tui.core.record.events import DraftProposed, DraftVerified, Finished, TokenEmitted
    from decode_tui.core.token_tree import ROOT, TokenTree

    events = _events("why-trees")
    lesson = next(lesson for lesson in LESSONS if lesson.name == "why-trees")
    # The second branch: after the opening fence, a line break (first) and 'python'; the target refused the first
    # and took the second, with a bonus token after it, in one forward.
    proposed = next(e for e in events if isinstance(e, DraftProposed))
    verified = next(e for e in events if isinstance(e, DraftVerified))
    assert proposed.parents is not None and verified.path is not None
    roots = TokenTree(proposed.token_ids, proposed.parents).children(ROOT)
    assert [proposed.texts[i] for i in roots] == ["\n", "python"]
    assert verified.verdicts[roots[0]].verdict == "rejected" and verified.path == (roots[1],)
    assert verified.extra_kind == "bonus"
    before = "".join(e.text for e in events[: events.index(proposed)] if isinstance(e, TokenEmitted))
    assert before.endswith("```")
    # Token 40: every round since accepted whole, with a bonus, longer as the match grew, up to ten.
    tokens, sizes = 0, []
    for e in events:
        tokens += isinstance(e, TokenEmitted)
        if isinstance(e, DraftVerified) and e.round > 0 and tokens < 40:
            assert e.accepted == len(e.verdicts) and e.extra_kind == "bonus", e.round
            sizes.append(e.accepted)
    assert sizes == sorted(sizes) and sizes[-1] == 10, sizes
    # The summary: exactly the first (greedy) answer, in a fraction of greedy's forwards.
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert lesson.recording_path is not None
    first = (lesson.recording_path.parent / "11-why-trees-first-run.txt").read_text(encoding="utf-8")
    assert finished.text == first and finished.target_forwards <= finished.new_tokens // 4


def test_what_the_json_schema_lesson_says_of_the_grammar_is_true_of_its_recording() -> None:
    """json-schema: its pauses' and summary's claims about what the model wanted and the grammar refused."""
    import json

    import jsonschema

    from decode_tui.core.record.events import StageCandidates, TokenSampled

    lesson = next(lesson for lesson in LESSONS if lesson.name == "json-schema")
    events = _events("json-schema")
    steps = [e for e in events if isinstance(e, TokenSampled)]

    def stage(step: TokenSampled, name: str) -> StageCandidates:
        return next(s for s in step.stages if s.stage == name)

    def wanted(step: TokenSampled) -> str:
        return stage(step, "raw").candidates[0].text

    def refused(step: TokenSampled) -> list[str]:
        return [c.text for c in stage(step, "grammar").removed_candidates or ()]

    # token 1: the model would open a fence or a sentence; one token of all allowed, the others struck through.
    first = steps[0]
    assert wanted(first) == "```" and stage(first, "grammar").possible == 1 and first.text == '{"'
    assert {"```", "Here", "Your"} <= set(refused(first))
    # token 2: it wanted the cat's name itself; the grammar writes the schema's first key.
    assert (wanted(steps[1]), steps[1].text, stage(steps[1], "grammar").possible) == ("mis", "name", 1)
    assert "mis" in refused(steps[1])
    # token 12: a real choice among the tokens an integer starts with, and the model took the prompt's 4.
    age = steps[11]
    assert age.text == "4" and wanted(age) == "4" and 1 < (stage(age, "grammar").possible or 0) <= 20
    # token 18: it wanted G (Ginger); the schema says ginger; greedy took the best allowed token, white.
    colour = steps[17]
    assert wanted(colour) == "G" and "G" in refused(colour) and colour.text == "white"
    # end of text: complete, one token allowed; the model wanted a new line first.
    last = steps[-1]
    assert wanted(last) == "\n" and stage(last, "grammar").possible == 1
    assert "only the end of text" in (stage(last, "grammar").detail or "")
    # The summary: the output parses and fits the schema, and it is valid and wrong.
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.finish_reason == "eos" and finished.constraint_complete
    output = json.loads(finished.text)
    jsonschema.validate(output, json.loads(lesson.settings["json_schema"]))
    assert output == {"name": "Miso", "age": 4, "colour": "white", "indoor": True}


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.name)
@in_event_loop
async def test_at_80x24_a_lessons_summary_keeps_its_figures_in_view(lesson: Lesson) -> None:
    from .test_tui import _shown

    _, last = reached(lesson)
    app = playback(lesson, speed=0)
    async with app.run_test(size=(80, 24)) as pilot:
        narration = app.query_one(Narration)
        await pilot.pause(0.2)
        while app.view.finished is None or "This run:" not in narration.text:
            await pilot.press("n")
            await pilot.pause(0.05)
        await settle(pilot, app)
        shown = " ".join(" ".join(_shown(narration.body)).split())
        assert f"This run: {last.new_tokens} tokens" in shown, shown
        assert app.view.counters.state == "finished", "a lesson whose last pause is its end is finished, not paused"
    text = " ".join(narration.text.split())
    assert text.index("This run:") < text.index(" ".join(lesson.summary.split())), "the summary under the figures"


def test_the_readmes_lesson_format_puts_the_summary_where_the_app_does() -> None:
    """The README said the summary was read above the run's figures; the app shows it below them (the summaries
    speak of "the figures above")."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert 'summary = "What they read at the end, below the run\'s figures."' in readme


@pytest.mark.parametrize("size", [(80, 24), SIZE])
@in_event_loop
async def test_the_header_shows_the_seed_and_keeps_its_prompt_line(size: tuple[int, int]) -> None:
    """At 80 columns the settings line wrapped and pushed the prompt out of the header; the seed that makes a
    sampled run repeatable was nowhere on screen."""
    from decode_tui.tui.widgets.run_header import RunHeader

    from .test_tui import _shown

    for name, seed in (("speculative", "seed=10"), ("greedy-vs-sampling", "seed=7")):
        lesson = next(lesson for lesson in LESSONS if lesson.name == name)
        app = playback(lesson, speed=0)
        async with app.run_test(size=size) as pilot:
            await pilot.press("n")
            await until(pilot, lambda app=app: app.view.started is not None)  # type: ignore[misc]
            await pilot.pause(0.1)
            lines = [line.strip() for line in _shown(app.query_one(RunHeader))]
            assert lines[-1].startswith("prompt:"), lines
            if size == SIZE:
                assert seed in lines[1], lines


@in_event_loop
async def test_at_80x24_the_beam_finished_pause_shows_the_finished_hypotheses_it_speaks_of() -> None:
    from decode_tui.tui.widgets.beam_panel import BeamPanel

    from .test_tui import _shown

    lesson = next(lesson for lesson in LESSONS if lesson.name == "beam-search")
    finished_pause = next(p for p in lesson.pauses if p.on == "beam finished")
    app = playback(lesson, speed=0)
    async with app.run_test(size=(80, 24)) as pilot:
        narration = app.query_one(Narration)
        await pilot.pause(0.2)
        while finished_pause.text not in narration.text:
            await pilot.press("n")
            await pilot.pause(0.1)
        await until(pilot, lambda: app.pump is not None and app.pump.paused and app.pump.events.empty())
        await pilot.pause(0.1)
        shown = [line.strip() for line in _shown(app.query_one(BeamPanel))]
        assert any(line.startswith("finished hypotheses") for line in shown), shown
        assert any(line.startswith("early stop (") for line in shown), shown


@in_event_loop
async def test_the_what_if_lesson_holds_its_branch_and_the_claims_its_text_makes() -> None:
    """The branch is at the pause's close call, with the runner-up forced; the two answers part there; in the
    lesson's replay, B lists both and shows the branch."""
    from decode_tui.core.record.events import Branched, TokenEmitted, TokenSampled
    from decode_tui.tui.screens.branches import BranchesScreen

    lesson = next(lesson for lesson in LESSONS if lesson.name == "what-if")
    assert lesson.recording_path is not None
    header, events = read_recording(lesson.recording_path)
    (trace,) = header["branches"].values()
    branched = next(e for _, e in trace if isinstance(e, Branched))
    pause = lesson.pauses[0].after_tokens
    assert pause is not None and branched.position == pause - 1 and branched.parent == 0
    close = next(e for _, e in events if isinstance(e, TokenSampled) and e.step == branched.position)
    first, second = close.stages[0].candidates[:2]
    assert branched.forced_token_ids == (second.token_id,) and first.prob - second.prob < 0.05, "a close call"
    root = "".join(e.text for _, e in events if isinstance(e, TokenEmitted))
    other = "".join(e.text for _, e in trace if isinstance(e, TokenEmitted))
    assert root[:4] == other[:4] == "I'm " and root != other
    finishes = [e for _, e in events if isinstance(e, Finished)] + [e for _, e in trace if isinstance(e, Finished)]
    assert all(f.perplexity is not None for f in finishes)
    app = playback(lesson, speed=0.0)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(len(lesson.pauses) + 1):  # n goes on from the intro and from each moment
            await pilot.press("n")
            await pilot.pause(0.3)
        await until(pilot, lambda: app.view.finished is not None, timeout=10)
        await pilot.press("B")
        await until(pilot, lambda: isinstance(app.screen, BranchesScreen))
        assert len(app.branching.tree.branches) == 2
        await pilot.press("down", "enter")
        await until(pilot, lambda: text(app) == other)


@pytest.mark.parametrize("where", ["intro", "first pause"])
@in_event_loop
async def test_showing_a_branch_and_coming_back_leaves_the_lesson_where_it_was(where: str) -> None:
    """`B`, down, `enter` (branch #1), then `B`, up, `enter` (back to #0) left the lesson stuck: the run shown
    again had been stopped, and n and space did nothing while the narration offered them. The run on screen is
    parked while another branch is shown, and goes on from where it was when its branch is shown again."""
    from textual.widgets import Tree

    from decode_tui.tui.screens.branches import BranchesScreen

    lesson = next(lesson for lesson in LESSONS if lesson.name == "what-if")
    pauses, last = reached(lesson)
    app = playback(lesson, speed=0.0)
    async with app.run_test(size=SIZE) as pilot:
        narration = app.query_one(Narration)
        await pilot.pause(0.2)
        said = lesson.intro
        if where == "first pause":
            await pilot.press("n")
            said = pause_text(pauses[0], live=False, name=lesson.name)
            await until(pilot, lambda: said in narration.text)
        before = text(app)
        for keys in (("down", "enter"), ("up", "enter")):
            await pilot.press("B")
            await until(pilot, lambda: isinstance(app.screen, BranchesScreen))
            labels = [str(node.label) for node in app.screen.query_one("#branches-tree", Tree).root.children]
            assert labels[0].endswith("paused"), labels  # the first run is paused (parked, or on screen), not running
            assert all(len(label) <= 66 for label in labels), labels  # a tree row fits an 80-column dialog
            await pilot.press(*keys)
            await until(pilot, lambda: not isinstance(app.screen, BranchesScreen))
            await pilot.pause(0.2)
        assert app.branching.tree.current == 0 and text(app) == before
        assert said in narration.text, "the narration says where the lesson stands"
        assert app.pump is not None and app.pump.paused
        for pause in pauses[1 if where == "first pause" else 0 :]:
            await pilot.press("n")  # the key the narration offers goes on to the next moment
            said = pause_text(pause, live=False, name=lesson.name)
            await until(pilot, lambda said=said: said in narration.text)  # type: ignore[misc]
        if app.view.finished is None:
            await pilot.press("n")
        await until(pilot, lambda: "This run:" in narration.text)
        assert text(app) == last.text


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda lesson: lesson.name)
@in_event_loop
async def test_at_80x24_each_pause_shows_what_its_narration_points_at(lesson: Lesson) -> None:
    """On a classroom projector's 80x24, at every pause: in the candidates panel each stage's line (what it cut:
    min-p's threshold, the grammar's count) is on screen whole, and the final stage's best candidate with it; in
    the drafting modes the newest round's row; in beam search the newest step's open beams. A narration taller
    than its panel says there is more, and PgDn reaches its end (the json-schema summary stopped mid-sentence with
    no sign that more followed)."""
    from decode_tui.core.modes import MODE_SPECS
    from decode_tui.core.record.events import BeamStepped, DraftVerified, TokenSampled
    from decode_tui.tui.widgets.beam_panel import BeamPanel
    from decode_tui.tui.widgets.candidates import STAGE_NAMES, CandidatesPanel, stage_note
    from decode_tui.tui.widgets.draft_panel import DraftPanel

    from .test_tui import _shown

    pauses, _ = reached(lesson)
    app = playback(lesson, speed=0)
    async with app.run_test(size=(80, 24)) as pilot:
        narration = app.query_one(Narration)
        await pilot.pause(0.2)
        for pause in pauses:
            await pilot.press("n")
            said = pause_text(pause, live=False, name=lesson.name)
            await until(pilot, lambda said=said: said in narration.text)  # type: ignore[misc]
            await pilot.pause(0.2)
            _assert_more_is_signed(narration, pause.on)
            verified = [e for _, e in app.view.trace if isinstance(e, DraftVerified)]
            if verified:  # the drafting modes: the newest round's row, with its verdicts, is on screen
                where = "#pld-rounds" if MODE_SPECS[lesson.mode].view == "lookup" else "#panel-draft"
                panel = app.query_one(where, DraftPanel)
                rows = " ".join(_shown(panel))
                assert f"r{verified[-1].round} " in rows, (pause.on, rows)
            steps = [e for _, e in app.view.trace if isinstance(e, BeamStepped)]
            if steps and lesson.mode == "beam" and app.view.finished is None:  # the newest step's open beams
                rows = " ".join(_shown(app.query_one(BeamPanel)))
                assert f"step {steps[-1].step + 1}: open beams" in rows, (pause.on, rows)
            sampled = [e for _, e in app.view.trace if isinstance(e, TokenSampled)]
            if lesson.mode not in ("greedy", "sample") or not sampled:
                continue
            shown = " ".join(_shown(app.query_one(CandidatesPanel)))  # wrapped lines read as one
            shown = " ".join(shown.split())
            step = sampled[-1]
            for stage in step.stages:
                line = STAGE_NAMES.get(stage.stage, stage.stage) + (f": {note}" if (note := stage_note(stage)) else "")
                assert " ".join(line.split()) in shown, (pause.on, line, shown)
            best = step.stages[-1].kept[0]
            assert repr(best.text) in shown, (pause.on, "the final stage's best candidate", shown)
        if app.view.finished is None:
            await pilot.press("n")
        await until(pilot, lambda: "This run:" in narration.text)
        await pilot.pause(0.2)
        _assert_more_is_signed(narration, "summary")
        for _ in range(10):  # PgDn until the end: the summary's last words come into view
            await pilot.press("pagedown")
            await pilot.pause(0.05)
        assert narration.scroll_y == narration.max_scroll_y and not str(narration.border_subtitle).startswith("▼")


def _assert_more_is_signed(narration: Narration, where: str) -> None:
    taller = narration.max_scroll_y > 0
    assert str(narration.border_subtitle).startswith("▼ more") == taller, (where, narration.border_subtitle)


@in_event_loop
async def test_at_80x24_the_what_if_text_keeps_its_rows_after_left_and_v() -> None:
    """The narration asks for Left (select the close call) and v (colour by probability): at 80x24 the inspector
    took the text pane's every row, and after v only the legend showed. The text keeps two rows at least."""
    from decode_tui.tui.widgets.text_pane import TextPane
    from decode_tui.tui.widgets.token_inspector import TokenInspector

    from .test_tui import _shown

    lesson = next(lesson for lesson in LESSONS if lesson.name == "what-if")
    app = playback(lesson, speed=0)
    async with app.run_test(size=(80, 24)) as pilot:
        narration = app.query_one(Narration)
        await pilot.pause(0.2)
        await pilot.press("n")
        await until(pilot, lambda: lesson.pauses[0].text in narration.text)
        for key in ("left", "v"):
            await pilot.press(key)
            await pilot.pause(0.2)
            pane = app.query_one(TextPane)
            assert pane.content_size.height >= 2, key
            assert "I'm sorry" in " ".join(_shown(pane)), (key, _shown(pane))
        assert app.query_one(TokenInspector).has_class("visible")
