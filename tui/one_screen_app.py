"""An app that shows one screen and ends with it: the race on its own (race_app.py) and the start screen
(start_app.py). It registers the themes, makes Ctrl-C end it with exit status 130 and SIGTERM with 143, and has no
decoder thread; what the screen is and what it returns are the subclass's."""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from ..core.errors import EXIT_INTERRUPTED, EXIT_TERMINATED
from .signals import on_sigterm
from .themes import initial_theme, load_all

ReturnT = TypeVar("ReturnT")


class OneScreenApp(App[ReturnT], Generic[ReturnT]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "interrupt", "Quit (Ctrl-C)", show=False, priority=True, id="interrupt"),
    ]

    def __init__(self, theme: str | None) -> None:
        super().__init__()
        for spec in load_all().values():
            self.register_theme(spec.theme)
        self.theme = initial_theme(theme)
        self.pump = None  # no decoder thread (cli/commands._run_app looks for one)
        self.error: str | None = None

    def shown(self) -> Screen[Any]:
        """The one screen."""
        raise NotImplementedError

    def ended(self, result: Any) -> None:
        """The screen was dismissed with ``result``: the app ends with it."""
        self.exit(result)

    def cut_short(self, code: int) -> ReturnT:
        """What the app returns when Ctrl-C (``code`` 130) or SIGTERM (143) ends it."""
        raise NotImplementedError

    def on_mount(self) -> None:
        self._untrap = on_sigterm(self.terminated)
        self.push_screen(self.shown(), self.ended)

    def on_unmount(self) -> None:
        self._untrap()

    def action_interrupt(self) -> None:
        self.exit(self.cut_short(EXIT_INTERRUPTED), return_code=EXIT_INTERRUPTED)

    def terminated(self) -> None:
        """SIGTERM: the same ending as Ctrl-C, with its own exit status."""
        self.exit(self.cut_short(EXIT_TERMINATED), return_code=EXIT_TERMINATED)
