"""Make the README's classroom screenshot from a real page: `python docs/classroom_screenshot.py`.

It starts `decode-tui serve` on a free port, opens the page in headless Chromium (Debian's package, driven by
Playwright: no browser is downloaded), chooses the speculative-decoding lesson from the start screen as a student
would, plays it to its second pause and saves the page as docs/classroom-lesson.png.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from decode_tui.lessons import load, shipped

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.browser import CHROMIUM, chromium, next_moment, shows
from tests.serving import serving

HERE = Path(__file__).resolve().parent

LESSON = "speculative"


def main() -> None:
    if not CHROMIUM.exists():
        raise SystemExit(f"no Chromium at {CHROMIUM}: install Debian's chromium package (apt-get install chromium)")
    with serving(env=dict(os.environ)) as served, chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 860})
        page.goto(served.url)
        shows(page, "Lessons")
        page.focus(".xterm-helper-textarea")
        for _ in range([lesson.name for lesson in shipped()].index(LESSON)):  # down the list to it
            page.keyboard.press("ArrowDown")
        page.keyboard.press("Enter")
        shows(page, "REPLAY of the lesson's recording")
        # The pauses come in the order the run reaches them: two of them, whichever they are.
        openings = {" ".join(pause.text.split()[:3]) for pause in load(LESSON).pauses}
        for _ in range(2):
            openings -= next_moment(page, openings)
        page.wait_for_timeout(500)
        page.screenshot(path=str(HERE / "classroom-lesson.png"))


if __name__ == "__main__":
    main()
