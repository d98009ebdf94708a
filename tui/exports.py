"""What the app saves for the user: the run's trace (``e``) and an SVG of the screen (``X``).

Each has its own count, so the first file of each kind is number 1; a failure to write is a message, never an
exception. It knows the settings and the trace, not the app.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual.app import App

from ..core.record.events import Event
from .recording import write_trace
from .run_view import Severity
from .screenshots import save_svg
from .settings import Settings

Say = Callable[[str, Severity], None]


class Exports:
    def __init__(self) -> None:
        self.traces = 0
        self.shots = 0

    def trace(self, settings: Settings, trace: list[tuple[float, Event]], say: Say) -> None:
        self.traces += 1
        path = Path.cwd() / f"decode-tui-trace-{settings.mode}-{self.traces}.jsonl"
        try:
            write_trace(path, settings, trace)
        except OSError as exc:
            say(f"Could not write {path}: {exc.strerror}", "error")
            return
        say(f"trace of {len(trace)} events saved to {path.name}; play it with `decode-tui replay {path.name}`",
            "information")

    def svg(self, app: App[int], settings: Settings, say: Say) -> None:
        self.shots += 1
        save_svg(app, f"decode-tui-{settings.mode}-{self.shots}.svg",
                 lambda message, saved: say(message, "information" if saved else "error"))
