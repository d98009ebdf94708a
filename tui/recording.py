"""Writing recordings: a run's events to a JSON-lines file as they pass, and an already-seen run (the export key).

A recording is a ``recording`` header with the run's settings, then one event per line with ``t``, the seconds
since the run started. A run that ends in an error (its source raised, or the app around it failed) is closed with
a ``finished`` event whose ``finish_reason`` is ``error`` and whose ``error`` says what happened, built from the
events written so far, so a replay says how the run ended instead of stopping mid-stream. A run stopped by the user
(a quit, a restart) ends where it stopped, as before.

Reading recordings back is tui/sources.py's. This module knows events and settings, nothing about widgets.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ..core.events import Event, Finished, Started, TokenEmitted
from .pump import EventSource, Notice
from .settings import Settings

RECORDING_VERSION = 1


def recorded(source: EventSource, path: Path, settings: Settings, branch: int = 0,
             others: Sequence[tuple[int, list[tuple[float, Event]]]] = (),
             failure: Callable[[], str | None] = lambda: None) -> EventSource:
    """The same events, also written to ``path`` as they pass (the file is rewritten for each run).

    A run with branches (tui/branches.py) keeps them all: the ``others`` are written first, each line tagged
    ``in_branch`` with its branch's number, then this run's events, tagged with ``branch`` unless it is the first
    run (so a recording without branches is as it always was). ``failure``: asked when the run's consumer stops
    it early; a message means the consumer stopped because it failed, and the recording is closed as an error.
    """

    def events() -> Iterator[Event]:
        with path.open("w", encoding="utf-8") as out:
            out.write(header_line(settings))
            for number, trace in others:
                for t, event in trace:
                    out.write(event_line(t, event, **({"in_branch": number} if number else {})))
            tags = {"in_branch": branch} if branch else {}
            started: float | None = None  # the clock starts at the run's first event: loading is not replayed
            seen: list[Event] = []
            error: str | None = None
            try:
                for event in source():
                    if not isinstance(event, Notice):
                        now = time.perf_counter()
                        started = now if started is None else started
                        out.write(event_line(now - started, event, **tags))
                        out.flush()  # a crash or Ctrl-C keeps what was recorded so far
                        seen.append(event)
                    yield event
            except GeneratorExit:
                error = failure()
                raise
            except Exception as exc:
                error = str(exc) or type(exc).__name__
                raise
            finally:
                if error is not None and not any(isinstance(e, Finished) for e in seen):
                    t = time.perf_counter() - started if started is not None else 0.0
                    out.write(event_line(t, ended_in_error(settings, seen, error), **tags))

    return events


def ended_in_error(settings: Settings, seen: Sequence[Event], error: str) -> Finished:
    """The ``finished`` event of a run that failed after ``seen``: its tokens so far, ``finish_reason`` ``error``."""
    start = next((e for e in seen if isinstance(e, Started)), None)
    tokens = [e for e in seen if isinstance(e, TokenEmitted)]
    forwards = max((f for e in seen if isinstance(f := getattr(e, "target_forwards", None), int)), default=0)
    elapsed = next((e.elapsed_s for e in reversed(tokens) if e.elapsed_s is not None), 0.0)
    return Finished(mode=start.mode if start else settings.mode,
                    prompt_token_ids=start.prompt_token_ids if start else (),
                    token_ids=tuple(e.token_id for e in tokens), text="".join(e.text for e in tokens),
                    finish_reason="error", new_tokens=len(tokens), target_forwards=forwards, elapsed_s=elapsed,
                    tokens_per_s=len(tokens) / elapsed if elapsed > 0 else 0.0, error=error)


def write_trace(path: Path, settings: Settings, events: list[tuple[float, Event]]) -> None:
    """Save an already-seen run (the export key) in the recording format, so it can be replayed."""
    with path.open("w", encoding="utf-8") as out:
        out.write(header_line(settings))
        for t, event in events:
            out.write(event_line(t, event))


def header_line(settings: Settings) -> str:
    header = {"event": "recording", "version": RECORDING_VERSION, "settings": dataclasses.asdict(settings)}
    return json.dumps(header) + "\n"


def event_line(t: float, event: Event, **tags: int) -> str:
    """One recorded event: ``t`` (seconds since the run started), any ``tags`` (a race's lane) and the event's JSON
    fields."""
    return json.dumps({**tags, "t": round(t, 4), **event.to_dict()}, ensure_ascii=False) + "\n"
