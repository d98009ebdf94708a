"""The header: what is running (model, device, dtype, mode), its live parameters and the prompt, on one line each."""

from __future__ import annotations

from rich.text import Text

from ...core.record.events import Started
from ..settings import Settings, params_line
from .live_panel import LivePanel


class RunHeader(LivePanel):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)
        self._shown = ""  # the plain text on screen: the header changes rarely, so most calls skip the repaint
        self._last: tuple[Settings, Started | None, str, str | None] | None = None

    def show(self, settings: Settings, started: Started | None, state: str, replaying: str | None = None) -> None:
        """``replaying``: the recording's name, when this is a replay (said first: nothing here is live)."""
        self._last = (settings, started, state, replaying)
        params = started.params if started is not None else {}
        device = params.get("device", settings.device)
        dtype = params.get("dtype", settings.dtype)
        # Before the run starts, "auto" means "not chosen yet": said as nothing rather than "auto auto".
        where = " ".join(part for part in (device, dtype) if part != "auto")
        line = self._first_line(settings.model, where, settings.mode.upper(), state, replaying)
        line.append("\n")
        line.append(f" {params_line(settings, params.get('seed'), self.size.width - 2 if self.size.width else None)}\n")
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

    def on_resize(self) -> None:
        """Fit the lines to the new width: what is cut depends on it."""
        if self._last is not None:
            self.show(*self._last)

    def _first_line(self, model: str, where: str, mode: str, state: str, replaying: str | None) -> Text:
        """What runs, on one line that never wraps: a wrapped one pushed the prompt out of the header's three
        lines. Where it is too wide, the separators narrow, then the recording's name and the model's (a long
        path) give way, keeping their ends, and then the app's name goes; the mode and the state never do."""
        room = self.size.width - 1  # 0 before the first layout: then nothing is cut
        layouts = ((" decode-tui ", "  ·  ", " REPLAY of ", 0), (" decode-tui ", " · ", " REPLAY of ", 12),
                   ("", " · ", " REPLAY ", 8))  # the app's own name is the least telling
        for label, sep, replay, least in layouts:
            name, shown = replaying, model
            fixed = len(label) + len(sep) // 2 + 3 * len(sep) + len(where + mode + state)
            if name is not None:
                fixed += len(replay) + 1
            if least and room > 0:  # the recording's name first, down to half the room where the model's is long
                avail = room - fixed
                name = None if name is None else cut_keeping_end(name, avail - min(len(model), avail // 2), least)
                shown = cut_keeping_end(model, avail - len(name or ""), least)
            if room <= 0 or fixed + len(shown) + len(name or "") <= room:
                break
        line = Text()
        line.append(label, style="bold reverse")
        if name is not None:
            line.append(f"{replay}{name} ", style="bold reverse")
        line.append(f"{sep[:len(sep) // 2]}{shown}{sep}" + (f"{where}{sep}" if where else ""))
        line.append(mode, style="bold")
        line.append(f"{sep}{state}")
        return line


def cut_keeping_end(name: str, room: int, least: int) -> str:
    """``name`` in ``room`` cells but never fewer than ``least``, its end kept (a file's name, a model's last
    folder), from the start of a word where it has words."""
    room = max(room, least)
    if len(name) <= room:
        return name
    kept = name[-(room - 1):]
    if " " in kept[:-1]:  # from a word's start: "…(04-speculative.jsonl)", not "…ding (04-speculative.jsonl)"
        kept = kept[kept.index(" ") + 1:]
    if kept.count(")") > kept.count("("):  # the cut took the opening bracket: "…what-if.jsonl", not "…jsonl)"
        kept = kept[: kept.rindex(")")] + kept[kept.rindex(")") + 1 :]
    return "…" + kept
