"""A saved or just-measured race on its own (``decode-tui race``, ``decode-tui replay RACE``): the race screen,
with no model. Closing the race quits."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.binding import Binding, BindingType
from textual.screen import Screen

from ..core.analysis.race import Lane
from .bindings import QUIT_TO_LIST, relabel
from .one_screen_app import OneScreenApp
from .screens.race import RaceScreen
from .settings import Settings


class RaceApp(OneScreenApp[int]):
    CSS_PATH = "app.tcss"  # the text pane's provenance colours
    TITLE = "decode-tui race"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "Quit", id="quit")]

    def __init__(self, settings: Settings, lanes: list[Lane], device: str, *, speed: float = 1.0,
                 theme: str | None = None, source: str | None = None, from_list: bool = False) -> None:
        """``from_list``: opened from the start screen, which q goes back to (its footer says so)."""
        super().__init__(theme)
        self.race = RaceScreen(settings, lanes, device, speed=speed, source=source)
        if from_list:
            relabel(self, "quit", QUIT_TO_LIST)

    def shown(self) -> Screen[None]:
        return self.race

    def ended(self, result: Any) -> None:
        self.exit(0)  # closing the race (q on its screen) is a normal end

    def cut_short(self, code: int) -> int:
        return code
