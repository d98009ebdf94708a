"""Prompt lookup decoding (Saxena 2023): copy what followed the last n-gram of the text the previous time it
appeared; with a tree budget, every earlier match's continuation merged into a token tree.

Its drafts are a pure function of the text, so what any draft length would have fed the target is replayed
exactly (:class:`LookupMemo`, for the adaptive draft length; :func:`replay_lookup`, for the what-if tables).

It knows the text as token ids; nothing of models, forwards or verification.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..errors import UsageError
from .drafters import Draft, Replay
from .lookup_tree import copies, lookup_tree
from .replay import Replayed, Trace, replay_drafter, replay_so_far, replay_widths

if TYPE_CHECKING:
    from collections.abc import Sequence

    from transformers import Cache, LogitsProcessor

    from ..params import DraftParams
    from ..record.events import Stage, TokenSource
    from ..record.transcript import Transcript


class PromptLookup:
    """Prompt lookup decoding: copy what followed the last n-gram the previous time it appeared."""

    kind = "lookup"
    source: TokenSource = "lookup"
    free_to_ask = True
    stops_itself = False
    ranked = False  # its tree merges the matches in the text's order
    learns = False

    def __init__(self, max_ngram_size: int = 3, num_pred_tokens: int = 10,
                 eos_token_ids: frozenset[int] = frozenset(), tree_budget: int = 0) -> None:
        if max_ngram_size < 1 or num_pred_tokens < 1:
            raise UsageError("--max-ngram-size and --num-pred-tokens must be at least 1.")
        self.max_ngram_size = max_ngram_size
        self.num_pred_tokens = num_pred_tokens
        self.eos_token_ids = eos_token_ids
        # Above 0: every earlier match's continuation, merged into a tree of at most this many nodes
        # (core/drafting/lookup_tree.py), instead of the first match's alone.
        self.tree_budget = tree_budget

    def propose(self, context: list[int], k: int, processors: list[tuple[Stage, LogitsProcessor]], greedy: bool,
                generator: torch.Generator | None) -> Draft:
        k = min(k, self.num_pred_tokens)
        if self.tree_budget > 0 and k > 0:
            found = lookup_tree(context, self.max_ngram_size, k, self.tree_budget, self.eos_token_ids)
            if found.tree.tokens and not found.tree.is_chain():
                start, size = found.sources[0], found.ngram
                first = len(Draft(list(found.tree.tokens), parents=found.tree.parents).first_branch().token_ids)
                return Draft(list(found.tree.tokens), None, (start, start + size), (start + size, start + size + first),
                             parents=found.tree.parents,
                             sources=tuple(f"the match at {s}" for s in found.sources))
            # One match, or every match alike: the chain below is the whole tree, verified the chain's way.
        copy = next(copies(context, self.max_ngram_size, k, self.eos_token_ids), None)  # the first match's
        if copy is not None:
            begin = copy.start + copy.size
            return Draft(copy.tokens, None, (copy.start, begin), (begin, begin + len(copy.tokens)),
                         stopped=copy.stopped)
        return Draft([], stopped="no n-gram of the text's end appears earlier")

    def rollback(self, confirmed: int) -> None:
        pass  # no state: the context is the whole memory

    def observed(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        pass  # it learns nothing from the target

    def prefilled(self, context: list[int], cache: Cache) -> None:
        pass

    def replay(self, transcript: Transcript) -> Replay | None:
        if self.tree_budget:  # a lookup of every match per length would cost what drafting saves
            return None
        return replay_so_far(transcript, lambda: LookupMemo(transcript.eos_token_ids, self.max_ngram_size,
                                                            self.num_pred_tokens),
                             lambda: (self.max_ngram_size, self.num_pred_tokens))

    def draft_length(self, params: DraftParams) -> int:
        return params.length("num_pred_tokens")

    def time_step(self, context: list[int], processors: list[tuple[Stage, LogitsProcessor]]) -> float:
        return 0.0  # a copy runs no forward

    def tune(self, params: DraftParams) -> None:
        self.max_ngram_size = params.max_ngram_size
        self.num_pred_tokens = params.num_pred_tokens
        self.tree_budget = params.tree_budget or 0

    def close(self) -> None:
        pass


class LookupMemo:
    """:func:`replay_lookup`'s widths for every k, its lookups kept from call to call.

    A lookup with a shorter k finds the same n-gram and copies a prefix of the same tokens, so the replays of
    one text under every k, and of the same text grown longer, can share one lookup per position: each position's
    longest copy is looked up once and cut to what a replay asks. The adaptive draft length replays eleven
    lengths every few rounds, which without this took 4 % of a run. Positions are known by the context's length,
    so a memo serves one text as it grows (one run); other lookup settings need another memo.
    """

    def __init__(self, eos_token_ids: frozenset[int], max_ngram_size: int, num_pred_tokens: int) -> None:
        self.eos_token_ids = eos_token_ids
        self.lookup = PromptLookup(max_ngram_size, num_pred_tokens, eos_token_ids)
        self.settings = (max_ngram_size, num_pred_tokens)
        self.copies: dict[int, list[int]] = {}  # context length -> the longest copy found there

    def widths(self, trace: Trace, k: int) -> tuple[int, ...]:
        """The widths of the target's forwards greedy PLD with draft length ``k`` would have used on ``trace``."""
        def propose(context: list[int], _emitted: int, room: int) -> list[int]:
            if len(context) not in self.copies:
                self.copies[len(context)] = self.lookup.propose(context, self.lookup.num_pred_tokens, [], True,
                                                                None).token_ids
            return self.copies[len(context)][:room]

        return tuple(replay_widths(trace, self.eos_token_ids, min(k, self.lookup.num_pred_tokens), propose)[1])


def replay_lookup(trace: Trace, eos_token_ids: frozenset[int], max_ngram_size: int,
                  num_pred_tokens: int) -> Replayed:
    """Greedy PLD with these settings on the trace (its lookups timed as they run: they are part of its cost)."""
    return replay_drafter(trace, eos_token_ids, PromptLookup(max_ngram_size, num_pred_tokens, eos_token_ids),
                          num_pred_tokens, name="pld", max_ngram_size=max_ngram_size)
