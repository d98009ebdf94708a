"""The header: what is running (model, device, dtype, mode) and its live parameters."""

from __future__ import annotations

from rich.text import Text

from ...core.events import Started
from ..settings import Settings, params_line
from .live_panel import LivePanel


class RunHeader(LivePanel):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)
        self._shown = ""  # the plain text on screen: the header changes rarely, so most calls skip the repaint

    def show(self, settings: Settings, started: Started | None, state: str) -> None:
        params = started.params if started is not None else {}
        device = params.get("device", settings.device)
        dtype = params.get("dtype", settings.dtype)
        line = Text()
        line.append(" decode-tui ", style="bold reverse")
        line.append(f"  {settings.model}  ·  {device} {dtype}  ·  ")
        line.append(settings.mode.upper(), style="bold")
        line.append(f"  ·  {state}\n")
        line.append(f" {params_line(settings)}")
        if line.plain != self._shown:  # the header changes rarely; skip the repaint otherwise
            self._shown = line.plain
            self.update(line)
