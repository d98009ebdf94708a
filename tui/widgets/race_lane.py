"""One mode's lane in a race: its name, its text streaming in provenance colours, and its figures.

A lane is fed its recorded events as the race clock passes their times (the
race app does that); it keeps a :class:`~decode_tui.tui.run_view.RunView` of
them, as the main screen does of a run, so the counts are the same ones. Once
the lane's run has finished it shows its speed-up over greedy, measured when
each mode ran alone: the median of the rounds' ratios, with their range.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical

from ...core.analysis.race import Spread
from ...core.record.events import Event
from ..run_view import RunView
from .live_panel import LivePanel
from .stats_bar import StatsBar
from .text_pane import TextPane


def speedup_text(spread: Spread, short: bool = False) -> str:
    """"2.31x greedy's speed (2.10-2.52, 3 runs)": the median of the rounds' ratios and their range;
    ``short``, for a narrow lane, "2.31x (2.10-2.52, 3 runs)": the range is kept, the words go."""
    of = "" if short else " greedy's speed"
    if spread.runs == 1:
        return f"{spread.median:.2f}x{of} (one run)"
    return f"{spread.median:.2f}x{of} ({spread.low:.2f}-{spread.high:.2f}, {spread.runs} runs)"


class RaceLane(Vertical):
    def __init__(self, name: str, speedup: Spread | None, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.mode = name
        self.speedup = speedup  # over greedy, shown once the lane has finished
        self.view = RunView(paused=False, now=0.0)

    def compose(self) -> ComposeResult:
        yield LivePanel(self.mode, classes="lane-title")
        yield TextPane()
        yield StatsBar(short=True, classes="lane-stats")

    def on_mount(self) -> None:
        self._show()  # its children are mounted by now: Textual composes a widget before its Mount event

    def reset(self) -> None:
        self.view = RunView(paused=False, now=0.0)
        self.query_one(TextPane).reset()
        self._show()

    def feed(self, events: list[Event], clock: float) -> None:
        """Take the events whose time has come (``clock``: seconds since the race began) and paint once."""
        self.view.apply(events, clock, paused=False)
        self.query_one(TextPane).add(self.view.take().pieces)
        self._show()

    def on_resize(self) -> None:
        self._show()  # the title's long or short form depends on the lane's width

    def _show(self) -> None:
        title = Text(f" {self.mode} ", style="bold reverse")
        result = self.view.finished
        if result is not None and self.speedup is not None:
            said = (f"  finished · {speedup_text(self.speedup)}" if self.mode != "greedy" else
                    "  finished · the baseline")
            if len(title.plain + said) > 2 * max(1, self.size.width):  # the title's two lines (80 columns)
                said = f"  {speedup_text(self.speedup, short=True)}" if self.mode != "greedy" else "  the baseline"
            title.append(said, style="bold")
        self.query_one(".lane-title", LivePanel).update(title)
        self.query_one(StatsBar).show(self.view.counters)

    @property
    def text(self) -> str:
        return self.query_one(TextPane).plain
