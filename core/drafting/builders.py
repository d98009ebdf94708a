"""The builders of the shipped drafting modes' drafters, each named by its mode's entry in core/modes.py.

Each takes the run's :class:`~decode_tui.core.drafting.context.DraftingContext` and returns a drafter. A new mode's
builder lives in its own drafter's module; these are here because the shipped drafters' modules predate the
registry's names for them. It knows which drafter class serves which shipped mode, nothing of verifying.
"""

from __future__ import annotations

from .context import DraftingContext
from .drafters import Drafter
from .prompt_lookup import PromptLookup
from .suffix_drafting import SuffixDrafter


def draft_model(ctx: DraftingContext) -> Drafter:
    """speculative: a draft model drafting token by token (the run loaded it: DrafterSpec.draft_model)."""
    if ctx.draft is None:
        raise ValueError("a draft model's drafter needs the draft model: the run loads it for this mode")
    return ctx.draft.drafter(ctx.params.confidence_threshold, ctx.eos_token_ids, ctx.tree_budget)


def prompt_lookup(ctx: DraftingContext) -> Drafter:
    """pld: copies of what followed the context's last n-gram (every earlier match, as a tree, with a budget)."""
    return PromptLookup(ctx.params.max_ngram_size, ctx.params.num_pred_tokens, ctx.eos_token_ids, ctx.tree_budget)


def suffix(ctx: DraftingContext) -> Drafter:
    """suffix: trees of what followed the context's end in this run and in earlier text."""
    return SuffixDrafter(ctx.history, ctx.params.num_pred_tokens, ctx.tree_budget, ctx.eos_token_ids)
