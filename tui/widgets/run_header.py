"""The header: what is running (model, device, dtype, mode), its live parameters and the prompt, on one line each."""

from __future__ import annotations

from rich.text import Text

from ...core.events import Started
from ..settings import Settings, params_line
from .live_panel import LivePanel


class RunHeader(LivePanel):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)
        self._shown = ""  # the plain text on screen: the header changes rarely, so most calls skip the repaint

    def show(self, settings: Settings, started: Started | None, state: str, replaying: str | None = None) -> None:
        """``replaying``: the recording's name, when this is a replay (said first: nothing here is live)."""
        params = started.params if started is not None else {}
        device = params.get("device", settings.device)
        dtype = params.get("dtype", settings.dtype)
        line = Text()
        line.append(" decode-tui ", style="bold reverse")
        if replaying is not None:
            line.append(f" REPLAY of {replaying} ", style="bold reverse")
        line.append(f"  {settings.model}  ·  {device} {dtype}  ·  ")
        line.append(settings.mode.upper(), style="bold")
        line.append(f"  ·  {state}\n")
        line.append(f" {params_line(settings)}\n")
        # The prompt in every mode (PLD also shows it, token by token, around each match): one line, cut to fit.
        prompt = " ".join(settings.prompt.split())
        tokens = f" ({len(started.prompt_token_ids)} tokens)" if started is not None else ""
        width = max(20, self.size.width - len(tokens) - 12)
        shown = prompt if len(prompt) <= width else prompt[: width - 1] + "…"
        line.append(" prompt: ", style="bold")
        line.append(f"{shown}{tokens}")
        if line.plain != self._shown:  # the header changes rarely; skip the repaint otherwise
            self._shown = line.plain
            self.update(line)
