"""Driving ``decode-tui serve``'s page in headless Chromium, for the browser tests, benchmarks/classroom.py and
docs/classroom_screenshot.py: where the browser is, how it is started, how a page's terminal is read and how a
lesson in it goes on to its next moment. (The server itself is tests/serving.py's.)

Chromium is Debian's package, driven by Playwright for Python: no browser is downloaded. It runs with its 3D APIs
off, so xterm.js draws with its DOM renderer and the screen's text is in the page's ``.xterm-rows`` (the WebGL and
canvas renderers keep it in pixels). This module imports Playwright only when a browser is started.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = Path("/usr/bin/chromium")
# --disable-3d-apis: the DOM renderer, as above. The rest keep a headless Chromium from reaching out to the network
# or doing work a page here does not need.
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-3d-apis", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@contextmanager
def chromium() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def screen(page: Page) -> str:
    """The page's terminal as text, a line a row."""
    text: str = page.evaluate(
        "Array.from(document.querySelectorAll('.xterm-rows > div')).map(row => row.textContent).join('\\n')")
    return text.replace("\xa0", " ")


def shows(page: Page, *texts: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not all(text in screen(page) for text in texts):
        if time.monotonic() > deadline:
            raise AssertionError(f"the page never showed {texts!r}; it shows:\n{screen(page)}")
        page.wait_for_timeout(50)


def next_moment(page: Page, openings: Iterable[str], timeout: float = 60) -> set[str]:
    """Press ``n`` in a lesson and wait for where it leads: one of ``openings`` (a few first words of each of the
    lesson's pauses: the narration panel wraps the rest) that was not shown before, or the lesson's end. A key
    pressed while the run still moves to a moment is not a step to the next one, so each n waits for its own.
    Returns the openings newly shown (none at the end)."""
    openings = set(openings)
    before = {o for o in openings if o in screen(page)}
    page.focus(".xterm-helper-textarea")
    page.keyboard.press("n")
    deadline = time.monotonic() + timeout
    while True:
        text = screen(page)
        new = {o for o in openings if o in text} - before
        if new or "This run:" in text:
            return new
        if time.monotonic() > deadline:
            raise AssertionError(f"n led nowhere; the page shows:\n{text}")
        page.wait_for_timeout(50)
