"""The Textual app: a decoding run shown live, steered from the keyboard.

This first slice shows the streaming text, the sampling candidates of the
current step and a stats line, and supports pause/resume, single-step,
restart and quit. The decoder runs in one thread worker (:class:`EventPump`);
a ~30 Hz timer drains its queue and updates each widget once per batch.

The app takes any event source (a real :class:`~decode_tui.core.run.Run`, a
recorded trace, a deterministic fake in tests); it never decodes itself.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Footer, Header

from ..core.events import Finished, Started, TokenEmitted, TokenSampled
from .pump import EventPump, EventSource, Failed
from .widgets.candidates import CandidatesPanel
from .widgets.stats_bar import StatsBar
from .widgets.text_pane import TextPane

DRAIN_HZ = 30


class DecodeApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "decode-tui"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "toggle_pause", "Pause/resume", id="pause"),
        Binding("n", "step", "Step", id="step"),
        Binding("r", "restart", "Restart", id="restart"),
        Binding("q", "quit", "Quit", id="quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True, id="interrupt"),
    ]

    def __init__(self, source: EventSource, subtitle: str = "", start_paused: bool = False) -> None:
        super().__init__()
        self.source = source
        self.sub_title = subtitle
        self.start_paused = start_paused
        self.pump: EventPump | None = None
        self.error: str | None = None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal(id="body"):
            yield TextPane(id="text")
            yield CandidatesPanel(id="candidates")
        yield StatsBar(id="stats")
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(1 / DRAIN_HZ, self.drain)
        self.start_run()

    # -- the run
    def start_run(self) -> None:
        self.pump = EventPump(self.source)
        if self.start_paused:
            self.pump.pause()
        self.query_one(TextPane).reset()
        stats = self.query_one(StatsBar)
        stats.state, stats.tokens, stats.result = ("paused" if self.start_paused else "loading"), 0, None
        stats.refresh_stats()
        self.run_worker(self.pump.run, thread=True, exclusive=True, group="decoder", name="decoder")

    def drain(self) -> None:
        """Move everything the decoder produced since the last tick into the widgets, once per widget."""
        if self.pump is None:
            return
        batch = self.pump.drain()
        if not batch:
            return
        stats = self.query_one(StatsBar)
        pieces = [e for e in batch if isinstance(e, TokenEmitted)]
        self.query_one(TextPane).add(pieces)
        stats.tokens += len(pieces)
        sampled = [e for e in batch if isinstance(e, TokenSampled)]
        if sampled:
            self.query_one(CandidatesPanel).show(sampled[-1])
        for event in batch:
            if isinstance(event, Started):
                stats.state = "paused" if self.pump.paused else "running"
            elif isinstance(event, Finished):
                stats.state, stats.result = "finished", event
            elif isinstance(event, Failed):
                self.error = event.message
                stats.state = "error"
                self.notify(event.message, title="The run failed", severity="error", timeout=30)
        stats.refresh_stats()

    # -- actions
    def action_toggle_pause(self) -> None:
        if self.pump is None:
            return
        stats = self.query_one(StatsBar)
        if self.pump.paused:
            self.pump.resume()
            stats.state = "running"
        else:
            self.pump.pause()
            stats.state = "paused"
        stats.refresh_stats()

    def action_step(self) -> None:
        if self.pump is not None:
            self.pump.step()

    def action_restart(self) -> None:
        if self.pump is not None:
            self.pump.stop()
        self.start_run()

    async def action_quit(self) -> None:
        if self.pump is not None:
            self.pump.stop()
        self.exit(0)
