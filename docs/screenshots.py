"""Make the README's teaching screenshots from shipped recordings (no model): `python docs/screenshots.py`.

The lesson is played at its recorded pace to its third pause; the race (lessons/race-code-edit.jsonl, made with
`decode-tui race --record` on the embedded model) is shown 2.5 s in, while the lanes are still apart.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from decode_tui.cli.teaching import playback
from decode_tui.lessons import load
from decode_tui.tui.race_app import RaceApp
from decode_tui.tui.recording import read_race
from decode_tui.tui.widgets.narration import Narration

HERE = Path(__file__).resolve().parent
SIZE = (132, 40)


async def lesson() -> None:
    app = playback(load("speculative"))
    async with app.run_test(size=SIZE) as pilot:
        narration = app.query_one(Narration)
        texts = [pause.text for pause in load("speculative").pauses]
        shown: set[str] = set()
        for _ in range(3):  # the next pause the run reaches, whichever it is
            await pilot.press("n")
            while not (now := {t for t in texts if t in narration.text} - shown):
                await pilot.pause(0.05)
            shown |= now
        await pilot.pause(0.3)
        app.save_screenshot(filename=str(HERE / "teaching-lesson.svg"))


async def race() -> None:
    settings, device, lanes = read_race(HERE.parent / "lessons" / "race-code-edit.jsonl")
    app = RaceApp(settings, lanes, device, source="race-code-edit.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(2.5)
        app.save_screenshot(filename=str(HERE / "teaching-race.svg"))


if __name__ == "__main__":
    asyncio.run(lesson())
    asyncio.run(race())
