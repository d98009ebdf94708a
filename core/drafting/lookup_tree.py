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

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..token_tree import TokenTree


@dataclass(frozen=True)
class LookupTree:
    """The draft tree, the matched n-gram's length, and for each node the match (its start in the context) whose
    continuation first put it there."""

    tree: TokenTree
    ngram: int
    sources: tuple[int, ...]


@dataclass(frozen=True)
class Copy:
    """One earlier occurrence of the context's last n-gram and what followed it."""

    start: int  # where the n-gram occurred
    size: int  # the n-gram's length
    tokens: list[int]  # what followed it, at most the draft length, cut before an end-of-text token
    stopped: str | None  # why it is shorter than the draft length, in words (None: it is not)


def continuation(context: Sequence[int], begin: int, num_pred_tokens: int,
                 eos_token_ids: frozenset[int] = frozenset()) -> tuple[list[int], str | None]:
    """A copy's tokens: up to ``num_pred_tokens`` of ``context`` from ``begin``, cut before an end-of-text token (the
    target decides itself whether to end), and why it is shorter than that, in words (None: it is not)."""
    chain = list(context[begin : begin + num_pred_tokens])
    stopped = "the copy reached the end of the text" if len(chain) < num_pred_tokens else None
    for i, token in enumerate(chain):
        if token in eos_token_ids:
            return chain[:i], "an end-of-text token in the copy"
    return chain, stopped


def copies(context: Sequence[int], max_ngram_size: int, num_pred_tokens: int,
           eos_token_ids: frozenset[int] = frozenset()) -> Iterator[Copy]:
    """Prompt lookup's scan: the earlier occurrences of the longest n-gram (up to ``max_ngram_size``) ending
    ``context`` that is followed by anything, left to right, each with what followed it. Lazy: a chain takes the
    first and the scan stops there; a tree takes them all (only that n-gram's)."""
    n = len(context)
    for size in range(min(max_ngram_size, n - 1), 0, -1):
        tail = list(context[n - size :])
        found = False
        for start in range(n - size):  # the tail's own window has nothing after it: it never matches itself
            if list(context[start : start + size]) != tail:
                continue
            chain, stopped = continuation(context, start + size, num_pred_tokens, eos_token_ids)
            if chain:
                found = True
                yield Copy(start, size, chain, stopped)
        if found:
            return


def lookup_tree(context: Sequence[int], max_ngram_size: int, num_pred_tokens: int, budget: int,
                eos_token_ids: frozenset[int] = frozenset()) -> LookupTree:
    """Every continuation of the longest n-gram (up to ``max_ngram_size``) ending ``context`` that occurred before,
    each up to ``num_pred_tokens`` long and cut before an end-of-text token, merged into a tree of at most
    ``budget`` nodes, matches taken left to right. An empty tree where no n-gram of the context's end occurred
    before."""
    found = list(copies(context, max_ngram_size, num_pred_tokens, eos_token_ids))
    if not found:
        return LookupTree(TokenTree((), ()), 0, ())
    return _merged([c.tokens for c in found], [c.start for c in found], found[0].size, budget)


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
