"""The header: what is running (model, device, dtype, mode) and its live parameters."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ...core.events import Started
from ..settings import Settings, params_line


class RunHeader(Static):
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
        self.update(line)
