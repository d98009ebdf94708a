"""A run or a race as an asciinema cast (format v2): text streaming at the recorded pace, for a slide or a web page.

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

from ..core.analysis.race import Lane
from ..core.record.events import Event, Finished, Started, TokenEmitted, TokenSource
from .numbers import count, decoded_tokens

# SGR colours by provenance: the app's meaning (see the help screen), in the 8 colours every player has.
COLOURS: dict[TokenSource, str] = {"target": "", "draft": "\x1b[32m", "lookup": "\x1b[36m",
                                   "resampled": "\x1b[33m", "bonus": "\x1b[35m",
                                   "forced": "\x1b[4m"}
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
            figures = (f"\n\n{decoded_tokens(*event.token_counts)} in "
                       f"{count(event.target_forwards, 'target forward')}, "
                       f"{event.tokens_per_s:.1f} tok/s, {event.finish_reason}\n")
            lines.append(json.dumps([at, "o", "\x1b[2m" + _terminal(figures) + RESET]))
            last = at
    return lines


def write_cast(path: Path, trace: Sequence[tuple[float, Event]]) -> None:
    path.write_text("\n".join(cast_lines(trace)) + "\n", encoding="utf-8")


# A race's cast: the lanes side by side, redrawn whole at most FRAME_HZ times a second (a terminal has no columns
# to append to), each frame rendered by Rich in the 8 standard colours.
FRAME_HZ = 10
RICH_COLOURS: dict[TokenSource, str] = {"target": "", "draft": "green", "lookup": "cyan", "resampled": "yellow",
                                        "bonus": "magenta", "forced": "underline"}


def race_cast_lines(lanes: Sequence[Lane], title: str, width: int = 120, height: int = 30) -> list[str]:
    """The cast file's lines for a race: every lane's text growing at its measured pace, side by side, and each
    lane's figures and speed-up over greedy once it has finished."""
    header: dict[str, Any] = {"version": 2, "width": width, "height": height, "title": title,
                              "env": {"TERM": "xterm-256color"}}
    lines = [json.dumps(header)]
    times = sorted({round(t, 4) for lane in lanes for t, e in lane.events if isinstance(e, TokenEmitted | Finished)})
    last_frame = -1.0
    for i, t in enumerate(times):
        if t - last_frame < 1 / FRAME_HZ and i < len(times) - 1:
            continue  # the next frame shows this one's tokens too
        last_frame = t
        lines.append(json.dumps([t, "o", _race_frame(lanes, t, title, width, height)], ensure_ascii=False))
    return lines


def _race_frame(lanes: Sequence[Lane], clock: float, title: str, width: int, height: int) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from ..core.analysis.race import BASELINE, speedup
    from .widgets.race_lane import speedup_text

    baseline = next(lane for lane in lanes if lane.name == BASELINE)
    column = max(10, width // len(lanes) - 3)
    console = Console(file=StringIO(), width=width, force_terminal=True, color_system="standard", highlight=False)
    grid = Table.grid(padding=(0, 2))
    cells = []
    for lane in lanes:
        text = Text()
        done: Finished | None = None
        for t, event in lane.events:
            if t > clock:
                break
            if isinstance(event, TokenEmitted):
                text.append(event.text, style=RICH_COLOURS.get(event.source, ""))
            elif isinstance(event, Finished):
                done = event
        wrapped = text.wrap(console, column)[-(height - 7):]  # the newest lines, as the app's pane shows them
        cell = Text()
        cell.append(f" {lane.name} ", style="bold reverse")  # the title alone: a Text's own style would cover it all
        cell.append("\n")
        cell.append_text(Text("\n").join(wrapped))
        if done is not None:
            gain = speedup(lane, baseline)
            cell.append(f"\n\n{decoded_tokens(*done.token_counts)}, "
                        f"{count(done.target_forwards, 'forward')}, "
                        f"{done.tokens_per_s:.1f} tok/s"
                        + (f", {speedup_text(gain)}" if gain is not None and lane.name != BASELINE else ""),
                        style="dim")
        grid.add_column(width=column)
        cells.append(cell)
    grid.add_row(*cells)
    console.print(Text(title, style="dim"))
    console.print(grid)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return "\x1b[H\x1b[2J" + _terminal(out)


def write_race_cast(path: Path, lanes: Sequence[Lane], title: str) -> None:
    path.write_text("\n".join(race_cast_lines(lanes, title)) + "\n", encoding="utf-8")
