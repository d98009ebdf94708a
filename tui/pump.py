"""The bridge between a decoding run and the UI: one thread produces events, the UI drains them in batches.

The decoder runs in a single worker thread and puts every event on a queue;
the app drains the queue from a ~30 Hz timer and updates its widgets once per
batch, so a fast decoder never floods the message loop (no ``call_from_thread``
or ``post_message`` per token). Pausing and single-stepping happen here, at
token boundaries, so the strategies stay unaware of them; stopping closes the
strategy's generator, which runs its ``finally:`` blocks (KV rollback).
Slow motion (a delay after every step) and automatic pauses on notable events
also act here, in the decoder thread, so they stop the run exactly at the
step boundary, not a drain tick later. A run also waits here, after its
``Started`` event, until the UI has drawn its start (``EventPump.shown``), so
its first paint never competes with its first forward passes.

It knows the core's events, nothing about widgets.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar, Literal

from ..core.errors import EXIT_INTERNAL, DecodeTuiError
from ..core.record.events import BeamStepped, DraftVerified, Event, Started, TokenEmitted
from .crash import one_line, write_report

EventSource = Callable[[], Iterator[Event]]
# The longest the decoder waits for the UI to show a run's start (a UI that never says so costs this once).
SHOWN_WAIT_S = 0.25



class StepTracker:
    """Which event closes a step: a token (greedy, sample), a beam step, or a whole draft-verify round.

    A round is ``DraftVerified`` followed by the tokens it emits (accepted + the
    target's extra one), so a paused speculative run stops after a whole round,
    and the strategy is suspended before it reads the settings for the next one.
    """

    def __init__(self) -> None:
        self.pending = 0  # tokens the current round still has to emit

    def closes_step(self, event: Event) -> bool:
        if isinstance(event, DraftVerified):
            self.pending = event.accepted + (event.extra_token_id is not None)
            return False
        if isinstance(event, TokenEmitted):
            if self.pending > 0:
                self.pending -= 1
                return self.pending == 0
            return True
        return isinstance(event, BeamStepped)


@dataclass(frozen=True)
class Failed(Event):
    """Not a core event: the run raised; the UI shows ``message`` and stays usable.

    ``exit_code``: the status the command ends with if this is still the run on screen when the app closes (the
    error's own: a model that cannot load is 3). ``report``: for an unexpected exception, a bug, the file that
    holds its traceback (None where none could be written); the command then ends with 1 whatever came after."""

    name: ClassVar[str] = "failed"
    message: str
    exit_code: int = EXIT_INTERNAL
    bug: bool = False
    report: str | None = None


@dataclass(frozen=True)
class Notice(Event):
    """Not a core event: something the app should show (loading progress, a note, an automatic pause)."""

    name: ClassVar[str] = "notice"
    # ended: a replayed recording stops before its end; lesson: a lesson's pause, with the text to read there;
    # kernels: what the run's passes run on now, while a background compile may change it (the stats bar's)
    kind: Literal["loading", "note", "paused", "ended", "lesson", "kernels"]
    message: str
    elapsed_s: float | None = None  # ended: the recorded run's time at its last event


class EventPump:
    def __init__(self, source: EventSource, slow_motion_s: float = 0.0,
                 auto_pause: Callable[[Event], str | None] | None = None,
                 after: threading.Event | None = None,
                 lesson_pause: Callable[[Event], str | None] | None = None, hold_first: bool = False,
                 wait_until_shown: bool = False) -> None:
        self.source = source
        self.wait_until_shown = wait_until_shown  # see `shown`
        self.after = after  # the previous run's end: a restart never decodes beside the run it replaces
        self.slow_motion_s = slow_motion_s  # read at every step end, so the UI can change it mid-run
        self.auto_pause = auto_pause
        self.lesson_pause = lesson_pause  # a lesson's pauses: the text students read there (lessons.PauseTracker)
        # Paused at the start, hold the run's first event (not its loading notices) until resumed: a lesson's
        # intro is read before anything is decoded, while the model loads behind it.
        self.hold_first = hold_first
        self.events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._running = threading.Event()
        self._running.set()
        self._stop = threading.Event()
        self._steps = 0  # steps allowed while paused
        self._lock = threading.Lock()
        self._began = False  # run() has started: from then on, run() itself sets `finished` when it ends
        self.finished = threading.Event()
        # Set by the UI once the run's start is on screen. The decoder waits for it (at most SHOWN_WAIT_S) after
        # the run's Started event, before the first forward pass: the new run's first paint (the cleared panels,
        # the prompt, a full-screen redraw) then never competes with decoding for the interpreter lock. That
        # wait is the consumer holding the run at a yield, which the run's clock leaves out like a pause.
        self.shown = threading.Event()

    # -- called from the UI thread
    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def step(self) -> None:
        """While paused, let exactly one more step through."""
        with self._lock:
            self._steps += 1
        self._running.set()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()  # wake a paused producer so it can see the stop
        self.shown.set()
        with self._lock:
            if not self._began:
                # Never started (a restart replaced it while its worker was still queued, and Textual may never
                # run a cancelled worker): it is over now, so the run queued behind it does not wait for it.
                self.finished.set()

    def drain(self, limit: int = 10_000) -> list[Event]:
        batch: list[Event] = []
        while len(batch) < limit:
            try:
                batch.append(self.events.get_nowait())
            except queue.Empty:
                break
        return batch

    # -- runs in the worker thread
    def run(self) -> None:
        with self._lock:
            if self._stop.is_set():
                self.finished.set()
                return
            self._began = True
        stream = None
        try:
            # The run it replaces must end first, but a stop must not wait for that: a burst of restarts queues
            # runs behind one another, and quitting stops them all (a plain wait() here once hung the exit).
            while self.after is not None and not self.after.wait(0.05):
                if self._stop.is_set():
                    return
            if self._stop.is_set():
                return
            stream = self.source()
            steps = StepTracker()
            for event in stream:
                if self.hold_first and not isinstance(event, Notice):
                    self.hold_first = False
                    self._running.wait()
                    if self._stop.is_set():
                        break
                self.events.put(event)
                if isinstance(event, Started) and self.wait_until_shown:
                    self.shown.wait(SHOWN_WAIT_S)
                if self._stop.is_set():
                    break
                check = self.auto_pause
                reason = check(event) if check is not None else None
                if reason is not None:
                    self.pause()  # takes hold at the end of this step
                    self.events.put(Notice("paused", f"paused on the {reason}; space resumes, n steps"))
                narration = self.lesson_pause(event) if self.lesson_pause is not None else None
                if narration is not None:
                    self.pause()
                    self.events.put(Notice("lesson", narration))
                if steps.closes_step(event):
                    self._wait_at_step_end()
                    if self._stop.is_set():
                        break
        except DecodeTuiError as exc:  # a failure the user can mend: shown in the app, which stays usable
            self.events.put(Failed(exc.message, exc.exit_code))
        except Exception as exc:  # a bug: its traceback kept in a file, the app told where, and still usable
            report = write_report(exc)
            self.events.put(Failed(one_line(exc, report, "the run"), bug=True,
                                   report=None if report is None else str(report)))
        finally:
            if stream is not None and hasattr(stream, "close"):
                stream.close()
            self.finished.set()

    def _wait_at_step_end(self) -> None:
        if self.slow_motion_s > 0 and self._running.is_set():
            self._stop.wait(self.slow_motion_s)
        with self._lock:
            if self._steps > 0:
                self._steps -= 1
                if self._steps == 0:
                    self._running.clear()  # the single step is used up: pause again here
        self._running.wait()
