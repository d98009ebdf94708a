"""The start screen (tui/screens/start.py) and what it offers (tui/catalog.py): every lesson, the race, a folder's
recordings with the unreadable ones and their reasons; the key chosen, and the command it becomes (nothing off the
list); ``decode-tui lessons`` in a terminal and into a pipe."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from textual.widgets import OptionList

from decode_tui.core.errors import EXIT_USAGE, UsageError
from decode_tui.lessons import shipped
from decode_tui.tui.catalog import check_folder, command_for, entries, race_path
from decode_tui.tui.start_app import StartApp

from .test_cli import assert_clean_failure, cli
from .test_terminal import tmux, wait  # noqa: F401  (tmux is a fixture)
from .test_tui import in_event_loop

LESSONS = Path(__file__).parent.parent / "lessons"


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    """A teacher's folder: a run, a race, a damaged file, an empty one, a non-recording and a subfolder."""
    rec = tmp_path / "recs"
    rec.mkdir()
    shutil.copy(LESSONS / "11-why-trees.jsonl", rec / "trees.jsonl")
    shutil.copy(race_path(), rec / "my-race.jsonl")
    (rec / "broken.jsonl").write_text('{"event": "header"\nnot json\n', encoding="utf-8")
    (rec / "empty.jsonl").write_text("", encoding="utf-8")
    (rec / "notes.txt").write_text("not offered", encoding="utf-8")
    (rec / "inner").mkdir()
    shutil.copy(LESSONS / "11-why-trees.jsonl", rec / "inner" / "hidden.jsonl")
    return rec


def test_the_list_offers_every_lesson_the_race_and_the_folder_with_reasons(folder: Path) -> None:
    offered = entries(folder)
    keys = [e.key for e in offered]
    assert keys[:len(shipped())] == [f"lesson:{lesson.name}" for lesson in shipped()]
    assert "race" in keys and race_path().exists()
    recordings = {e.title: e for e in offered if e.kind == "recording"}
    # no .txt, no subfolder's
    assert sorted(recordings) == ["broken.jsonl", "empty.jsonl", "my-race.jsonl", "trees.jsonl"]
    assert recordings["trees.jsonl"].playable and recordings["trees.jsonl"].mode == "suffix"
    assert recordings["my-race.jsonl"].playable and recordings["my-race.jsonl"].mode == "race"
    for bad in ("broken.jsonl", "empty.jsonl"):
        problem = recordings[bad].problem
        assert problem and str(folder) not in problem, problem  # the reason, by the file's name alone
    assert "empty" in (recordings["empty.jsonl"].problem or "")
    assert all(e.line and len(e.line) <= 96 for e in offered if e.playable)


def test_a_key_becomes_its_own_command_and_nothing_off_the_list_does(folder: Path) -> None:
    assert command_for("lesson:why-trees", folder) == ["lesson", "why-trees"]
    assert command_for("race", folder) == ["replay", str(race_path())]
    assert command_for("recording:trees.jsonl", folder) == ["replay", str(folder / "trees.jsonl")]
    assert command_for("live:why-trees", folder, live=True) == ["lesson", "why-trees", "--live"]
    crafted = ["lesson:../../etc/passwd", "lesson:./my.toml", "lesson:why-trees --live", "recording:../x.jsonl",
               "recording:inner/hidden.jsonl", "recording:notes.txt", "lesson:", "", "x" * 10_000, "live:nope"]
    for key in crafted:
        with pytest.raises(UsageError, match="not on the list"):
            command_for(key, folder, live=True)
    with pytest.raises(UsageError, match="cannot be played"):
        command_for("recording:broken.jsonl", folder)
    with pytest.raises(UsageError, match="Live runs are off"):
        command_for("live:why-trees", folder)


def test_a_recordings_folder_that_is_missing_or_a_file_is_refused(tmp_path: Path, isolated_env: dict[str, str]
                                                                  ) -> None:
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    with pytest.raises(UsageError, match="no such folder"):
        check_folder(tmp_path / "missing")
    with pytest.raises(UsageError, match="is a file, not a folder"):
        check_folder(tmp_path / "a-file")
    for command in ("lessons", "serve"):
        assert_clean_failure(cli(command, "--recordings", str(tmp_path / "missing"), env=isolated_env), EXIT_USAGE,
                             "no such folder")
        assert_clean_failure(cli(command, "--recordings", str(tmp_path / "a-file"), env=isolated_env), EXIT_USAGE,
                             "is a file, not a folder")


def test_into_a_pipe_or_with_list_the_lessons_are_a_table(isolated_env: dict[str, str]) -> None:
    for args in ((), ("--list",)):
        done = cli("lessons", *args, env=isolated_env)
        assert done.returncode == 0, done.stderr
        assert all(lesson.name in done.stdout for lesson in shipped())


@in_event_loop
async def test_enter_chooses_q_leaves_and_l_runs_live_only_where_allowed(folder: Path) -> None:
    app = StartApp(entries(folder))
    async with app.run_test(size=(100, 40)) as pilot:
        listing = app.screen.query_one(OptionList)
        ids = [o.id for o in listing.options if o.id]
        assert ids == [e.key for e in entries(folder)]
        disabled = {o.id for o in listing.options if o.disabled and o.id}
        assert disabled == {"recording:broken.jsonl", "recording:empty.jsonl"}
        await pilot.press("l")  # no live runs here: nothing happens
        await pilot.pause()
        assert app.is_running
        await pilot.press("down", "enter")
    assert app.return_value == f"lesson:{shipped()[1].name}"
    app = StartApp(entries(folder), live=True, notice="Live runs are full: 2 of 2.")
    async with app.run_test(size=(100, 40)) as pilot:
        assert "Live runs are full" in str(app.screen.query_one("#start-notice").render())
        await pilot.press("l")
    assert app.return_value == f"live:{shipped()[0].name}"
    app = StartApp(entries(folder))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("q")
    assert app.return_value is None and app.return_code == 0


@in_event_loop
async def test_the_list_comes_back_on_the_entry_played_last_and_its_footer_keeps_play(folder: Path) -> None:
    """Back on the list after a lesson (q), the highlight is on the entry played (a live run's lesson too); the
    footer offers Enter to play after the highlight moves as before it; at 80x24 every entry keeps to its two
    lines, its description cut rather than wrapped."""
    third = f"lesson:{shipped()[2].name}"
    for given, expected in ((third, third), (f"live:{shipped()[3].name}", f"lesson:{shipped()[3].name}"),
                            ("lesson:no-such-thing", f"lesson:{shipped()[0].name}")):
        app = StartApp(entries(folder), highlight=given)
        async with app.run_test(size=(80, 24)) as pilot:
            listing = app.screen.query_one(OptionList)
            assert listing.highlighted is not None
            assert listing.get_option_at_index(listing.highlighted).id == expected
            footers = [" ".join(app.screen._compositor.render_strips()[-1].text.split())]
            await pilot.press("down", "down", "up")
            await pilot.pause()
            footers.append(" ".join(app.screen._compositor.render_strips()[-1].text.split()))
            assert all("Play" in footer for footer in footers), footers
            lines = [strip.text for strip in app.screen._compositor.render_strips()]
            titles = [i for i, line in enumerate(lines) if shipped()[0].title[:30] in line
                      or shipped()[1].title[:30] in line]
            assert len(titles) == 2 and titles[1] - titles[0] == 2, lines  # two lines an entry, none wrapped
            await pilot.press("q")


@in_event_loop
async def test_the_screen_survives_any_size_and_a_flood_of_keys(folder: Path) -> None:
    app = StartApp(entries(folder))
    async with app.run_test(size=(100, 40)) as pilot:
        for size in ((1, 1), (1000, 1000), (2, 40), (100, 40)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
        await pilot.press(*(["down"] * 200), *(["up"] * 50), "x", "y", "1", "tab")
        await pilot.pause()
        assert app.is_running
        await pilot.press("enter")
    assert app.return_value is not None and app.return_value.startswith(("lesson:", "race", "recording:"))



def test_in_a_terminal_lessons_opens_the_list_plays_the_choice_and_comes_back(
        tmux: Callable[..., str], tmp_path: Path, folder: Path) -> None:  # noqa: F811
    from .serving import SCRIPT

    done = tmp_path / "done"
    tmux("new-session", "-d", "-s", "t", "-x", "120", "-y", "40",
         f"{SCRIPT} lessons --recordings {folder}; echo $? > {done}; sleep 60")

    def screen() -> str:
        return str(tmux("capture-pane", "-p", "-t", "t"))

    def until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
        wait(condition, what, timeout, shows=screen)

    until(lambda: "At every step" in screen(), "the list, its first lesson highlighted")
    # On a loaded machine a key sent while the app still sets up its input can be lost: Enter again while the list
    # has started nothing. (Only then: a second Enter reaching the lesson would open its branch editor over it.)
    listing = next(p for p in psutil.process_iter(["cmdline"])
                   if "lessons" in (p.info["cmdline"] or []) and str(folder) in (p.info["cmdline"] or []))
    for _ in range(10):
        tmux("send-keys", "-t", "t", "Enter")
        try:
            until(lambda: bool(listing.children()), "the list to start the lesson", timeout=10)
            break
        except AssertionError:
            continue
    until(lambda: "01-greedy-vs-sampling.jsonl" in screen(), "the lesson", timeout=120)
    tmux("send-keys", "-t", "t", "q")
    until(lambda: "Lessons" in screen(), "the list again")
    tmux("send-keys", "-t", "t", "q")
    until(done.exists, "the command to end")
    assert done.read_text().strip() == "0"
