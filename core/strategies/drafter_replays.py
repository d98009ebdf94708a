"""What the adaptive draft length needs to know of the drafter: whether it stops its drafts itself, and, for a
copying drafter, an exact replay of the run so far under every fixed draft length.

Prompt lookup's chains and suffix drafting copy from the text, so what they would have drafted at any draft length
is a pure function of the text: :mod:`~decode_tui.core.analysis.whatif` replays it exactly (``LookupMemo``,
``SuffixMemo``), and the policy (:mod:`.adaptive`) prices each length by the widths it would have fed. A draft
model's drafts cannot be replayed free, and prompt lookup's trees would cost a lookup of every match per length:
for them there is no replay, and the policy probes instead.
"""

from __future__ import annotations

from collections.abc import Callable

from ..drafting.drafters import Drafter, ModelDrafter, PromptLookup
from ..drafting.replay import LookupMemo, SuffixMemo, Trace
from ..drafting.suffix_drafting import SuffixDrafter
from ..record.transcript import Transcript
from .adaptive import Replay


def stops_itself(drafter: Drafter) -> bool:
    """Whether the drafter ends a draft where it is unsure of its next token (a draft model with a confidence
    cut-off), so that the adaptive policy need only choose whether to draft."""
    return isinstance(drafter, ModelDrafter) and drafter.confidence_threshold > 0


def drafter_replay(drafter: Drafter, transcript: Transcript) -> Replay | None:
    """What a fixed draft length k would have fed the target so far, for a copying drafter (see the module's
    docstring); None where there is no free replay."""
    memo: LookupMemo | SuffixMemo | None = None
    settings: Callable[[], tuple[int, int]]
    make: Callable[[], LookupMemo | SuffixMemo]
    if isinstance(drafter, SuffixDrafter):
        settings = lambda: (drafter.num_pred_tokens, drafter.tree_budget)  # noqa: E731
        make = lambda: SuffixMemo(drafter, transcript.eos_token_ids)  # noqa: E731
    elif isinstance(drafter, PromptLookup) and not drafter.tree_budget:
        lookup = drafter
        settings = lambda: (lookup.max_ngram_size, lookup.num_pred_tokens)  # noqa: E731
        make = lambda: LookupMemo(transcript.eos_token_ids, *settings())  # noqa: E731
    else:
        return None

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
