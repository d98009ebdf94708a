"""The race: decoding modes side by side on one prompt, each moving at the pace it had when it ran alone.

The modes were measured one at a time, warm (core/analysis/race.py): run together on
one device they would slow each other down and the race would show that, not
the modes. This screen replays the lanes from one start, a ~30 Hz timer
handing each lane the events whose recorded time has come, and says so. It
decodes nothing: a saved race plays anywhere (tui/race_app.py), and the main
app opens it on the lanes it has just measured (``R``).
"""

from __future__ import annotations

import time
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import ModalScreen
from textual.widgets import Footer

from ...core.analysis.race import BASELINE, Lane, speedup
from ..screenshots import save_svg
from ..settings import Settings
from ..widgets.live_panel import LivePanel
from ..widgets.race_lane import RaceLane
from ..widgets.run_header import cut_keeping_end

TICK_HZ = 30


class RaceScreen(ModalScreen[None]):
    """Modal, so the main app's keys (a mode change, a restart) cannot act on the run behind it."""

    CSS_PATH = "race.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "toggle_pause", "Pause/resume the race", id="race.pause"),
        Binding("r", "restart", "Start the race again", id="race.restart"),
        Binding("X", "save_svg", "Save the screen as an SVG (for a slide)", show=False, id="race.screenshot"),
        Binding("escape,q", "close", "Close the race", id="race.close"),
    ]

    def __init__(self, settings: Settings, lanes: list[Lane], device: str, *, speed: float = 1.0,
                 source: str | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.lanes = lanes
        self.device = device
        self.speed = speed  # 1: the measured pace; 0: everything at once
        self.source = source  # the saved race's name, when replaying one
        baseline = next(lane for lane in lanes if lane.name == BASELINE)
        self.speedups = [speedup(lane, baseline) for lane in lanes]
        self.clock = 0.0  # race seconds shown so far
        self.paused = False
        self.shots = 0
        self._next = [0] * len(lanes)  # each lane's next event
        self._last_tick: float | None = None

    def compose(self) -> ComposeResult:
        yield LivePanel(id="race-header")
        with Horizontal(id="lanes"):
            for i, lane in enumerate(self.lanes):
                yield RaceLane(lane.name, self.speedups[i], id=f"lane-{i}")
        yield Footer()

    def on_mount(self) -> None:
        # Each lane paints its own start when it mounts (RaceLane.on_mount): reaching into a lane from here
        # found its text pane gone once, when the app closed as the screen was still mounting.
        self._show_header()
        self.set_interval(1 / TICK_HZ, self.tick)

    def on_resize(self) -> None:
        self._show_header()  # what gives way depends on the width

    def _show_header(self) -> None:
        prompt = " ".join(self.settings.prompt.split())
        header = Text()
        header.append(" decode-tui race ", style="bold reverse")
        # One line (a wrapped one pushed the prompt out of the header): the lanes' titles name the modes, and a
        # long recording name gives way, keeping its end.
        where = f"  {self.settings.model} · {self.device}"
        if self.source:
            room = self.app.size.width - 1 - len(" decode-tui race ") - len(" REPLAY of  ") - len(where)
            header.append(f" REPLAY of {cut_keeping_end(self.source, room, 12)} ", style="bold reverse")
        header.append(f"{where}\n")
        runs = len(self.lanes[0].rates)
        ran = (f"{runs} times, alternated; each lane replays its median run" if runs > 1
               else "once; each lane replays it")
        how = f" Each mode ran alone on this device, warm, {ran} at the pace it had."
        if len(how) >= self.app.size.width:  # the short form, on one line too
            how = (f" Each mode ran alone, warm, {runs} times, alternated; median runs replayed." if runs > 1
                   else " Each mode ran alone, warm, once; replayed at the pace it had.")
        header.append(f"{how}\n", style="italic")
        header.append(" prompt: ", style="bold")
        # Cut to the line, with an ellipsis: the panel cut it at the edge with nothing to say it went on.
        width = max(20, self.app.size.width - len(" prompt: ") - 1)
        header.append(prompt if len(prompt) <= width else prompt[: width - 1] + "…")
        self.query_one("#race-header", LivePanel).update(header)

    def tick(self) -> None:
        """Move the race clock on and hand each lane the events whose time has come, one batch a lane."""
        now = time.monotonic()
        if self._last_tick is not None and not self.paused:
            self.clock += (now - self._last_tick) * self.speed if self.speed > 0 else float("inf")
        self._last_tick = now
        widgets = list(self.query(RaceLane))
        if len(widgets) != len(self.lanes):  # still mounting, or torn down as the app closes: the next tick hands over
            return
        for i, (lane, widget) in enumerate(zip(self.lanes, widgets, strict=True)):
            start = self._next[i]
            end = start
            while end < len(lane.events) and lane.events[end][0] <= self.clock:
                end += 1
            if end > start:
                self._next[i] = end
                widget.feed([event for _, event in lane.events[start:end]], min(self.clock, lane.events[end - 1][0]))

    @property
    def done(self) -> bool:
        return all(n == len(lane.events) for n, lane in zip(self._next, self.lanes, strict=True))

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused

    def action_restart(self) -> None:
        self.clock, self._next, self.paused = 0.0, [0] * len(self.lanes), False
        for lane in self.query(RaceLane):
            lane.reset()

    def action_save_svg(self) -> None:
        self.shots += 1
        save_svg(self.app, f"decode-tui-race-{self.shots}.svg",
                 lambda message, saved: self.notify(message, severity="information" if saved else "error"))

    def action_close(self) -> None:
        self.dismiss(None)
