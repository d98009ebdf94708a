"""Shadow rounds: what a tree drafter's rounds would have kept while plain steps stood in for them.

Where the adaptive policy has stopped drafting trees (a tree's forward costs about two plain steps on a CPU), it
must still notice when drafting would pay again. A probe (a whole tree, verified) costs that forward; for a drafter
whose draft is free to ask (token recycling, lookahead: read from its own tables, no forward), the plain steps
themselves answer for nothing: before a step, the drafter's tree is asked for and kept; each token the steps emit
then walks it down from its root, and where a token is no child of the node reached (or a leaf was reached), the
round it stood in for is over: it would have kept the nodes walked and the target's own token after them.

Drafts read from tables are deterministic, and a deterministic tree is kept exactly as far as the target's own
tokens follow it, under greedy verification and sampling alike (a draw from the target's distribution that is a
child of the node reached is accepted; tests/test_tree_verification.py). So a shadow round keeps what a verified
round would have kept, in distribution, without the forward; only the forward's cost is not measured here.

It knows drafts and token trees; nothing of models, events or the policy (its rounds' kept paths are handed to
``kept``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..drafting.drafters import Draft
from ..token_tree import ROOT, TokenTree


class ShadowRounds:
    """``propose()``: the drafter's draft for the context as it is now; ``kept(path)``: a shadow round is over, and
    would have kept the nodes ``path`` of its draft, then emitted the target's token after them."""

    def __init__(self, propose: Callable[[], Draft], kept: Callable[[Sequence[int]], None]) -> None:
        """A stretch of plain steps starts: the round that stands in for its first steps is drafted from the context
        as it is now. (One a stretch: real rounds come between two.)"""
        self.propose = propose
        self.kept = kept
        self.tree: TokenTree | None = None  # the open round's draft
        self.copy: Draft | None = None  # a copy retrieved instead of a tree, for the context as it is now
        self.node = ROOT  # how far down it the tokens since have walked
        self.bonus = False  # the open round reached a leaf: the next token is its bonus token
        self._open(propose())

    def seen(self, token: int) -> None:
        """A token the plain steps emitted: the open round walks down to it or is over; then, with none open, the
        next round's draft is asked for from the context that now ends with it."""
        self.copy = None  # drafted for a shorter context
        if self.bonus:  # the token after a leaf, the round's own (counted when the leaf was reached)
            self.bonus = False
        elif (tree := self.tree) is not None:
            child = tree.child(self.node, token)
            if child is None:  # the target's own token ends the round
                self._over()
            else:
                self.node = child
                if not tree.children(child):  # a leaf
                    self._over()
                    self.bonus = True
                    return
        if self.tree is None:
            self._open(self.propose())

    def retrieved(self) -> Draft:
        """The copy the drafter retrieved instead of a tree after the last token, if it did (the loop verifies it:
        :func:`~.rounds.plain_stretch`'s look), else an empty draft."""
        copy, self.copy = self.copy, None
        return copy or Draft([])

    def _open(self, draft: Draft) -> None:
        if draft.retrieved:
            self.copy = draft  # no round of the tree stands in for a copy
            return
        if not draft.token_ids or draft.unranked:
            return  # no tree to draft here (at most what rides on one): no round stands in for this step
        self.tree = draft.token_tree()
        self.node = ROOT

    def _over(self) -> None:
        assert self.tree is not None
        self.kept(self.tree.path_to(self.node))
        self.tree = None
