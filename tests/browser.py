"""Driving ``decode-tui serve``'s page in headless Chromium, for the browser tests, benchmarks/classroom.py and
docs/classroom_screenshot.py: where the browser is, how it is started, how a page's terminal is read, and a server
on a free port.

Chromium is Debian's package, driven by Playwright for Python: no browser is downloaded. It runs with its 3D APIs
off, so xterm.js draws with its DOM renderer and the screen's text is in the page's ``.xterm-rows`` (the WebGL and
canvas renderers keep it in pixels). This module imports Playwright only when a browser is started.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
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
SCRIPT = Path(sys.executable).with_name("decode-tui")


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def quiet_server(*args: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``decode-tui serve ARGS`` on a free port of 127.0.0.1, its output discarded: the process, and its page's
    address once it accepts connections."""
    port = free_port()
    process = subprocess.Popen([str(SCRIPT), "serve", "--port", str(port), *args],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"decode-tui serve did not start on port {port}") from None
                time.sleep(0.1)
        yield process, f"http://127.0.0.1:{port}/"
    finally:
        process.terminate()
        process.wait(60)
