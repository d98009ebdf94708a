"""Suffix trees over token sequences, and the draft trees SuffixDecoding grows from them (Oliaro et al., 2024,
arXiv 2411.04975).

A :class:`SuffixTree` holds every substring of up to ``max_depth`` tokens of the sequences put in it, each node
counting how often its string occurred. SuffixDecoding keeps two: one over this run's prompt and output, grown a
token at a time, and one over earlier outputs (earlier runs of the session, files the user names). To draft, it
finds the longest suffix of the context (its last tokens, the *pattern*) that the tree holds, and from the node
where the pattern ends grows a tree of likely continuations, best first by the estimated probability of each
node (a child's count over its parent's, multiplied down the path), as many nodes as ``max_spec_factor`` times
the pattern's length allows (a longer match earns a bigger draft), leaving out nodes under ``min_token_prob``.
The draft's score, the sum of its nodes' probabilities, is the number of tokens it expects accepted: of the two
trees' drafts the higher score is proposed.

This is a depth-bounded suffix trie rather than a compressed suffix tree (Ukkonen's): a node a token, which keeps
the code short and the counts plain, at ``max_depth`` nodes per token put in (24 by default, as the paper's
``max_tree_depth``). Written by hand: no maintained Python suffix-tree library fits (ArcticInference's builds
against an old torch pin). It knows token ids and counts; nothing of models, verification or events.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..token_tree import ROOT, TokenTree

MAX_DEPTH = 24  # the paper's max_tree_depth: the longest pattern matched, and the deepest draft
MAX_SPEC_FACTOR = 1.0  # draft nodes per matched pattern token
MIN_TOKEN_PROB = 0.1  # a node whose estimated probability is lower is not drafted


@dataclass
class _Node:
    count: int = 0
    children: dict[int, _Node] = field(default_factory=dict)


@dataclass(frozen=True)
class Speculation:
    """A draft tree grown from a suffix tree: its nodes, each node's estimated probability, how long the matched
    pattern was, and the score (the expected number of accepted tokens)."""

    tree: TokenTree
    probs: tuple[float, ...]
    match_length: int

    @property
    def score(self) -> float:
        return sum(self.probs)


class SuffixTree:
    """Every substring of up to ``max_depth`` tokens of the sequences added, counted."""

    def __init__(self, max_depth: int = MAX_DEPTH) -> None:
        if max_depth < 1:
            raise ValueError("a suffix tree needs a depth of at least 1")
        self.max_depth = max_depth
        self.root = _Node()
        self._open: dict[int, list[_Node]] = {}  # per sequence: the nodes its suffixes still growing end at

    def extend(self, sequence: int, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to sequence ``sequence`` (a new one if unseen): every suffix of it ending at each new
        token, up to ``max_depth`` long, is counted once more."""
        open_nodes = self._open.setdefault(sequence, [])
        for token in tokens:
            grown = []
            # The suffixes that end here: each earlier open one extended by the token, and the token alone.
            for node in [*open_nodes, self.root]:
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = _Node()
                child.count += 1
                grown.append(child)
            # A suffix of max_depth tokens is done growing (the oldest, first in the list).
            open_nodes[:] = grown[-(self.max_depth - 1) :] if self.max_depth > 1 else []

    def add(self, tokens: Sequence[int]) -> None:
        """Add a whole sequence (an earlier output, a file's tokens)."""
        self.extend(-1 - len(self._open), tokens)

    def count(self, tokens: Sequence[int]) -> int:
        """How many times ``tokens`` occurred (0 if never, or longer than ``max_depth``)."""
        node = self._find(tokens)
        return node.count if node is not None else 0

    def _find(self, tokens: Sequence[int]) -> _Node | None:
        node = self.root
        for token in tokens:
            next_node = node.children.get(token)
            if next_node is None:
                return None
            node = next_node
        return node

    def speculate(self, context: Sequence[int], max_tokens: int, max_spec_factor: float = MAX_SPEC_FACTOR,
                  min_token_prob: float = MIN_TOKEN_PROB) -> Speculation:
        """The draft tree for what follows ``context``: for each suffix of it the tree holds (with something after
        it), the likeliest continuations best first, at most ``max_spec_factor`` times the pattern's length and
        ``max_tokens`` nodes; of these the one with the highest score (the longer pattern on a tie), as
        ArcticInference's implementation of the paper chooses. The longest match alone would not do in a
        depth-bounded tree: a pattern of ``max_depth - 1`` tokens leaves room for one token after it. An empty
        tree where no suffix matches."""
        best = Speculation(TokenTree((), ()), (), 0)
        for length in range(min(self.max_depth - 1, len(context)), 0, -1):
            node = self._find(context[len(context) - length :])
            if node is None:  # no longer suffix can be held once a shorter one is not: keep shortening anyway
                continue
            if node.children:
                budget = min(max_tokens, int(max_spec_factor * length))
                found = self._grow(node, budget, min_token_prob, length)
                if found.score > best.score:
                    best = found
        return best

    def _grow(self, start: _Node, budget: int, min_token_prob: float, length: int) -> Speculation:
        """Best-first expansion by path probability: a node is drafted before any of lower probability, and its
        parent always before it (its probability is at most its parent's)."""
        tokens: list[int] = []
        parents: list[int] = []
        probs: list[float] = []
        order = 0  # ties broken by the order nodes were met: deterministic
        frontier: list[tuple[float, int, int, int, _Node]] = []  # (-prob, order, parent index, token, node)

        def offer(parent_node: _Node, parent_index: int, parent_prob: float) -> None:
            nonlocal order
            total = sum(child.count for child in parent_node.children.values())
            for token, child in sorted(parent_node.children.items()):  # ties by token id, as the suffix array
                prob = parent_prob * child.count / total
                if prob >= min_token_prob:
                    heapq.heappush(frontier, (-prob, order, parent_index, token, child))
                    order += 1

        offer(start, ROOT, 1.0)
        while frontier and len(tokens) < budget:
            neg_prob, _, parent_index, token, node = heapq.heappop(frontier)
            tokens.append(token)
            parents.append(parent_index)
            probs.append(-neg_prob)
            offer(node, len(tokens) - 1, -neg_prob)
        return Speculation(TokenTree(tuple(tokens), tuple(parents)), tuple(probs), length)
