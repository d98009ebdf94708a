"""The start screen on its own (``decode-tui lessons`` in a terminal, each tab of ``decode-tui serve``): it
returns the chosen entry's key, or None when the user leaves; the caller plays it (cli/teaching.py, cli/serve.py).
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType

from ..core.errors import EXIT_INTERRUPTED, EXIT_TERMINATED
from .catalog import Entry
from .screens.start import StartScreen
from .signals import on_sigterm
from .themes import initial_theme, load_all


class StartApp(App[str | None]):
    TITLE = "decode-tui"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "interrupt", "Quit (Ctrl-C)", show=False, priority=True, id="interrupt"),
    ]

    def __init__(self, offered: list[Entry], *, notice: str | None = None, where: str = "", live: bool = False,
                 theme: str | None = None) -> None:
        super().__init__()
        for spec in load_all().values():
            self.register_theme(spec.theme)
        self.theme = initial_theme(theme)
        self.start = StartScreen(offered, notice=notice, where=where, live=live)
        self.pump = None  # no decoder thread (cli/commands._run_app looks for one)
        self.error: str | None = None

    def on_mount(self) -> None:
        self._untrap = on_sigterm(self.terminated)
        self.push_screen(self.start, self.exit)

    def on_unmount(self) -> None:
        self._untrap()

    def action_interrupt(self) -> None:
        self.exit(None, return_code=EXIT_INTERRUPTED)

    def terminated(self) -> None:
        """SIGTERM: the same ending as Ctrl-C, with its own exit status."""
        self.exit(None, return_code=EXIT_TERMINATED)
