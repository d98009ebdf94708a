"""What-if rows for the drafting modes a trace cannot replay: counted on real runs of the trace's prompt.

A copy (prompt lookup, suffix drafting) is replayed on the trace's tokens alone, and a draft model's drafts by
running the draft model (:mod:`~decode_tui.core.drafting.replay`). Other drafters draft from what the target
computed off the trace's path: token recycling's matrix takes every tree node's guesses, rejected ones included, and
lookahead's window the target's argmax at each of its columns. A trace holds only the path. So each such mode (in
``core/modes.py``: a drafter that neither copies nor runs a draft model) is run here: greedy, drafting every round
(no adaptive policy), from a cold start and writing nothing back, for the trace's new tokens. Greedy verification
writes the trace's tokens again, so its forwards and their widths are exact, as a replay's are; where the numerics
differ (a trace from another machine) it says so and gives no row.

It knows how to run a mode for its counts; pricing them is :mod:`.whatif`'s, and it does not time anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..drafting.context import DraftingContext, builder
from ..drafting.replay import Replayed, Trace
from ..drafting.suffix_drafting import SuffixHistory
from ..modes import MODE_SPECS
from ..params import DraftParams, SamplingParams
from ..record.detokenize import Detokenizer
from ..record.events import DraftVerified, Finished
from ..record.transcript import Transcript
from ..strategies.speculative import speculative

if TYPE_CHECKING:
    from ..model.loading import LoadedModel


def unreplayable() -> tuple[str, ...]:
    """The drafting modes whose drafts a trace cannot replay, in the registry's order."""
    return tuple(name for name, spec in MODE_SPECS.items()
                 if spec.drafter is not None and not spec.drafter.copies and not spec.drafter.draft_model)


def counted(lm: LoadedModel, trace: Trace, mode: str, tree_budget: int,
            say: Callable[[str], None] = lambda _line: None) -> Replayed | None:
    """``mode`` run greedy on ``trace``'s prompt at ``tree_budget`` nodes a verification: its target forwards and
    their widths, as a :class:`Replayed` named after the mode; None (said through ``say``) where the run wrote other
    tokens than the trace."""
    eos = trace.eos_token_ids or lm.eos_token_ids
    params = DraftParams(cold=True, recycle_keep=False, tree_budget=tree_budget)
    transcript = Transcript(mode, list(trace.prompt_ids), Detokenizer(lm.tokenizer), eos, trace.max_new_tokens)
    drafter = builder(mode)(DraftingContext(lm=lm, params=params, eos_token_ids=eos,
                                            prompt_length=len(trace.prompt_ids), tree_budget=tree_budget, draft=None,
                                            history=SuffixHistory()))
    widths: list[int] = []
    drafted = accepted = 0
    finished = None
    # Greedy keeps one processor of the recorded run's: its repetition penalty (replay.py's drafters apply it too).
    sampling = SamplingParams(repetition_penalty=float(trace.params.get("repetition_penalty", 1.0)))
    for event in speculative(lm.model, transcript, drafter, sampling, greedy=True,
                             num_draft_tokens=drafter.draft_length(params)):
        if isinstance(event, DraftVerified):
            widths.append(len(event.verdicts) + 1)  # the pending token, then every drafted node
            drafted += len(event.verdicts)
            accepted += event.accepted
        elif isinstance(event, Finished):
            finished = event
    assert finished is not None
    if tuple(finished.token_ids) != trace.token_ids[: min(trace.max_new_tokens, len(trace.token_ids))]:
        say(f"--mode {mode} wrote other tokens than the trace here (another machine's numerics?): no row for it")
        return None
    # Every forward after the prefill that verified nothing was a plain step.
    plain = finished.target_forwards - 1 - len(widths)
    return Replayed(mode, None, drafter.draft_length(params), finished.target_forwards, (*widths, *(1,) * plain),
                    drafted, accepted, tree_budget=tree_budget)
