"""``decode-tui serve`` in a real browser: headless Chromium (Debian's ``chromium`` package) driven by Playwright.

The page's terminal is read from xterm.js's DOM rows (tests/browser.py), and keys go to xterm's own input element,
as a student's typing does. No browser is downloaded: where /usr/bin/chromium is missing these tests skip, saying
so; CI installs it (``.ci/run``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from decode_tui.lessons import shipped

from .browser import CHROMIUM, chromium, next_moment, screen, shows
from .serving import Served, all_end, serving

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

VIEWPORT = {"width": 1500, "height": 1000}  # a terminal of about 180x50: every lesson's row in view

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(),
                                 reason=f"no Chromium at {CHROMIUM}: install Debian's chromium package "
                                        "(apt-get install chromium); .ci/run does")]


def press(page: Page, *keys: str) -> None:
    """Keys as a student types them, into the terminal's input (a click on the terminal would pick a row)."""
    page.focus(".xterm-helper-textarea")
    for key in keys:
        page.keyboard.press(key)


def open_page(browser: Browser, served: Served) -> Page:
    page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
    response = page.goto(served.url)
    assert response is not None and response.status == 200
    return page


def test_the_page_lists_every_lesson_and_keys_play_one_to_its_end(isolated_env: dict[str, str]) -> None:
    lesson = shipped()[0]
    with serving(env=isolated_env) as served, chromium() as browser:
        page = open_page(browser, served)
        shows(page, "Lessons", "The race", *(entry.title[:40] for entry in shipped()))
        press(page, "Enter")
        shows(page, "REPLAY of the lesson's recording", lesson.intro.split()[0])
        # n goes on to the next moment; after the last, the narration panel shows the run's figures and summary.
        openings = [" ".join(pause.text.split()[:3]) for pause in lesson.pauses]
        first_pause, left = openings[0], set(openings)
        for _ in range(len(openings) + 1):
            reached = next_moment(page, left)
            left -= reached
            if not reached:  # the end
                break
        assert not left, f"the lesson ended before its moments {left}"
        shows(page, "This run:", " ".join(lesson.summary.split()[:2]))
        assert served.lines and not any("Traceback" in line for line in served.lines)
        press(page, "q")  # back to the list, and the same again
        shows(page, "Lessons", "The race")
        press(page, "Enter")
        shows(page, "REPLAY of the lesson's recording")
        press(page, "n")
        shows(page, first_pause)


@pytest.mark.parametrize("name", ["recycling", "fixed-point"])
def test_the_guessing_modes_lessons_play_to_their_end_in_the_page(isolated_env: dict[str, str], name: str) -> None:
    """Token recycling's and lookahead's lessons, picked from the list with the arrow keys, reach every moment and
    their summary in the browser."""
    lessons = shipped()
    at = next(i for i, entry in enumerate(lessons) if entry.name == name)
    lesson = lessons[at]
    with serving(env=isolated_env) as served, chromium() as browser:
        page = open_page(browser, served)
        shows(page, "Lessons", lesson.title[:40])
        press(page, *["ArrowDown"] * at, "Enter")
        shows(page, "REPLAY of the lesson's recording", lesson.intro.split()[0])
        left = {" ".join(pause.text.split()[:3]) for pause in lesson.pauses}
        for _ in range(len(left) + 1):
            reached = next_moment(page, left)
            left -= reached
            if not reached:
                break
        assert not left, f"the lesson ended before its moments {left}"
        shows(page, "This run:", " ".join(lesson.summary.split()[:2]))
        assert not any("Traceback" in line for line in served.lines)


def test_two_tabs_play_independently_the_next_gets_the_full_page_and_a_closed_one_ends(
        isolated_env: dict[str, str]) -> None:
    with serving("--max-sessions", "2", env=isolated_env) as served, chromium() as browser:
        first = open_page(browser, served)
        shows(first, "Lessons")
        press(first, "Enter")  # the first lesson
        shows(first, "01-greedy-vs-sampling.jsonl")
        first_pids = [p.pid for p in served.sessions()]
        second = open_page(browser, served)
        shows(second, "Lessons")
        press(second, "ArrowDown", "ArrowDown", "Enter")  # the third: beam search
        shows(second, "03-beam-search.jsonl")
        assert "03-beam-search" not in screen(first) and "01-greedy" not in screen(second)

        third = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
        response = third.goto(served.url)
        assert response is not None and response.status == 503
        assert "The class is full" in third.content()
        third.close()

        first.close()  # mid-lesson: its process ends, the other tab plays on
        all_end(first_pids, timeout=10)
        served.said("session 1: closed")
        press(second, "n")
        shows(second, " ".join(shipped()[2].pauses[0].text.split()[:3]))
        assert served.process.poll() is None


def test_beyond_localhost_the_page_needs_the_token(isolated_env: dict[str, str]) -> None:
    with serving(env=isolated_env, host="0.0.0.0") as served, chromium() as browser:
        page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
        refused = page.goto(served.url.split("?")[0])
        assert refused is not None and refused.status == 403 and "token" in page.content()
        assert served.sessions() == []
        page.goto(served.url)
        shows(page, "Lessons")
        assert len(served.sessions()) == 1


def test_a_recordings_name_with_escapes_is_shown_escaped_in_the_page_and_on_the_console(
        tmp_path: Path, isolated_env: dict[str, str]) -> None:
    """A teacher's recording whose file name holds an escape sequence and a line break: the list, the replay's
    header and the console show them as escapes (``\\x1b``, ``\\n``), never as what they would do."""
    folder = tmp_path / "recordings"
    folder.mkdir()
    lesson = shipped()[0]
    assert lesson.recording_path is not None
    name = "evil\x1b[2J\x1b[31mred\nline.jsonl"
    shutil.copy(lesson.recording_path, folder / name)
    shown = "evil\\x1b[2J\\x1b[31mred\\nline.jsonl"
    with serving("--recordings", str(folder), env=isolated_env) as served, chromium() as browser:
        page = open_page(browser, served)
        shows(page, "Recordings", shown)
        press(page, "End", "Enter")
        shows(page, "REPLAY", shown[:20])
        served.said(f"played replay {shown}")
        assert not any("\x1b" in line for line in served.lines)


def test_the_page_focuses_the_terminal_and_the_theme_reaches_the_lesson(isolated_env: dict[str, str]) -> None:
    """Keys typed as soon as the page has loaded go to the terminal (no click first), and ``--theme presenter``
    (black on white) colours the start list and the lesson played from it."""
    with serving("--theme", "presenter", env=isolated_env) as served, chromium() as browser:
        page = open_page(browser, served)
        shows(page, "Lessons")
        assert light(page)
        page.keyboard.press("Enter")  # no focus() first
        shows(page, "REPLAY of the lesson's recording")
        page.wait_for_timeout(500)
        assert light(page)
    with serving(env=isolated_env) as served, chromium() as browser:  # the control: the default theme is dark
        page = open_page(browser, served)
        shows(page, "Lessons")
        assert not light(page)


def light(page: Page) -> bool:
    """Whether most of the terminal's coloured cells have a light background (the presenter theme's greys)."""
    found: list[str] = page.evaluate(
        "Array.from(document.querySelectorAll('.xterm-rows span')).map(s => getComputedStyle(s).backgroundColor)")
    channels = [[int(c) for c in colour[colour.index("(") + 1 : -1].split(",")[:3]] for colour in found
                if colour.startswith("rgb(")]
    return sum(min(rgb) >= 200 for rgb in channels) > len(channels) / 2
