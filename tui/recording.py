"""Recordings, the format: a run's events written to a JSON-lines file as they pass (and an already-seen run, the
export key), read back and replayed at their pace; and a race's lanes, saved and read.

A recording is a ``recording`` header with the run's settings, then one event per line with ``t``, the seconds
since the run started. A run that ends in an error (its source raised, or the app around it failed) is closed with
a ``finished`` event whose ``finish_reason`` is ``error`` and whose ``error`` says what happened, built from the
events written so far, so a replay says how the run ended instead of stopping mid-stream. A run stopped by the user
(a quit, a restart) ends where it stopped, as before.

This module knows events and settings; nothing about models or widgets (tui/sources.py runs the live ones).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import UsageError
from ..core.record.events import BeamStepped, Event, Finished, Started, TokenEmitted
from ..core.record.traces import file_lines, read_line
from .pump import EventSource, Notice
from .settings import Settings

if TYPE_CHECKING:
    from ..core.analysis.race import Lane

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


def read_recording(path: Path) -> tuple[dict[str, Any], list[tuple[float, Event]]]:
    """The header and the timed events of a recording; a UsageError that says what is wrong otherwise.

    The events are the first run's; the branches made from it (lines tagged ``in_branch``) are in the header's
    ``branches``, each branch's number to its timed events."""
    text, lines = file_lines(path, f"Record one with `decode-tui run --record {path.name}`.", "the recording ")
    if not lines:
        raise UsageError(f"The recording {path} is empty.")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("event") != "recording":
        raise UsageError(f"{path} is not a decode-tui recording (its first line should be the recording header). "
                         "Record one with `decode-tui run --record FILE.jsonl`.")
    if header.get("version") != RECORDING_VERSION:
        raise UsageError(f"{path} is a version {header.get('version')} recording; this decode-tui reads version "
                         f"{RECORDING_VERSION}.")
    events: list[tuple[float, Event]] = []
    branches: dict[int, list[tuple[float, Event]]] = {}
    header["branches"] = branches
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            t, tags, event = read_line(line)
        except json.JSONDecodeError as exc:
            if number == len(lines) and not text.endswith("\n") and events:
                # The last line was cut mid-write (the recording process was killed): what came before it is whole
                # and plays, and the replay says where it stops.
                header["cut_at_line"] = number
                break
            raise UsageError(f"{path}, line {number}: not JSON ({exc}). The file is damaged; record it again.") \
                from None
        except ValueError as exc:
            raise UsageError(f"{path}, line {number}: {exc}. The file is damaged; record it again.") from None
        branch = tags.get("in_branch", 0)
        (branches.setdefault(branch, []) if branch else events).append((t or 0.0, event))
    if not events:
        raise UsageError(f"The recording {path} holds no events.")
    return header, events


def replay(events: list[tuple[float, Event]], speed: float = 1.0, cut_at_line: int | None = None) -> EventSource:
    """A source that plays recorded events with their original pacing divided by ``speed`` (0: no waiting).

    Gaps are capped at one second, so a recording with a long model load does not stall the replay.
    """

    def play() -> Iterator[Event]:
        previous = 0.0
        tokens = 0
        for t, event in events:
            gap = max(0.0, t - previous)
            previous = t
            if speed > 0 and gap > 0:
                time.sleep(min(gap / speed, 1.0))
            tokens += isinstance(event, TokenEmitted)
            if isinstance(event, TokenEmitted | BeamStepped) and event.elapsed_s is None:
                # Recorded before events carried the decoding clock: the recording's own time stands in for it.
                event = dataclasses.replace(event, elapsed_s=t)
            yield event
        if not events or not isinstance(events[-1][1], Finished):
            # Exported mid-run: the run went on, the recording did not. Say so, with the recorded figures, rather
            # than leave the replay "running" with a clock that keeps ticking.
            rate = f", {tokens / previous:.1f} tok/s" if previous > 0 else ""
            cut = f" (cut off in line {cut_at_line}, a write that never finished)" if cut_at_line else ""
            yield Notice("ended", f"recording ends here{cut}: {tokens} tokens in {previous:.1f} s recorded{rate}",
                         elapsed_s=previous)

    return play


# A race (core/analysis/race.py): a header naming the lanes, then each lane's events tagged with its number.
RACE_VERSION = 1


def write_race(path: Path, settings: Settings, lanes: list[Lane], device: str) -> None:
    """Save a measured race, so it replays (``decode-tui replay``) with no model, at each lane's measured pace."""
    header = {"event": "race", "version": RACE_VERSION, "device": device, "settings": dataclasses.asdict(settings),
              "lanes": [{"name": lane.name, "config": dataclasses.asdict(lane.config), "rates": list(lane.rates)}
                        for lane in lanes]}
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(header) + "\n")
        for number, lane in enumerate(lanes):
            for t, event in lane.events:
                out.write(event_line(t, event, lane=number))


def is_race(path: Path) -> bool:
    """Whether ``path`` holds a race rather than a run (an unreadable file is left to the reader to report)."""
    try:
        with path.open(encoding="utf-8") as f:
            return bool(json.loads(f.readline()).get("event") == "race")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False


def read_race(path: Path) -> tuple[Settings, str, list[Lane]]:
    """A saved race's shared settings, device and lanes; a UsageError that says what is wrong otherwise."""
    from ..core.analysis.race import Lane
    from .settings import settings_from_dict

    _, lines = file_lines(path, "Record one with `decode-tui race --record FILE.jsonl`.", "the race ")
    try:
        header = json.loads(lines[0])
        if header.get("version") != RACE_VERSION:
            raise UsageError(f"{path} is a version {header.get('version')} race; this decode-tui reads version "
                             f"{RACE_VERSION}.")
        named = [(lane["name"], settings_from_dict({"config": lane["config"]}).config,
                  tuple(float(r) for r in lane.get("rates", ()))) for lane in header["lanes"]]
        events: list[list[tuple[float, Event]]] = [[] for _ in named]
        for line in lines[1:]:
            if line.strip():
                t, tags, event = read_line(line)
                events[tags["lane"]].append((t if t is not None else 0.0, event))
        settings = settings_from_dict(header["settings"])
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read the race {path}: {exc}.") from None
    except (json.JSONDecodeError, KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"{path} is not a readable decode-tui race ({type(exc).__name__}: {exc}). Record it again "
                         "with `decode-tui race --record FILE.jsonl`.") from None
    return settings, str(header.get("device", "")), [Lane(name, config, tuple(lane_events), rates) for
                                                     (name, config, rates), lane_events in zip(named, events,
                                                                                                strict=True)]
