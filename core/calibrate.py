"""What a real run's verifying round costs beyond what :mod:`decode_tui.core.whatif`'s measured forwards price.

A what-if prices each target forward with its measured time and the decoding loop's work per step. A verifying
round does more: the acceptance test over k + 1 rows, the draft's events, several tokens emitted at once. Left
out, the estimates came out optimistic (2.0x where ``bench`` measured 1.68x on the prompt-lookup demo). This runs
the real prompt-lookup loop once on the trace's prompt, and shares what the estimate does not explain among its
verifying rounds. A module of its own: it needs both the what-if and the verifier, and the verifier already
imports the what-if (for the adaptive draft length's replays).

It knows how to time a run; it decides nothing about which setting is best.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

from .detokenize import Detokenizer
from .drafters import PromptLookup
from .params import DraftParams, SamplingParams
from .strategies.speculative import speculative
from .transcript import Transcript
from .whatif import Costs, Trace, replay_lookup

if TYPE_CHECKING:
    from .loading import LoadedModel


def round_overhead(lm: LoadedModel, trace: Trace, costs: Costs, repeats: int) -> float:
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
    runs = []
    for _ in range(repeats):
        transcript = Transcript("pld", list(trace.prompt_ids), Detokenizer(lm.tokenizer), eos, trace.max_new_tokens)
        lookup = PromptLookup(params.max_ngram_size, params.num_pred_tokens, eos)
        started = time.perf_counter()
        for _event in speculative(lm.model, transcript, lookup, SamplingParams(), greedy=True,
                                  num_draft_tokens=params.num_pred_tokens):
            pass
        runs.append(time.perf_counter() - started)
        if tuple(transcript.token_ids) != trace.token_ids:
            return 0.0
    return max(0.0, (statistics.median(runs) - costs.seconds(replayed)) / rounds)
