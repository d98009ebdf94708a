"""A saved or just-measured race on its own (``decode-tui race``, ``decode-tui replay RACE``): the race screen,
with no model. Closing the race quits."""

from __future__ import annotations

from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType

from ..core.analysis.race import Lane
from ..core.errors import EXIT_INTERRUPTED, EXIT_TERMINATED
from .screens.race import RaceScreen
from .settings import Settings
from .signals import on_sigterm
from .themes import initial_theme, load_all


class RaceApp(App[int]):
    CSS_PATH = "app.tcss"  # the text pane's provenance colours
    TITLE = "decode-tui race"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("ctrl+c", "interrupt", "Quit (Ctrl-C)", show=False, priority=True, id="interrupt"),
    ]

    def __init__(self, settings: Settings, lanes: list[Lane], device: str, *, speed: float = 1.0,
                 theme: str | None = None, source: str | None = None) -> None:
        super().__init__()
        for spec in load_all().values():
            self.register_theme(spec.theme)
        self.theme = initial_theme(theme)
        self.race = RaceScreen(settings, lanes, device, speed=speed, source=source)
        self.pump = None  # no decoder thread (cli/commands._run_app looks for one)
        self.error: str | None = None

    def on_mount(self) -> None:
        self._untrap = on_sigterm(self.terminated)
        self.push_screen(self.race, lambda _: self.exit(0))

    def on_unmount(self) -> None:
        self._untrap()

    def action_interrupt(self) -> None:
        self.exit(EXIT_INTERRUPTED, return_code=EXIT_INTERRUPTED)

    def terminated(self) -> None:
        """SIGTERM: the same ending as Ctrl-C, with its own exit status."""
        self.exit(EXIT_TERMINATED, return_code=EXIT_TERMINATED)
