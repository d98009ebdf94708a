"""Reading a run back from a file, and the path a new run resumes from.

A trace is what ``decode-tui generate --format jsonl`` writes, an app recording (``run --record``, the export
key), a lesson's recording or a saved race: one event a line, a header and tags (a time, a branch, a lane) aside.
This module is the one reader of those files: the file's lines (:func:`file_lines`) and each line's event with its
tags (:func:`read_line`), which the app's recordings and races build on (``tui/recording.py``), and the events
alone (:func:`read_events`, for the what-if and for ``generate --resume``). It turns the first N tokens of one
into a :class:`~decode_tui.core.record.path.Path` (:func:`resume_path`), refusing a trace that cannot be resumed here
with a message that says what to do. It does not know models; the caller says which prompt and model it runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path as FilePath

from ..errors import UsageError
from .events import Event, Finished, Started, TokenEmitted, from_dict
from .path import Path
from .transcript import TokenStats

RECORD_HINT = "Record one with `decode-tui generate --format jsonl > run.jsonl`."


def file_lines(path: FilePath, missing: str, what: str = "") -> tuple[str, list[str]]:
    """``path``'s text and its lines; a UsageError where it is missing (``missing`` says what to do) or unreadable.
    ``what`` names the file in the messages ("the recording ")."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{what[:1].upper() + what[1:] if what else ''}{path} does not exist. {missing}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read {what}{path}: {exc}.") from None
    return text, text.splitlines()


TAGS = ("in_branch", "lane")  # the line tags of recordings (a branch's events) and races (a lane's)


def read_line(line: str) -> tuple[float | None, dict[str, int], Event]:
    """One line's event, with its time (``t``, a recording's and a race's seconds since the start; None where
    absent) and its tags; a ValueError (a ``json.JSONDecodeError`` where it is not JSON) saying what is wrong."""
    return read_object(json.loads(line))


def read_object(data: object) -> tuple[float | None, dict[str, int], Event]:
    """:func:`read_line` for a line already parsed (it is taken apart)."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    t = data.pop("t", None)
    if t is not None and (isinstance(t, bool) or not isinstance(t, int | float) or t < 0):
        raise ValueError(f"t is {t!r}, not a time in seconds")
    tags = {}
    for tag in TAGS:
        if tag in data:
            value = data.pop(tag)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{tag} is {value!r}, not a number")
            tags[tag] = value
    return (None if t is None else float(t)), tags, from_dict(data)


def read_events(path: FilePath, what: str, hint: str = RECORD_HINT) -> list[Event]:
    """Every event in ``path``; a UsageError naming the line of the first one that is not an event. ``what``
    says what reads it, for the messages ("A what-if", "--resume")."""
    _, lines = file_lines(path, hint)
    events = [e for number, line in enumerate(lines, start=1) if (e := line_event(path, number, line, what))]
    if not events:
        raise UsageError(f"{path} holds no events. {hint}")
    return events


def line_event(path: FilePath, number: int, line: str | bytes, what: str) -> Event | None:
    """Line ``number`` of ``path`` as an event; None for a blank line or an app recording's header; a UsageError
    naming the line where it is not an event (``what`` reads it, for the message)."""
    if not line.strip():
        return None
    try:
        data = json.loads(line)
        if isinstance(data, dict) and data.get("event") == "recording":  # an app recording's header
            return None
        return read_object(data)[2]
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}, line {number}: not a decode-tui event ({exc}). {what} reads the output of "
                         "`decode-tui generate --format jsonl` or an app recording.") from None


def _samples(started: Started) -> bool:
    params = started.params
    return started.mode == "sample" or bool(params.get("beam_sample")) or bool(params.get("draft_sample"))


def _emitted(events: Sequence[Event]) -> tuple[list[TokenEmitted], list[int]]:
    """A trace's emitted tokens and their ids (beam search's from its ``finished``: it streams none of its own)."""
    tokens = [e for e in events if isinstance(e, TokenEmitted)]
    finished = next((e for e in events if isinstance(e, Finished)), None)
    if finished is not None and [t.token_id for t in tokens] != list(finished.token_ids):
        tokens = []  # beam search streams no tokens of its own before the end; its result is in `finished`
    return tokens, [t.token_id for t in tokens] if tokens else list(finished.token_ids if finished else ())


def traced_tokens(events: Sequence[Event]) -> int:
    """How many tokens a traced run emitted: what ``--at`` may keep of it, known before any model loads."""
    return len(_emitted(events)[1])


def check_at(at: int, emitted: int, source: str) -> None:
    """A UsageError unless ``--at`` keeps 0 to ``emitted`` tokens of the trace ``source``."""
    if not 0 <= at <= emitted:
        raise UsageError(f"--at {at} is outside {source}: it emitted {emitted} tokens, so --at takes 0 to "
                         f"{emitted}.")


def resume_path(events: Sequence[Event], source: str, at: int, model: str, prompt_ids: Sequence[int]) -> Path:
    """The first ``at`` emitted tokens of a traced run (with their sources and figures) as the path of a new run
    of ``model`` on ``prompt_ids``; a UsageError where the trace is of another model or prompt, ``at`` is out of
    its range, or a sampled trace does not say its seed."""
    started = next((e for e in events if isinstance(e, Started)), None)
    if started is None:
        raise UsageError(f"{source} has no `started` event, so its model and prompt are unknown. {RECORD_HINT}")
    if started.model != model:
        raise UsageError(f"{source} was decoded by {started.model}, and this run uses {model}: a path's tokens mean "
                         f"something only to the model that made them. Pass --model {started.model}.")
    if tuple(started.prompt_token_ids) != tuple(prompt_ids):
        raise UsageError(f"{source} was decoded from another prompt ({len(started.prompt_token_ids)} tokens after "
                         f"the chat template; this one is {len(prompt_ids)}). Leave out --prompt to take the trace's "
                         "own, and keep --no-chat as the trace had it.")
    if _samples(started) and "seed" not in started.params:
        raise UsageError(f"{source} is a sampled run that does not say its seed, so what it drew cannot be told "
                         "from chance. Record it again with --seed.")
    tokens, ids = _emitted(events)
    check_at(at, len(ids), source)
    kept = tokens[:at]
    return Path(kept=tuple(ids[:at]),
                kept_sources=tuple(t.source for t in kept) if kept else (),
                kept_stats=tuple(TokenStats.of(t) for t in kept))
