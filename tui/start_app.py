"""The start screen on its own (``decode-tui lessons`` in a terminal, each tab of ``decode-tui serve``): it
returns the chosen entry's key, or None when the user leaves; the caller plays it (cli/teaching.py, cli/serve.py).
"""

from __future__ import annotations

from textual.screen import Screen

from .catalog import Entry
from .one_screen_app import OneScreenApp
from .screens.start import StartScreen


class StartApp(OneScreenApp[str | None]):
    TITLE = "decode-tui"

    def __init__(self, offered: list[Entry], *, notice: str | None = None, where: str = "", live: bool = False,
                 theme: str | None = None, highlight: str | None = None) -> None:
        super().__init__(theme)
        self.start = StartScreen(offered, notice=notice, where=where, live=live, highlight=highlight)

    def shown(self) -> Screen[str | None]:
        return self.start

    def cut_short(self, code: int) -> str | None:
        return None
