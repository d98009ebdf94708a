"""Drafters: whoever proposes the tokens that the target model then verifies, and the draft they propose.

Every drafter (a draft model, :mod:`.model_drafter`; prompt lookup, suffix drafting, token recycling, lookahead)
shares one protocol, :class:`Drafter`, which says all the verifier (:mod:`decode_tui.core.strategies.speculative`)
needs: no strategy asks which drafter it holds. A drafter proposes a :class:`Draft`, a chain or a token tree, with
what a viewer shows of where it came from. A drafter whose state follows the context (a draft model's KV cache)
keeps it as of a *prefix of the context*: after verification the verifier tells it how long the confirmed prefix
is, and it rolls back to it; one that learns from every forward instead (token recycling's matrix) keeps all.

It knows drafts and the protocol; nothing of acceptance, of the policy or of any one drafter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import torch

from ..token_tree import TokenTree

if TYPE_CHECKING:
    from transformers import Cache, LogitsProcessor

    from ..params import DraftParams
    from ..record.events import Stage, TokenSource
    from ..record.transcript import Transcript


@dataclass(frozen=True)
class Draft:
    """Proposed tokens. ``q`` holds the draft's full distributions ([k, V]) when it sampled from a model.

    A tree of drafts (:mod:`~decode_tui.core.token_tree`) has ``parents``: node i holds ``token_ids[i]`` and
    follows node ``parents[i]`` (-1: the pending token); ``sources`` says where each node was copied from, in
    words a viewer can show. A chain has neither."""

    token_ids: list[int]
    q: torch.Tensor | None = None  # [k, V]; None for a deterministic copy (q is one-hot)
    match: tuple[int, int] | None = None  # lookup: the matched n-gram's span in the context
    copied: tuple[int, int] | None = None  # lookup: the span the draft was copied from
    forwards: int = 0
    q_probs: tuple[float, ...] | None = None  # q_i(d_i) on the host, with q
    stopped: str | None = None  # why fewer than the k asked for were drafted, in words a viewer can show
    parents: tuple[int, ...] | None = None  # a tree's: each node's parent (-1 the root); None for a chain
    sources: tuple[str, ...] | None = None  # a tree's: where each node came from
    # A draft model's: the context tokens it was fed before its first proposal. One or two in a round after a
    # round that drafted; more after plain steps it skipped (a catch-up, which is no draft step's cost), unless
    # it was made from the target, which hands it the keys and values of those instead.
    fed: int | None = None  # None: a drafter that is fed nothing (a copy from the text)
    # What it drafted from, for its view: labelled rows of token ids (lookahead's window levels, recycling's rows).
    rows: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    # Its own state after drafting, in words a viewer shows beside the run's figures (recycling's matrix fill).
    state: str | None = None
    # A ranked drafter's copy of earlier text instead of its tree (recycling's retrieval round): verified whole, never
    # cut to the policy's nodes, and no round of the tree the policy sizes.
    retrieved: bool = False
    # A ranked tree's last nodes that are no part of its ranking (a copy grafted onto recycling's tree): verified where
    # they pay for their width (Draft.cut's ``pinned``), whether or not the policy's cut drops ranked nodes.
    pinned: int = 0
    # How many tokens of the text's end the grafted copy matched (0: no graft, or pinned nodes after no match at all,
    # recycling's commonest tokens): what their chance of paying is kept by.
    graft_match: int = 0

    @property
    def unranked(self) -> bool:
        """Whether every node is pinned: no ranked tree, only what rides on one (a copy, the commonest tokens)."""
        return bool(self.token_ids) and self.pinned == len(self.token_ids)

    @property
    def tree(self) -> TokenTree | None:
        """The draft as a token tree, when it is one."""
        return TokenTree(tuple(self.token_ids), self.parents) if self.parents is not None else None

    def token_tree(self) -> TokenTree:
        """The draft as a token tree, a chain's too (each node under the one before)."""
        return self.tree or TokenTree(tuple(self.token_ids), tuple(range(-1, len(self.token_ids) - 1)))

    def cut(self, nodes: int, pinned: bool = False) -> Draft:
        """The draft's first ``nodes`` nodes: a tree's nodes come parents first, so they are a tree, and a chain
        where they are one; a chain's first tokens. What a drafter that ranks its nodes (``Drafter.ranked``) would
        have drafted with that budget. Its ``pinned`` nodes ride along where ``pinned`` says to keep them, with the
        nodes they hang from, and are dropped where it does not, even where every ranked node is kept: their width
        costs as much beside a whole tree as beside a cut one."""
        ranked = len(self.token_ids) - self.pinned
        if nodes >= ranked and (pinned or not self.pinned):
            return self
        nodes = min(nodes, ranked)
        if pinned and self.pinned:
            tree, first = self.token_tree(), len(self.token_ids) - self.pinned
            keep = set(range(nodes)) | self._pinned_paths(tree)
            cut, old = tree.kept([i in keep for i in range(len(self.token_ids))])
            return replace(self, token_ids=list(cut.tokens), parents=None if cut.is_chain() else cut.parents,
                           sources=tuple(self.sources[i] for i in old) if self.sources is not None else None,
                           pinned=sum(i >= first for i in old))
        q, q_probs = self.q[:nodes] if self.q is not None else None, self.q_probs[:nodes] if self.q_probs else None
        sources = self.sources[:nodes] if self.sources is not None else None
        parents = self.parents[:nodes] if self.parents is not None else None
        if parents is not None and all(parent == i - 1 for i, parent in enumerate(parents)):
            parents = None
        return replace(self, token_ids=self.token_ids[:nodes], q=q, q_probs=q_probs, sources=sources, parents=parents,
                       pinned=0, graft_match=0)

    def within(self, budget: int) -> Draft:
        """The draft cut to ``budget`` nodes (one verification's width): its pinned nodes whole, with the nodes they
        hang from, then as many of its ranked nodes, in their order, as there is room for (:meth:`cut`)."""
        if len(self.token_ids) <= budget:
            return self
        ranked, path = len(self.token_ids) - self.pinned, self._pinned_paths(self.token_tree())
        room, nodes = budget - len(path), 0
        for node in range(ranked):
            if node not in path:
                if room <= 0:
                    break
                room -= 1
            nodes = node + 1
        return self.cut(nodes, pinned=True)

    def _pinned_paths(self, tree: TokenTree) -> set[int]:
        """The pinned nodes and every node they hang from, in ``tree`` (this draft's)."""
        ranked = len(self.token_ids) - self.pinned
        return {node for pinned in range(ranked, len(self.token_ids)) for node in tree.path_to(pinned)}

    def first_branch(self) -> Draft:
        """A tree draft's first branch (the first child at every node) as a chain: what a verifier that takes
        chains only (one under a grammar) verifies. A copying drafter's first branch is the chain it would
        have drafted."""
        tree = self.tree
        if tree is None:
            return self
        return replace(self, token_ids=[tree.tokens[node] for node in tree.first_branch()], parents=None,
                       sources=None)


Replay = Callable[[int], tuple[int, ...]]  # k -> the widths of the forwards a fixed k would have used so far


class Drafter(Protocol):
    """All that the verifier (:mod:`decode_tui.core.strategies.speculative`) needs of a drafter: no strategy asks
    which drafter it holds."""

    kind: str  # who drafts, as its mode's DrafterSpec.kind says and ``draft_proposed.drafter`` shows it
    source: TokenSource  # what its tokens are called once kept: its DrafterSpec.source, ``draft`` or ``lookup``
    # The most nodes a draft tree may have (one verification's width); 0: this drafter drafts chains.
    tree_budget: int
    # It learns from the target's logits (token recycling): the verifier hands it every forward's, through
    # observed, the prompt's positions' too.
    learns: bool

    @property
    def free_to_ask(self) -> bool:
        """Asking it for a draft runs no forward (it copies from the text): a stretch of plain steps may ask at every
        step, and it has no cost c to time against a target step."""
        ...

    @property
    def ranked(self) -> bool:
        """Its tree's nodes come best first (token recycling grows its template best-first): the first n of them are
        the tree it would draft with a budget of n, so the adaptive policy may verify only as many as pay on this
        device (:meth:`Draft.cut`)."""
        ...

    @property
    def stops_itself(self) -> bool:
        """It ends a draft where it is unsure of its next token, so the adaptive policy need only choose whether to
        draft (a draft model with a confidence cut-off)."""
        ...

    def propose(self, context: list[int], k: int, processors: list[tuple[Stage, LogitsProcessor]], greedy: bool,
                generator: torch.Generator | None) -> Draft:
        """Up to ``k`` tokens that might follow ``context`` (possibly none)."""
        ...

    def rollback(self, confirmed: int) -> None:
        """Forget everything after the first ``confirmed`` context tokens."""
        ...

    def observed(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        """Where it ``learns``: the target read ``tokens`` and gave ``logits`` [n, V] after each (the prompt's
        positions at the prefill, every verification's fed tokens, every plain step's pending one)."""
        ...

    def prefilled(self, context: list[int], cache: Cache) -> None:
        """The target has just put the keys and values of ``context`` in ``cache``; a drafter may copy what it can
        use of them (it must copy: the target's cache moves on)."""
        ...

    def draft_length(self, params: DraftParams) -> int:
        """The most tokens a round drafts under ``params`` (:meth:`~decode_tui.core.params.DraftParams.length`)."""
        ...

    def tune(self, params: DraftParams) -> None:
        """Take new settings between rounds (a front end changed them mid-run)."""
        ...

    def replay(self, transcript: Transcript) -> Replay | None:
        """What each fixed draft length would have fed the target so far in this run, computed exactly from the
        text (:mod:`.replay`), for the adaptive policy; None where drafting cannot be replayed for free (a draft
        model's drafts, prompt lookup's trees): the policy probes instead."""
        ...

    def time_step(self, context: list[int], processors: list[tuple[Stage, LogitsProcessor]]) -> float:
        """A draft step's seconds, before the first round (0 where drafting runs no forward)."""
        ...

    def close(self) -> None:
        """The run is over: give back what it holds for the run (a pooled cache)."""
        ...
