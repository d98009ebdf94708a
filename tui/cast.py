"""A run as an asciinema cast (format v2): its text streaming at the recorded pace, for a slide or a web page.

asciinema players replay a terminal's output stream; a cast file is a JSON
header line, then one ``[seconds, "o", text]`` line per write. Here each
write is one token's piece of text, coloured by where the token came from
(the draft's, a lookup copy, resampled, bonus) with plain ANSI colours, so
the cast shows what the app's text pane shows without the app. No library
writes casts from data (asciinema records a live terminal), hence by hand.
It knows events and the cast format; nothing about widgets.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core.events import Event, Finished, Started, TokenEmitted, TokenSource

# SGR colours by provenance: the app's meaning (see the help screen), in the 8 colours every player has.
COLOURS: dict[TokenSource, str] = {"target": "", "draft": "\x1b[32m", "lookup": "\x1b[36m",
                                   "resampled": "\x1b[33m", "bonus": "\x1b[35m"}
RESET = "\x1b[0m"


def _terminal(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\n", "\r\n")  # a terminal needs the carriage return


def cast_lines(trace: Sequence[tuple[float, Event]], width: int = 100, height: int = 30) -> list[str]:
    """The cast file's lines for a recorded or exported run (``(seconds, event)`` pairs, as a recording holds)."""
    started = next((e for _, e in trace if isinstance(e, Started)), None)
    title = f"decode-tui · {started.model} · {started.mode}" if started else "decode-tui"
    header: dict[str, Any] = {"version": 2, "width": width, "height": height, "title": title,
                              "env": {"TERM": "xterm-256color"}}
    lines = [json.dumps(header)]
    t0 = next((t for t, e in trace if isinstance(e, Started)), trace[0][0] if trace else 0.0)
    if started is not None:
        lines.append(json.dumps([0.0, "o", "\x1b[2m" + _terminal(title + "\n\n") + RESET]))
    last = 0.0
    for t, event in trace:
        at = max(last, round(t - t0, 4))  # never backwards: players expect times in order
        if isinstance(event, TokenEmitted) and event.text:
            colour = COLOURS.get(event.source, "")
            lines.append(json.dumps([at, "o", colour + _terminal(event.text) + (RESET if colour else "")],
                                    ensure_ascii=False))
            last = at
        elif isinstance(event, Finished):
            figures = (f"\n\n{event.new_tokens} tokens in {event.target_forwards} target forwards, "
                       f"{event.tokens_per_s:.1f} tok/s, {event.finish_reason}\n")
            lines.append(json.dumps([at, "o", "\x1b[2m" + _terminal(figures) + RESET]))
            last = at
    return lines


def write_cast(path: Path, trace: Sequence[tuple[float, Event]]) -> None:
    path.write_text("\n".join(cast_lines(trace)) + "\n", encoding="utf-8")
