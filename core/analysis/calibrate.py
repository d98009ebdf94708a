"""What a real run costs beyond the forwards that :mod:`decode_tui.core.analysis.whatif` measures and prices.

A what-if prices each target forward with its measured time. A real run pays more around each: the decoding
loop's own work (choosing the token, the events, the text) at every step, and at every verifying round the
acceptance test over k + 1 rows, the draft's events and several tokens emitted at once. Left out, the estimates
come out optimistic. This times real runs of the
trace's prompt, plain greedy and greedy prompt lookup, and shares what the measured forwards do not explain
among their steps and rounds. A module of its own: it needs both the what-if and the strategies.

It knows how to time a run; it decides nothing about which setting is best.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..drafting.prompt_lookup import PromptLookup, replay_lookup
from ..drafting.replay import Trace
from ..params import DraftParams, SamplingParams
from ..record.detokenize import Detokenizer
from ..record.events import Event
from ..record.transcript import Transcript
from ..strategies.autoregressive import autoregressive
from ..strategies.speculative import speculative
from .whatif import Costs

if TYPE_CHECKING:
    from ..model.loading import LoadedModel


def calibrated(lm: LoadedModel, trace: Trace, costs: Costs, step_repeats: int = 5, round_repeats: int = 3,
               progress: Callable[[str], None] | None = None) -> Costs:
    """``costs`` with the loop's work per step (``overhead_s``) and a verifying round's (``round_overhead_s``),
    each the median of that many timed runs (a greedy run of 32 tokens is short; a prompt-lookup run is not).
    ``progress`` hears each run as it starts."""
    stepped = dataclasses.replace(costs, overhead_s=step_overhead(lm, trace, costs, step_repeats, progress))
    return dataclasses.replace(stepped, round_overhead_s=round_overhead(lm, trace, stepped, round_repeats, progress))


def step_overhead(lm: LoadedModel, trace: Trace, costs: Costs, repeats: int,
                  progress: Callable[[str], None] | None = None) -> float:
    """Seconds each target forward of a real run costs beyond the forward itself: plain greedy decoding of up to
    32 tokens from the trace's prompt, timed whole (the median of ``repeats`` runs), less its prefill and steps
    as ``costs`` measured them alone, shared among its forwards."""
    n = max(2, min(32, len(trace.token_ids)))  # the prefill gives the first token, then n - 1 steps

    def run() -> tuple[Transcript, Iterator[Event]]:
        transcript = Transcript("greedy", list(trace.prompt_ids), Detokenizer(lm.tokenizer), frozenset(), n)
        return transcript, autoregressive(lm.model, transcript, SamplingParams(), greedy=True)

    seconds = _median_seconds(run, repeats, progress=progress, what="greedy run")
    return max(0.0, (seconds - costs.prefill_s - (n - 1) * costs.verify(1)) / n)


def round_overhead(lm: LoadedModel, trace: Trace, costs: Costs, repeats: int,
                   progress: Callable[[str], None] | None = None) -> float:
    """Seconds each verifying round of a real run costs beyond what ``costs`` already price: greedy prompt lookup at
    the default settings run on the trace's prompt (it writes the trace's tokens again), timed whole (the median
    of ``repeats`` runs), less the estimate without it, shared among its verifying rounds. 0 where that run
    drafts nothing, or writes other tokens than the trace (a trace from another machine's numerics)."""
    eos = trace.eos_token_ids or lm.eos_token_ids
    params = DraftParams()
    replayed = replay_lookup(trace, eos, params.max_ngram_size, params.num_pred_tokens)
    rounds = sum(1 for w in replayed.widths if w > 1)
    if rounds == 0:
        return 0.0
    written: list[tuple[int, ...]] = []

    def run() -> tuple[Transcript, Iterator[Event]]:
        transcript = Transcript("pld", list(trace.prompt_ids), Detokenizer(lm.tokenizer), eos, trace.max_new_tokens)
        lookup = PromptLookup(params.max_ngram_size, params.num_pred_tokens, eos)
        return transcript, speculative(lm.model, transcript, lookup, SamplingParams(), greedy=True,
                                       num_draft_tokens=params.num_pred_tokens)

    seconds = _median_seconds(run, repeats, written, progress, "prompt-lookup run")
    if any(tokens != trace.token_ids for tokens in written):
        return 0.0
    return max(0.0, (seconds - costs.seconds(replayed)) / rounds)


def _median_seconds(run: Callable[[], tuple[Transcript, Iterator[Event]]], repeats: int,
                    written: list[tuple[int, ...]] | None = None, progress: Callable[[str], None] | None = None,
                    what: str = "run") -> float:
    """The median time of ``repeats`` whole runs, each made by ``run`` and consumed to its end; ``written``
    receives each run's tokens; ``progress`` hears each ``what`` as it starts."""
    times = []
    for repeat in range(repeats):
        if progress is not None:
            progress(f"{what} {repeat + 1} of {repeats}")
        transcript, events = run()
        started = time.perf_counter()
        for _event in events:
            pass
        times.append(time.perf_counter() - started)
        if written is not None:
            written.append(tuple(transcript.token_ids))
    return statistics.median(times)
