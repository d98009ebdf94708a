"""One verification, a chain's or a token tree's: the target's forward over the draft, the acceptance test, and
the end of the run where an accepted token ends it. One result type for both.

A chain ``[d_1 .. d_k]`` is fed after the pending token and tested position by position (:mod:`.acceptance`); a
tree is fed with its attention mask and the target's choice followed down it (:mod:`.tree_acceptance`), and its
kept path is then the round's chain. An accepted token that ends the run (an EOS, or the last token
``max_new_tokens`` allows) ends the round there: what was drafted after it never reaches the output, so it gets
no verdict, no count and no extra token after it.

It knows the acceptance rules and the target's forwards (through :class:`~decode_tui.core.execution.target.Target`);
nothing of drafters, events' order or the round's bookkeeping.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

import torch

from ..choosing.grammar import GrammarMask
from ..drafting.drafters import Draft
from ..execution.target import Target
from ..record.events import PositionVerdict
from ..record.transcript import TokenStats, Transcript
from .acceptance import accept, distributions, run_ends_after
from .tree_acceptance import accept_tree, tree_distributions, untested_after

if TYPE_CHECKING:
    from transformers import LogitsProcessor

    from ..record.events import Stage


class Verified(NamedTuple):
    """What the target kept of one round's draft."""

    kept: list[int]  # the tokens it could keep, in order: a chain's drafts, or a tree's accepted path
    n: int  # how many of them it accepted
    extra: int | None  # its own token after them; None where an accepted token ended the run
    kind: Literal["target", "resampled", "bonus"] | None  # how the extra token was chosen
    verdicts: tuple[PositionVerdict, ...]  # a chain's per position, a tree's per node
    figures: list[TokenStats] | None  # the emitted tokens' figures under the target's raw distribution
    nodes: list[int] | None  # a tree's accepted path, by node; None for a chain
    depth: int  # the positions the acceptance by position counts: a chain's verdicts, a tree's depth
    fed: list[int]  # the tokens fed after the pending one: a chain's drafts, a tree's nodes in order
    raw: torch.Tensor  # [1 + len(fed), V] the target's raw logits after the pending token and each fed one


def verify(target: Target, transcript: Transcript, context: list[int], draft: Draft, drafted: list[int],
           processors: list[tuple[Stage, LogitsProcessor]], greedy: bool, generator: torch.Generator | None,
           vocab: slice, num_draft_tokens: int, grammar: GrammarMask | None) -> Verified:
    """Verify ``drafted`` (a chain's tokens; all of a tree's nodes where ``draft`` is a tree) after ``context``."""
    tree = draft.tree
    if tree is not None:
        # One forward over the pending token and every node gives each node's p; the target's choice is followed
        # down the tree, and the accepted path is the round's chain from here on.
        raw = target.verify_tree(context, tree)  # [1+n, V]
        p = tree_distributions(processors, context, tree, raw[:, vocab])  # [1+n, V]
        nodes, extra, kind, verdicts, figures = accept_tree(p, tree, greedy, generator, raw, draft.q_probs)
        n, kept, depth, fed = len(nodes), [tree.tokens[i] for i in nodes], tree.depth, list(tree.tokens)
    else:
        # One target forward over [pending, d_1 .. d_k] gives p_1 .. p_{k+1}; then the test, position by position.
        raw = target.verify_chain(context, drafted, num_draft_tokens)  # [k+1, V]
        if grammar is not None:  # on a GPU, while the forward runs
            grammar.prepare(context[grammar.prompt_length :], raw.device, drafted)
        p = distributions(processors, context, drafted, raw[:, vocab])  # [k+1, V]
        n, extra, kind, verdicts, figures = accept(p, draft.q, drafted, greedy, generator, raw)
        nodes, kept, depth, fed = None, drafted, len(verdicts), drafted
    end = run_ends_after(kept[:n], transcript.eos_token_ids, transcript.remaining)
    if end is None:
        return Verified(kept, n, extra, kind, verdicts, figures, nodes, depth, fed, raw[: 1 + len(fed)])
    verdicts = verdicts[:end] if nodes is None else untested_after(verdicts, nodes, end)
    depth = len(verdicts) if nodes is None else depth
    return Verified(kept, end, None, None, verdicts, figures, nodes[:end] if nodes is not None else None, depth, fed,
                    raw[: 1 + len(fed)])
