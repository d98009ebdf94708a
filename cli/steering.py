"""``generate --force`` and ``generate --resume TRACE --at N``: the path a headless run starts from.

The core decodes from any path (core/record/path.py); this reads what the user asked for into one: the first N tokens
of a trace (checked against this run's model and prompt in core/record/traces.py), then the forced text's tokens. It
also says, after the run, how likely the forced tokens were. It knows the command line, not the strategies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path as FilePath
from typing import TYPE_CHECKING

from ..core.errors import UsageError
from ..tui.numbers import count

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..core.record.events import Event, Started, TokenEmitted
    from ..core.record.path import Path


@dataclass(frozen=True)
class Steering:
    """What the user asked for: forced text and/or a trace to resume, read before any model loads."""

    force: str | None = None
    resume: FilePath | None = None
    at: int | None = None
    trace: Sequence[Event] = ()

    @property
    def started(self) -> Started | None:
        from ..core.record.events import Started

        return next((e for e in self.trace if isinstance(e, Started)), None)


def read_steering(force: str | None, resume: FilePath | None, at: int | None) -> Steering | None:
    """The options checked and the trace read (a bad file fails before a model is loaded)."""
    if force is not None and not force:
        raise UsageError("--force needs the text the reply should begin with, e.g. --force 'Once upon a time'.")
    if at is not None and resume is None:
        raise UsageError("--at N takes the first N tokens of a trace: pass the trace with --resume FILE.")
    if resume is not None and at is None:
        raise UsageError("--resume needs --at N: how many of the trace's tokens to keep (0 keeps none).")
    if force is None and resume is None:
        return None
    from ..core.record.traces import check_at, read_events, traced_tokens

    trace = read_events(resume, "--resume") if resume is not None else ()
    if resume is not None and at is not None:  # the trace says how many tokens it holds: no tokenizer needed
        check_at(at, traced_tokens(trace), str(resume))
    return Steering(force, resume, at, trace)


def prompt_of(steering: Steering | None, given: str | None) -> str | None:
    """The prompt to run: the user's, or with --resume and no prompt given, the trace's own."""
    if given is not None or steering is None or steering.started is None:
        return given
    return steering.started.prompt_text


def build_path(steering: Steering, model: str, tokenizer: PreTrainedTokenizerBase, prompt_ids: Sequence[int],
               max_new_tokens: int, context: int | None) -> Path:
    """The path: the trace's first N tokens, then the forced text's tokens. Needs the tokenizer only, so every
    range, trace and length error comes before the model loads and warms up (11-28 s)."""
    from ..core.record.path import Path, check_room, forced_tokens
    from ..core.record.traces import resume_path

    path = Path()
    if steering.resume is not None and steering.at is not None:
        path = resume_path(steering.trace, str(steering.resume), steering.at, model, prompt_ids)
    if steering.force is not None:
        forced = forced_tokens(tokenizer, model, steering.force)
        path = replace(path, forced=forced, forced_text=steering.force)
    check_room(path, len(prompt_ids), max_new_tokens, context, model)
    return path


SAID_FORCED = 8  # forced tokens listed one by one on the text output's last line; the others are summed up


def forced_summary(tokens: Sequence[TokenEmitted]) -> str | None:
    """How likely the forced tokens were, for the end of a text run: each one's probability and rank."""
    import math

    forced = [t for t in tokens if t.source == "forced"]
    if not forced:
        return None
    said = [f"{t.text!r} p={math.exp(t.logprob):.3g} rank {t.rank}" for t in forced if t.logprob is not None]
    if len(said) > SAID_FORCED:  # a long forced text: its first tokens, and the rest summed up
        rest = [t for t in forced[SAID_FORCED:] if t.logprob is not None]
        mean = sum(t.logprob for t in rest if t.logprob is not None) / len(rest)
        said = [*said[:SAID_FORCED], f"… {len(rest)} more, mean p={math.exp(mean):.3g} (geometric)"]
    return (f"forced {count(len(forced), 'token')} ({', '.join(said)}): how likely the model found each before it "
            "was forced")
