"""The Textual app: a decoding run shown live, steered from the keyboard.

Layout: a header (model, device, dtype, mode, live parameters), the streaming
text with a token inspector, the panel for the current mode (candidates per
sampling stage; beams; draft rounds; prompt lookup), a caption saying what the
last step did, a stats bar and the key hints.

The decoder runs in one thread worker (:class:`~decode_tui.tui.pump.EventPump`);
a ~30 Hz timer drains its queue into a :class:`~decode_tui.tui.run_view.RunView`
(the run's state, with no Textual in it) and paints what it collected, each
widget once per paint, so a fast decoder never floods the UI. Parameter keys change
:class:`~decode_tui.tui.settings.Settings`; what can apply mid-run goes to the
running strategy through :class:`~decode_tui.core.live.LiveParams`, what cannot
restarts the run, and the app says which.

The app takes a ``make_source`` (a live model run, a recording, a deterministic
fake in tests); it never decodes itself.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer

from ..core.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_TERMINATED
from ..core.live import LiveParams
from ..core.record.events import Event, Mode, TokenEmitted
from ..lessons import Lesson
from .bindings import APP_BINDINGS, QUIT_TO_LIST, keys_after, relabel, relabelled, unshown
from .branch_control import BranchControl
from .commands import DecodeCommands
from .crash import one_line, write_report
from .decoder_thread import DecoderThread
from .exports import Exports
from .lesson_control import LessonControl
from .pacing import PaintPacer
from .painter import Painter
from .pump import EventPump
from .race_control import start_race
from .recording import recorded
from .run_view import RunView, Severity, toast_seconds
from .screens.help import HelpScreen
from .settings import Settings
from .settings_control import SettingsControl
from .signals import on_sigterm
from .sources import SourceFactory
from .teaching import AutoPause
from .themes import ThemeSpec, initial_theme, load_all, next_theme
from .widgets.beam_panel import BeamPanel
from .widgets.caption import Caption
from .widgets.mode_panels import ModePanels
from .widgets.narration import Narration
from .widgets.run_header import RunHeader
from .widgets.stats_bar import StatsBar
from .widgets.text_pane import TextPane
from .widgets.token_inspector import TokenInspector
from .widgets.too_small import TooSmall

DRAIN_HZ = 30
PAINT_HZ = 8  # at most; the pacer slows painting where paints are dear (tui/pacing.py)
# How long a thread may hold the interpreter lock while another waits for it (Python's default is 5 ms). The
# decoder thread lets go of the lock while it waits for the GPU, once a step; when it wakes, it must wait for
# the UI thread to let go in turn, up to a whole interval, which on a GPU can cost more than a step (the "convoy
# effect"), so the app shortens it while it runs (BENCHMARKS.md, "The app against headless").
SWITCH_INTERVAL_S = 0.0005


class DecodeApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "decode-tui"
    COMMANDS = App.COMMANDS | {DecodeCommands}
    ENABLE_COMMAND_PALETTE = True
    switch_interval_s: float = SWITCH_INTERVAL_S  # see SWITCH_INTERVAL_S; benchmarks set it to compare
    show_start_first: bool = True  # a run decodes once its start is drawn (EventPump.shown); benchmarks compare

    BINDINGS: ClassVar[list[BindingType]] = list(APP_BINDINGS)

    def __init__(self, settings: Settings, make_source: SourceFactory, *, start_paused: bool = False,
                 auto_pause: bool = False, record: Path | None = None, theme: str | None = None,
                 replaying: str | None = None, keymap: Mapping[str, str] | None = None,
                 lesson: Lesson | None = None, branches: dict[int, list[tuple[float, Event]]] | None = None,
                 from_list: bool = False) -> None:
        """``branches``: a recording's branches (its header's), shown with B in a replay. ``from_list``: opened
        from the start screen, which q goes back to (its footer says so)."""
        super().__init__()
        self.from_list = from_list
        self.quit_says = QUIT_TO_LIST if from_list else "Quit"
        if from_list:
            relabel(self, "quit", QUIT_TO_LIST)
        if replaying is not None:  # what a replay cannot change is not offered; its keys say why (check_action)
            unshown(self, ("mode", "prompt"))
        self.keymap = dict(keymap or {})  # binding id -> key(s), from the user's config file (cli/config.py)
        self.set_keymap(self.keymap)
        self.settings = settings
        self.make_source = make_source
        self.start_paused = start_paused
        self.auto_pause = auto_pause
        self.record = record
        self.replaying = replaying  # the recording's name when replaying: its settings cannot change
        self.theme_specs: dict[str, ThemeSpec] = load_all()
        for spec in self.theme_specs.values():
            self.register_theme(spec.theme)
        self.theme = initial_theme(theme) if initial_theme(theme) in self.theme_specs else "decode-dark"
        self.pump: EventPump | None = None
        self.pacer = PaintPacer(max_hz=PAINT_HZ)
        self.stats_bar: StatsBar | None = None  # set on mount
        self.live = LiveParams(settings.config.sampling, settings.config.draft)
        self.messages: list[str] = []  # everything the app told the user, newest last (tests read it)
        self.view = RunView(paused=start_paused, now=time.monotonic())
        self.exports = Exports()
        self.race_stop = threading.Event()  # set when a race being measured must stop (quit, a new run)
        self.paint_at_once = True  # a new run's first events are shown as soon as they come
        self.lesson = lesson  # a lesson's narration and pauses (decode_tui.lessons); it starts paused on its intro
        self.control = SettingsControl(self)
        self.branching = BranchControl(self)
        self._branched_text: tuple[str, str] | None = None  # the prompt and model the branches are of
        if branches:
            self._branched_text = (settings.prompt, settings.model)
            self.branching.tree.load(branches)
        self.retired: EventPump | None = None  # the last run's pump, stopped to show a stored branch
        self.lessons = LessonControl(lesson, replaying is None, lambda: self.query_one(Narration))
        self.crashed: str | None = None  # an unexpected exception's one line, said once the terminal is restored
        self.run_bug: str | None = None  # the first unexpected exception of a run in the decoder thread, in one line

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield TooSmall(id="too-small")
        with Vertical(id="main"):
            yield RunHeader(id="header")
            with Horizontal(id="body"):
                with Vertical(id="left"):
                    yield TextPane(id="text")
                    yield TokenInspector(id="inspector")
                yield ModePanels(self.settings.mode, id="panels")
            if self.lesson is not None:
                yield Narration(self.lesson, live=self.replaying is None, quits=self.quit_says, id="narration")
            yield Caption(id="caption")
            yield StatsBar(id="stats")
            yield Footer()

    def on_mount(self) -> None:
        # Every run's worker goes to the same single thread, which a quit never waits for (tui/decoder_thread.py).
        asyncio.get_running_loop().set_default_executor(DecoderThread())
        self._switch_interval = sys.getswitchinterval()  # put back on unmount: tests run many apps in one process
        sys.setswitchinterval(self.switch_interval_s)
        self.query_one(ModePanels).set_glyphs(self.glyphs)
        self.stats_bar = self.query_one(StatsBar)
        self.panels = self.query_one(ModePanels)
        self.painter = Painter(self)
        self.set_interval(1 / DRAIN_HZ, self.drain)
        self.query_one(TooSmall).check(self.size.width, self.size.height)
        self._untrap = on_sigterm(self.terminated)
        self.start_run()

    def on_resize(self, event: events.Resize) -> None:
        self.query_one(TooSmall).check(event.size.width, event.size.height)

    @property
    def glyphs(self) -> dict[str, str]:
        spec = self.theme_specs.get(self.theme)
        return spec.glyphs if spec else {}

    # ------------------------------------------------------------------ the run
    def start_run(self) -> None:
        self.race_stop.set()  # a race being measured gives way to the new run
        self.retired = self.branching.unpark() or self.retired  # one decoder at a time: a parked run gives way
        previous = self.pump or self.retired
        if previous is not None:
            previous.stop()
        if (self.settings.prompt, self.settings.model) != self._branched_text:  # branches belong to one text
            self._branched_text = (self.settings.prompt, self.settings.model)
            self.branching.new_tree()
        self.view = RunView(paused=self.start_paused, now=time.monotonic())
        self.branching.run_started()
        self.paint_at_once = True
        self.live = LiveParams(self.settings.config.sampling, self.settings.config.draft)
        source = self.make_source(self.settings, self.live)
        if self.record is not None:  # every branch is kept in the recording, this run's events as they come
            source = recorded(source, self.record, self.settings, self.branching.tree.current,
                              self.branching.tree.others(), failure=lambda: self.crashed)
        self.pump = EventPump(source, slow_motion_s=self.settings.slow_motion_s,
                              auto_pause=AutoPause().check if self.auto_pause else None,
                              after=previous.finished if previous is not None else None,
                              lesson_pause=self.lessons.pauses(),
                              hold_first=self.start_paused, wait_until_shown=self.show_start_first)
        if self.start_paused:
            self.pump.pause()
        self._clear()
        self.lessons.started(self.start_paused)
        self.run_worker(self.pump.run, thread=True, exclusive=True, group="decoder", name="decoder")

    def _clear(self) -> None:
        self.painter.clear(self.settings.mode, self.view)
        self._refresh_header()

    def show_events(self, trace: list[tuple[float, Event]], paused: bool) -> None:
        """Show a run from its stored events (a branch), nothing decoded again (tui/branch_control.py)."""
        now = time.monotonic()
        self.view = RunView(paused=paused, now=now)
        self._clear()
        self.view.apply([event for _, event in trace], now, paused=paused)
        self.view.trace = trace

    def repaint(self) -> None:
        with self.batch_update():
            self._paint()

    def selected_token(self) -> TokenEmitted | None:
        return self.query_one(TextPane).selected_piece

    def _refresh_header(self) -> None:
        self.query_one(RunHeader).show(self.settings, self.view.started, self.view.counters.state, self.replaying)

    def outcome(self) -> tuple[int, str | None]:
        """What a plain quit ends with, and the line to say once the terminal is restored: 1 after a bug in any run
        (its traceback is in a file the line names), however well the runs after it went; else the error's own status
        (a model that cannot load: 3) while the run on screen has failed; else 0."""
        if self.run_bug is not None:
            return EXIT_INTERNAL, self.run_bug
        failed = self.view.failed
        if failed is not None:
            return failed.exit_code, f"decode-tui: the last run failed: {failed.message}"
        return 0, None

    @property
    def error(self) -> str | None:
        """The current run's failure, as shown to the user; None while it is well."""
        return self.view.error

    def say(self, message: str, severity: Severity = "information") -> None:
        self.messages.append(message)
        self.notify(message, severity=severity, timeout=toast_seconds(message, severity))

    def drain(self) -> None:
        """Take everything the decoder produced since the last tick; paint when a paint is due.

        Events are read at DRAIN_HZ, so the queue never grows and pauses land at once, but the widgets
        are painted together, in one batch, at most PAINT_HZ times a second while a run streams, as
        the pacer allows (and at once on any change of state). Every paint holds the interpreter lock for
        several milliseconds, and the decoder thread needs that lock between torch ops: painting at 30 Hz
        on two cores cost a third of the decoding speed (BENCHMARKS.md).
        """
        stats = self.stats_bar  # not queried: a DOM query per tick was a tenth of the UI thread's time
        if self.pump is None or stats is None or not stats.is_attached:  # not mounted yet, or shutting down
            return
        batch = self.pump.drain()
        now = time.monotonic()
        applied = self.view.apply(batch, now, paused=self.pump.paused)
        for message, severity in applied.messages:
            self.say(message, severity)
        failed = self.view.failed
        if failed is not None and failed.bug and self.run_bug is None:
            self.run_bug = failed.message
        if self.view.error is not None and self.branching.run_failed():
            return  # a new branch that could not start: its parent is shown again
        self.lessons.narrate(self.view)
        counters = self.view.counters
        urgent = applied.urgent or self.pump.paused or self.pump.finished.is_set() or self.paint_at_once
        running = counters.state == "running" and not self.pump.paused
        self.panels.show_busy(self.view.busy_label(now, bool(batch), running, self.settings.mode))
        due = self.pacer.due(now)
        if (urgent and batch) or (due and (bool(batch) or self.view.pending.news or counters.state == "running")):
            self.pacer.painted(now)
            self.paint_at_once = False
            with self.batch_update():
                self._paint()
            if self.view.started is not None and not self.pump.shown.is_set():
                self.call_after_refresh(self.pump.shown.set)  # once the compositor has drawn it

    def _paint(self) -> None:
        self.painter.paint(self.view.take(), self.view, self.settings.mode)
        self._refresh_header()

    # ------------------------------------------------------------------ actions
    def action_toggle_pause(self) -> None:
        if self.pump is None:
            self.branching.nothing_to_go_on()
            return
        if self.pump.paused:
            self.lessons.goes_on(self.view)
            self.pump.resume()
        else:
            self.pump.pause()
        self.view.set_paused(self.pump.paused)
        self.query_one(StatsBar).show(self.view.counters)
        self._refresh_header()

    def action_step(self) -> None:
        """One step; in a lesson stopped at one of its moments (or its intro), on to the lesson's next moment."""
        if self.pump is None:
            self.branching.nothing_to_go_on()
            return
        if self.lessons.waiting and self.pump.paused:
            self.action_toggle_pause()  # resumes, and the lesson goes on to its next moment
            return
        self.pump.step()

    def action_narration_page(self, pages: int) -> None:
        self.lessons.page(pages)

    def action_restart(self) -> None:
        self.start_run()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if self.has_class("too-small"):  # the notice says q quits; a key acting on a hidden layout would surprise
            return action in ("quit", "interrupt")
        return True  # a replay's keys that cannot act there say why, and what to do instead (settings_control.py)

    def action_cycle_mode(self) -> None:
        self.control.mode()

    def switch_mode_to(self, mode: Mode) -> None:
        self.control.mode(mode)

    def action_knob(self, knob_id: str, direction: int) -> None:
        self.control.knob(knob_id, direction)
        self._refresh_header()

    def action_stages(self) -> None:
        self.control.stages(self._refresh_header)

    def action_edit_prompt(self) -> None:
        self.control.prompt()

    def action_load_model(self) -> None:
        self.control.model()

    def rerank_beams(self) -> None:
        self.query_one(BeamPanel).rerank_finished(self.settings.config.beam.length_penalty)
        self.painter.show_best_beam(self.view)

    def action_select(self, delta: int) -> None:
        piece = self.query_one(TextPane).select(delta)
        inspector = self.query_one(TokenInspector)
        if piece is None:
            return
        inspector.show(piece, self.view.sampled_at.get(piece.index), self.view.verdict_at.get(piece.index), self.glyphs)
        inspector.add_class("visible")

    def action_clear_selection(self) -> None:
        self.query_one(TextPane).clear_selection()
        self.query_one(TokenInspector).remove_class("visible")

    def action_branch_here(self) -> None:
        self.branching.branch_here()

    def action_branches(self) -> None:
        self.branching.branches()

    def action_colouring(self) -> None:
        self.say(self.query_one(TextPane).toggle_colouring())

    def action_toggle_boundaries(self) -> None:
        self.query_one(TextPane).toggle_boundaries()

    def action_toggle_auto_pause(self) -> None:
        self.auto_pause = not self.auto_pause
        if self.pump is not None:
            self.pump.auto_pause = AutoPause().check if self.auto_pause else None
        self.say("auto-pause on: the run pauses on the first rejection, a lookup miss, a beam finishing and the end "
                 "of the text" if self.auto_pause else "auto-pause off")

    def set_theme(self, name: str) -> None:
        self.theme = name
        panels, pane = self.query_one(ModePanels), self.query_one(TextPane)
        panels.set_glyphs(self.glyphs)
        self.call_after_refresh(pane.redraw)
        self.call_after_refresh(panels.redraw)

    def action_cycle_theme(self) -> None:
        self.set_theme(name := next_theme(list(self.theme_specs), self.theme))
        self.say(f"theme → {self.theme_specs[name].description}")

    def action_export(self) -> None:
        self.exports.trace(self.settings, self.view.trace, self.say)

    def action_save_svg(self) -> None:
        self.exports.svg(self, self.settings, self.say)

    def action_race(self) -> None:
        """Race greedy, PLD and speculative (and this mode) on this prompt: each alone, then side by side."""
        start_race(self)

    def show_state(self, state: str) -> None:
        """Say ``state`` in the stats bar and the header (a race being measured says where it is)."""
        self.view.counters.state = state
        self.query_one(StatsBar).show(self.view.counters)
        self._refresh_header()

    def stop_run(self) -> None:
        self._stop()

    def action_forwards(self) -> None:
        from .screens.forwards import ForwardsScreen

        self.push_screen(ForwardsScreen(list(self.view.trace)))

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.all_bindings(), self.glyphs))

    def all_bindings(self) -> list[Binding]:
        """Every binding, on the key the user's keymap put it on (the help screen and the palette list these)."""
        return keys_after(relabelled([b for b in self.BINDINGS if isinstance(b, Binding)], "quit", self.quit_says),
                          self.keymap)

    def _stop(self) -> None:
        self.race_stop.set()
        for pump in (self.pump, self.branching.unpark()):
            if pump is not None:
                pump.stop()

    def on_unmount(self) -> None:
        # However the app ends (quit, Ctrl-C, an error, a test leaving run_test), a paused decoder is woken and told
        # to stop, so no thread is left waiting.
        self._stop()
        getattr(self, "_untrap", lambda: None)()
        sys.setswitchinterval(getattr(self, "_switch_interval", sys.getswitchinterval()))

    async def action_quit(self) -> None:
        self._stop()
        self.exit(0)

    def action_interrupt(self) -> None:
        self._stop()
        self.exit(EXIT_INTERRUPTED, return_code=EXIT_INTERRUPTED)

    def _handle_exception(self, error: Exception) -> None:
        """An unexpected exception (a bug): the traceback goes to a file, the run stops (a recording is closed with
        a ``finished`` event that says it ended in an error) and Textual exits with status 1, restoring the
        terminal; the command says where the traceback is instead of printing it (cli/commands.py)."""
        first = self.crashed is None
        if first:
            self.crashed = one_line(error, write_report(error))
            self._stop()
        super()._handle_exception(error)
        said = getattr(self, "_exit_renderables", None)  # what Textual prints on stderr once the terminal is back
        if first and isinstance(said, list):
            said[:] = [Text(self.crashed or "")]

    def terminated(self) -> None:
        """SIGTERM: the same ending as Ctrl-C (the decoder stopped, the terminal given back), its own status."""
        self._stop()
        self.exit(EXIT_TERMINATED, return_code=EXIT_TERMINATED)
