"""Replays of a greedy run that already happened: the target forwards another drafting setting would have needed.

A greedy run's output is fixed, and greedy speculative decoding and prompt
lookup (PLD) give exactly that output whatever they draft. So the only thing
a drafting setting changes is how many target forward passes the run needs,
and how wide each one is. That can be computed from the trace alone:
:func:`replay_drafter` runs the real drafter (any
:class:`~decode_tui.core.drafting.drafters.Drafter`) on the same contexts the real
loop would see, rolls it back after each round as the verifier does, and
accepts the longest prefix that equals the recorded tokens. So a round
proposes exactly what it proposes in a real run: prompt lookup
(:func:`replay_lookup`) is a pure function of the context, and a draft
model drafting greedily makes the very same calls on its cache (the int8
draft quantises its activations per call, so a teacher-forced pass over the
whole text would draft other tokens). The forwards are exact; tests check
them against real runs. The adaptive draft length replays the run so far with
:class:`LookupMemo` and :class:`SuffixMemo`; the what-if tables
(:mod:`decode_tui.core.analysis.whatif`) turn replays into time.

It knows runs as token lists and the drafters' proposal rules; it does not know
the verifier's loop beyond what it replicates here, nor what a forward costs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..choosing.sampling import stage_processors
from ..errors import UsageError
from ..modes import DRAFTING_MODES
from ..params import DraftParams, SamplingParams
from ..record.events import Event, Finished, Started
from ..record.traces import read_events
from ..token_tree import TokenTree, greedy_path
from .drafters import Drafter as Proposer
from .drafters import Replay

if TYPE_CHECKING:
    from transformers import LogitsProcessor, PreTrainedModel

    from ..record.events import Stage
    from ..record.transcript import Transcript
    from .draft_models import DraftModel

NGRAM_SIZES = range(1, 6)  # max_ngram_size settings a PLD what-if tries
DRAFT_LENGTHS = range(1, 13)  # num_pred_tokens / num_draft_tokens settings

Drafter = Literal["greedy", "pld", "draft", "pld tree", "suffix"]


@dataclass(frozen=True)
class Trace:
    """What a what-if needs of a finished greedy run: who decoded what, from which prompt, up to which limit."""

    source: str  # the file it was read from, for messages
    model: str
    mode: str
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]  # the new tokens, an EOS that ended the run included
    max_new_tokens: int
    target_forwards: int  # the recorded run's own count
    params: Mapping[str, Any]

    @property
    def eos_token_ids(self) -> frozenset[int] | None:
        """The end-of-text tokens the run stopped at (None in traces made before runs recorded them)."""
        ids = self.params.get("eos_token_ids")
        return frozenset(int(i) for i in ids) if isinstance(ids, list | tuple) else None


def trace_from_events(events: Iterable[Event], source: str = "the run") -> Trace:
    """The :class:`Trace` of a run's events; a UsageError if they are not one whole greedy run."""
    started = finished = None
    for event in events:
        if isinstance(event, Started):
            started = event
        elif isinstance(event, Finished):
            finished = event
    if started is None or finished is None:
        raise UsageError(f"{source} is not a whole run: it has no {'start' if started is None else 'end'}. Record "
                         "one with `decode-tui generate --mode greedy --format jsonl > run.jsonl`.")
    params = started.params
    greedy = started.mode == "greedy" or (started.mode in DRAFTING_MODES and not params.get("draft_sample"))
    if not greedy:
        what = f"{started.mode} run" + (" with sampled drafts" if started.mode in DRAFTING_MODES else "")
        raise UsageError(f"{source} is a {what}: a what-if replays greedy output, whose tokens do not depend on "
                         "how they were drafted. Record a greedy run (or a greedy pld or speculative one).")
    if finished.finish_reason in ("cancelled", "error"):
        ended = "cancelled" if finished.finish_reason == "cancelled" else "ended by an error"
        raise UsageError(f"{source} was {ended} after {finished.new_tokens} tokens: its length limit is unknown, "
                         "so its forwards cannot be replayed exactly. Record a run that ends by itself.")
    return Trace(source=source, model=started.model, mode=started.mode, prompt_ids=started.prompt_token_ids,
                 token_ids=finished.token_ids, max_new_tokens=int(params.get("max_new_tokens", finished.new_tokens)),
                 target_forwards=finished.target_forwards, params=params)


def read_trace(path: Path) -> Trace:
    """A trace from ``generate --format jsonl`` output or an app recording (``run --record``, the export key)."""
    hint = f"Record a greedy run with `decode-tui generate --mode greedy --format jsonl > {path.name}`."
    return trace_from_events(read_events(path, "A what-if", hint), str(path))


@dataclass(frozen=True)
class Replayed:
    """One setting replayed on a trace: the target forwards it needs and what each fed the target."""

    drafter: str  # a Drafter, or a mode run for its counts (core/analysis/counted.py)
    max_ngram_size: int | None  # pld
    draft_length: int  # num_pred_tokens (pld) or num_draft_tokens (draft); 0 for greedy
    target_forwards: int  # the prefill included, as Finished.target_forwards counts
    widths: tuple[int, ...]  # tokens fed to each forward after the prefill (1: a plain step)
    drafted: int
    accepted: int
    lookup_s: float = 0.0  # the lookups' own time, measured while replaying them (pld)
    tree_budget: int = 0  # drafted nodes a verification at most, where the drafts are trees (0: chains)

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


# (context, emitted so far, k) -> draft tokens, or a tree of them
Propose = Callable[[list[int], int, int], "list[int] | TokenTree"]


def replay_widths(trace: Trace, eos_token_ids: frozenset[int], k_max: int, propose: Propose,
            confirmed: Callable[[int], None] = lambda _: None) -> tuple[int, list[int], int, int]:
    """The verifier's greedy loop (core.strategies.speculative) on recorded tokens: forwards, widths, counts.
    ``confirmed(n)`` is told, after each round, how many context tokens are now settled (the drafter's rollback)."""
    out = trace.token_ids
    limit = min(trace.max_new_tokens, len(out))
    context = [*trace.prompt_ids, out[0]]  # the first token comes from the prefill
    emitted, forwards, drafted, accepted = 1, 1, 0, 0
    widths: list[int] = []
    done = out[0] in eos_token_ids or emitted >= limit
    while not done:
        k = min(k_max, limit - emitted - 1)  # the target always adds one token of its own
        proposed = propose(context, emitted, k) if k > 0 else []
        if isinstance(proposed, TokenTree):  # the target's own tokens, followed down the tree as far as they go
            # The target's token at each row: after the pending token, and after each node's path (its depth).
            choice = [out[emitted], *(out[emitted + depth] for depth in proposed.depths())]
            path, _ = greedy_path(proposed, choice)
            n, width = len(path), len(proposed) + 1
        else:
            draft = proposed[:k]
            n = 0
            while n < len(draft) and draft[n] == out[emitted + n]:
                n += 1
            width = len(draft) + 1
        forwards += 1
        widths.append(width)
        drafted += width - 1
        accepted += n
        # The accepted prefix, then the target's own token, unless an EOS or the limit came first.
        for token in out[emitted : emitted + n + 1]:
            context.append(token)
            emitted += 1
            if token in eos_token_ids or emitted >= limit:
                done = True
                break
        confirmed(len(context) - 1)  # everything but the pending token, as the verifier rolls back
    return forwards, widths, drafted, accepted


def replay_greedy(trace: Trace) -> Replayed:
    """Plain greedy: one forward per token."""
    n = min(trace.max_new_tokens, len(trace.token_ids))
    return Replayed("greedy", None, 0, n, (1,) * (n - 1), 0, 0)


def replay_drafter(trace: Trace, eos_token_ids: frozenset[int], drafter: Proposer, k: int,
                   processors: list[tuple[Stage, LogitsProcessor]] | None = None, *, name: Drafter = "draft",
                   max_ngram_size: int | None = None) -> Replayed:
    """Greedy speculative decoding with ``drafter`` and draft length ``k`` on the trace: exact forwards (the real
    drafter on the real contexts, rolled back after each round as the verifier rolls it back). ``name`` and
    ``max_ngram_size`` label the row; a copying drafter's own time is kept, a draft model's is its forwards'."""
    spent = 0.0

    def propose(context: list[int], _emitted: int, room: int) -> list[int]:
        nonlocal spent
        started = time.perf_counter()
        tokens = drafter.propose(context, room, processors or [], True, None).token_ids
        spent += time.perf_counter() - started
        return tokens

    forwards, widths, drafted, accepted = replay_widths(trace, eos_token_ids, k, propose, drafter.rollback)
    return Replayed(name, max_ngram_size, k, forwards, tuple(widths), drafted, accepted,
                    spent if drafter.free_to_ask else 0.0)


def replay_tree(trace: Trace, eos_token_ids: frozenset[int], drafter: Proposer, k: int, *, name: Drafter,
                max_ngram_size: int | None = None) -> Replayed:
    """Greedy tree verification with a copying drafter that gives trees (prompt lookup's every match, suffix
    drafting with no history but the trace's own text) on the trace: exact forwards, each as wide as its tree."""
    spent = 0.0

    def propose(context: list[int], _emitted: int, room: int) -> list[int] | TokenTree:
        nonlocal spent
        started = time.perf_counter()
        draft = drafter.propose(context, room, [], True, None)
        spent += time.perf_counter() - started
        return draft.tree or TokenTree.from_chains([draft.token_ids[:room]])

    forwards, widths, drafted, accepted = replay_widths(trace, eos_token_ids, k, propose, drafter.rollback)
    return Replayed(name, max_ngram_size, k, forwards, tuple(widths), drafted, accepted, spent, drafter.tree_budget)


def draft_confidence(trace: Trace, given: float | None) -> float:
    """The draft confidence cut-off a draft replay uses: the one given, else the trace's own (a speculative run),
    else the decoding default."""
    if given is not None:
        return given
    own = trace.params.get("confidence_threshold")
    return float(own) if isinstance(own, int | float) and not isinstance(own, bool) else \
        DraftParams().confidence_threshold


def _processors(trace: Trace) -> list[tuple[Stage, LogitsProcessor]]:
    """What a greedy run's drafter applies to its scores: the run's repetition penalty (greedy keeps no other)."""
    penalty = trace.params.get("repetition_penalty", 1.0)
    return stage_processors(SamplingParams(repetition_penalty=float(penalty)), greedy=True)


def replay_draft(trace: Trace, eos_token_ids: frozenset[int], draft: DraftModel, num_draft_tokens: int,
                 confidence_threshold: float = 0.4, *, target: PreTrainedModel) -> Replayed:
    """Greedy speculative decoding with this draft model and draft length, as a real run drafts: the draft
    stops after a token it gave less than ``confidence_threshold``, or after an end-of-text token. A draft made
    from the target starts from the target's keys and values of the prompt, as in a run: one target prefill."""
    import torch

    from ..execution.forward import forward, new_cache

    drafter = draft.drafter(confidence_threshold, eos_token_ids)
    with torch.inference_mode():
        if draft.target_kv is not None:
            cache = new_cache(target)
            forward(target, torch.tensor([trace.prompt_ids], device=target.device), cache)
            drafter.prefilled(list(trace.prompt_ids), cache)
        return replay_drafter(trace, eos_token_ids, drafter, num_draft_tokens, _processors(trace))


class Memo(Protocol):
    """A copying drafter's replays of one run as it grows, each position's draft made once (:meth:`widths`)."""

    settings: tuple[int, int]  # the drafter's settings it was made for

    def widths(self, trace: Trace, k: int) -> tuple[int, ...]:
        """The widths of the target's forwards a fixed draft length ``k`` would have used on ``trace``."""
        ...


def replay_so_far(transcript: Transcript, make: Callable[[], Memo], settings: Callable[[], tuple[int, int]]) -> Replay:
    """What a fixed draft length k would have fed the target in this run so far, from a copying drafter's memo
    (made again by ``make`` when the drafter's ``settings`` changed mid-run)."""
    memo: Memo | None = None

    def widths(k: int) -> tuple[int, ...]:
        nonlocal memo
        so_far = transcript.token_ids
        if k == 0 or len(so_far) < 2:
            return (1,) * max(len(so_far) - 1, 0)
        if memo is None or memo.settings != settings():  # retuned mid-run
            memo = make()
        trace = Trace(source="the run so far", model="", mode="greedy", prompt_ids=transcript.prompt_ids,
                      token_ids=tuple(so_far), max_new_tokens=len(so_far), target_forwards=0, params={})
        return memo.widths(trace, k)

    return widths
