"""Prompt lookup, every match: what followed each earlier occurrence of the context's last n-gram, merged into
one draft tree.

Prompt lookup decoding (Saxena, 2023; transformers' ``PromptLookupCandidateGenerator``) copies the continuation
of the first earlier occurrence of the context's last n-gram, the longest n-gram that occurs. Where the n-gram
occurred several times, with different continuations, a chain keeps the first and throws the others away; a tree
(:mod:`~decode_tui.core.token_tree`) keeps them all, continuations that start alike sharing their nodes, and one
verification tries every one. The first match's continuation is the tree's first branch, so the tree holds the
chain prompt lookup would have drafted.

It knows token ids and the lookup's settings; nothing of models or verification.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .token_tree import TokenTree


@dataclass(frozen=True)
class LookupTree:
    """The draft tree, the matched n-gram's length, and for each node the match (its start in the context) whose
    continuation first put it there."""

    tree: TokenTree
    ngram: int
    sources: tuple[int, ...]


def lookup_tree(context: Sequence[int], max_ngram_size: int, num_pred_tokens: int, budget: int,
                eos_token_ids: frozenset[int] = frozenset()) -> LookupTree:
    """Every continuation of the longest n-gram (up to ``max_ngram_size``) ending ``context`` that occurred before,
    each up to ``num_pred_tokens`` long and cut before an end-of-text token, merged into a tree of at most
    ``budget`` nodes, matches taken left to right. An empty tree where no n-gram of the context's end occurred
    before."""
    n = len(context)
    for size in range(min(max_ngram_size, n - 1), 0, -1):
        tail = list(context[n - size :])
        chains: list[list[int]] = []
        starts: list[int] = []
        for start in range(n - size):  # the tail's own window has nothing after it: it never matches itself
            if list(context[start : start + size]) != tail:
                continue
            chain = list(context[start + size : min(start + size + num_pred_tokens, n)])
            for i, token in enumerate(chain):
                if token in eos_token_ids:  # the target decides itself whether to end
                    chain = chain[:i]
                    break
            if chain:
                chains.append(chain)
                starts.append(start)
        if chains:
            return _merged(chains, starts, size, budget)
    return LookupTree(TokenTree((), ()), 0, ())


def _merged(chains: list[list[int]], starts: list[int], ngram: int, budget: int) -> LookupTree:
    """The trie of the chains, in order, keeping the first ``budget`` nodes it makes (a parent is always made
    before its children, so the nodes kept form a tree)."""
    tokens: list[int] = []
    parents: list[int] = []
    sources: list[int] = []
    child: dict[tuple[int, int], int] = {}
    for chain, start in zip(chains, starts, strict=True):
        parent = -1
        for token in chain:
            node = child.get((parent, token))
            if node is None:
                if len(tokens) >= budget:
                    break
                node = child[(parent, token)] = len(tokens)
                tokens.append(token)
                parents.append(parent)
                sources.append(start)
            parent = node
    return LookupTree(TokenTree(tuple(tokens), tuple(parents)), ngram, tuple(sources))
