"""A race measured through the app's own event source (the ``R`` key), in the decoder thread.

The same protocol as ``decode-tui race`` (core/analysis/race.py): rounds of one run a
mode, alternated, each run alone. The source warms a mode up on its first use
(tui/sources.ModelRunner), before the run's first event, so no timed run is a
cold one. It knows sources and events; the app shows the result.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator

from ..core.analysis.race import Lane, make_lane, rounds, timed
from ..core.live import LiveParams
from ..core.record.events import Event, Mode
from .pump import EventSource, Notice
from .settings import Settings, with_mode

RUNS = 3  # timed runs a mode, as bench and race default to


def measure(make_source: Callable[[Settings, LiveParams], EventSource], settings: Settings, modes: list[Mode],
            stop: threading.Event, say: Callable[[str], None], runs: int = RUNS) -> list[Lane] | None:
    """The race's lanes, greedy first; None if ``stop`` was set before the end. ``say`` gets loading messages
    (a few a mode, never one per token)."""
    configs = {mode: dataclasses.replace(with_mode(settings, mode), prompt=settings.prompt, for_timing=True)
               for mode in modes}
    done: dict[str, list[tuple[tuple[float, Event], ...]]] = {mode: [] for mode in modes}
    for i, mode in rounds(modes, runs):
        say(f"{mode}, round {i + 1} of {runs}")  # one line a run: the progress stays in view until the race opens
        lane_settings = configs[mode]
        source = make_source(lane_settings, LiveParams(lane_settings.config.sampling, lane_settings.config.draft))
        stream = source()
        try:
            events = tuple(timed(_run_events(stream, stop, say)))
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # a stopped run's KV cache is rolled back in its finally: blocks
        if stop.is_set():
            return None
        done[mode].append(events)
    return [make_lane(mode, configs[mode].config, done[mode]) for mode in modes]


def _run_events(stream: Iterator[Event], stop: threading.Event, say: Callable[[str], None]) -> Iterator[Event]:
    """The run's own events: loading notices are said, not timed; a stop ends the run."""
    for event in stream:
        if stop.is_set():
            return
        if isinstance(event, Notice):
            if event.kind == "loading":
                say(event.message)
            continue
        yield event
