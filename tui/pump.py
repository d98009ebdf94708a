"""The bridge between a decoding run and the UI: one thread produces events, the UI drains them in batches.

The decoder runs in a single worker thread and puts every event on a queue;
the app drains the queue from a ~30 Hz timer and updates its widgets once per
batch, so a fast decoder never floods the message loop (no ``call_from_thread``
or ``post_message`` per token). Pausing and single-stepping happen here, at
token boundaries, so the strategies stay unaware of them; stopping closes the
strategy's generator, which runs its ``finally:`` blocks (KV rollback).

It knows the core's events, nothing about widgets.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar

from ..core.events import BeamStepped, DraftVerified, Event, TokenEmitted

EventSource = Callable[[], Iterator[Event]]

# Events after which a paused run waits: one decoding step, one beam step or one draft-verify round.
_STEP_ENDS = (TokenEmitted, BeamStepped, DraftVerified)


@dataclass(frozen=True)
class Failed(Event):
    """Not a core event: the run raised; the UI shows ``message`` and stays usable."""

    name: ClassVar[str] = "failed"
    message: str


class EventPump:
    def __init__(self, source: EventSource) -> None:
        self.source = source
        self.events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._running = threading.Event()
        self._running.set()
        self._stop = threading.Event()
        self._steps = 0  # steps allowed while paused
        self._lock = threading.Lock()
        self.finished = threading.Event()

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
        stream = None
        try:
            stream = self.source()
            for event in stream:
                self.events.put(event)
                if self._stop.is_set():
                    break
                if isinstance(event, _STEP_ENDS):
                    self._wait_at_step_end()
                    if self._stop.is_set():
                        break
        except Exception as exc:  # shown in the app, which stays usable
            message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            self.events.put(Failed(message))
        finally:
            if stream is not None and hasattr(stream, "close"):
                stream.close()
            self.finished.set()

    def _wait_at_step_end(self) -> None:
        with self._lock:
            if self._steps > 0:
                self._steps -= 1
                if self._steps == 0:
                    self._running.clear()  # the single step is used up: pause again here
        self._running.wait()
