"""A suffix array over token ids: the counts of :class:`~decode_tui.core.drafting.suffix_tree.SuffixTree`, and the same
draft trees, for histories too big for a tree of Python objects.

The depth-bounded suffix tree spends a node (a Python object and a dict) on every distinct substring of up to
``max_depth`` tokens: thousands of bytes a token, tens of gigabytes for a 20 MB text. Here the tokens sit in one
int32 array and the suffixes in another, sorted by their first ``max_depth`` tokens (prefix doubling with numpy: a
sort per doubling, five of them for 24 tokens), 8 bytes a token at rest. A string's occurrences are one contiguous
range of the sorted suffixes, found by binary search, so ``count`` is the range's length and a node's children are
the runs of equal next tokens inside it. Only children likely enough to be drafted are looked for: a child of
probability at least ``min_token_prob`` spans at least a known number of suffixes, so probing the range at that
stride finds every one of them in about ten probes, however common the string.

Its answers equal the tree's: the same counts, the same best-first expansion, ties broken the same way (by token
id), checked against it in tests/test_suffix_array.py. Building yields after each stage, so a caller can report
progress and stop it between two. It knows token ids and counts; nothing of models, files or events.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Generator, Sequence

import numpy as np

from ..model.acquire import drive
from ..token_tree import ROOT, TokenTree
from .suffix_tree import MAX_DEPTH, MAX_SPEC_FACTOR, MIN_TOKEN_PROB, Speculation

SEPARATOR = -1  # between two sequences and after the last: no pattern (token ids are >= 0) matches across it


class SuffixArray:
    """The suffixes of some token sequences, sorted by their first ``max_depth`` tokens. Immutable once built:
    :func:`build` makes one."""

    def __init__(self, tokens: np.ndarray, suffixes: np.ndarray, max_depth: int) -> None:
        self.max_depth = max_depth
        self.tokens = tokens  # int32, the sequences each followed by SEPARATOR, then max_depth more of it
        self.suffixes = suffixes  # int32 start positions of every suffix that starts with a token, sorted
        firsts = tokens[suffixes]  # each sorted suffix's first token, ascending
        top = int(firsts[-1]) + 1 if len(firsts) else 0
        # Where each token's suffixes begin: the first step of every search, read off in one lookup.
        self.starts = np.searchsorted(firsts, np.arange(top + 1, dtype=np.int32)).astype(np.int64)
        self._t = tokens.data  # scalar reads of Python ints, for the binary searches past the first token
        self._s = suffixes.data

    def __len__(self) -> int:
        """The tokens held (separators not counted)."""
        return len(self.suffixes)

    @property
    def nbytes(self) -> int:
        return self.tokens.nbytes + self.suffixes.nbytes + self.starts.nbytes

    def _at(self, offset: int) -> _Key:
        return _Key(self._t, self._s, offset)

    def _find(self, tokens: Sequence[int]) -> tuple[int, int]:
        """The range of sorted suffixes that start with ``tokens`` (empty: lo == hi)."""
        first = tokens[0]
        if not 0 <= first < len(self.starts) - 1:
            return 0, 0
        lo, hi = int(self.starts[first]), int(self.starts[first + 1])
        for k in range(1, len(tokens)):
            if lo == hi:
                break
            key = self._at(k)
            lo, hi = bisect.bisect_left(key, tokens[k], lo, hi), bisect.bisect_right(key, tokens[k], lo, hi)
        return lo, hi

    def count(self, tokens: Sequence[int]) -> int:
        """How many times ``tokens`` occurred (0 if never, or longer than ``max_depth``)."""
        if not tokens or len(tokens) > self.max_depth:
            return 0
        lo, hi = self._find(tokens)
        return hi - lo

    def _children(self, lo: int, hi: int, depth: int, parent_prob: float, min_token_prob: float,
                  ) -> tuple[int, list[tuple[int, int, int]]]:
        """The continuations of the string of ``depth`` tokens whose suffixes are ``lo:hi``: how many occurrences
        have one (``total``), and those of probability ``parent_prob * count / total`` at least ``min_token_prob``
        as (token, lo, hi), by token id."""
        if depth >= self.max_depth:
            return 0, []  # the tree holds strings of up to max_depth tokens: nothing below this node
        key = self._at(depth)
        start = bisect.bisect_right(key, SEPARATOR, lo, hi)  # occurrences with nothing after them sort first
        total = hi - start
        if total == 0:
            return 0, []
        # A child likely enough spans at least `need` suffixes, so one of the probes `need` apart lands in it.
        need = max(1, math.floor(min_token_prob * total / parent_prob) if parent_prob > 0 else total)
        found: list[tuple[int, int, int]] = []
        probe = start
        while probe < hi:
            token = key[probe]
            a, b = bisect.bisect_left(key, token, start, probe + 1), bisect.bisect_right(key, token, probe, hi)
            if parent_prob * (b - a) / total >= min_token_prob:
                found.append((token, a, b))
            probe = max(b, probe + need)
        return total, found

    def speculate(self, context: Sequence[int], max_tokens: int, max_spec_factor: float = MAX_SPEC_FACTOR,
                  min_token_prob: float = MIN_TOKEN_PROB) -> Speculation:
        """:meth:`SuffixTree.speculate <decode_tui.core.drafting.suffix_tree.SuffixTree.speculate>`, over the array."""
        ranges: list[tuple[int, int, int]] = []  # (length, lo, hi) of each suffix of the context that occurred
        for length in range(1, min(self.max_depth - 1, len(context)) + 1):
            lo, hi = self._find(context[len(context) - length :])
            if lo == hi:  # a longer suffix holds this one: it cannot have occurred either
                break
            ranges.append((length, lo, hi))
        best = Speculation(TokenTree((), ()), (), 0)
        for length, lo, hi in reversed(ranges):  # the longer pattern first: it keeps a tie
            budget = min(max_tokens, int(max_spec_factor * length))
            found = self._grow(lo, hi, length, budget, min_token_prob)
            if found.score > best.score:
                best = found
        return best

    def _grow(self, lo: int, hi: int, length: int, budget: int, min_token_prob: float) -> Speculation:
        """Best-first expansion by path probability, as the tree's ``_grow``."""
        tokens: list[int] = []
        parents: list[int] = []
        probs: list[float] = []
        order = 0
        frontier: list[tuple[float, int, int, int, int, int, int]] = []  # (-prob, order, parent, token, lo, hi, depth)

        def offer(lo: int, hi: int, depth: int, parent_index: int, parent_prob: float) -> None:
            nonlocal order
            total, children = self._children(lo, hi, depth, parent_prob, min_token_prob)
            for token, a, b in children:
                heapq.heappush(frontier, (-(parent_prob * (b - a) / total), order, parent_index, token, a, b,
                                          depth + 1))
                order += 1

        offer(lo, hi, length, ROOT, 1.0)
        while frontier and len(tokens) < budget:
            neg_prob, _, parent_index, token, a, b, depth = heapq.heappop(frontier)
            tokens.append(token)
            parents.append(parent_index)
            probs.append(-neg_prob)
            offer(a, b, depth, len(tokens) - 1, -neg_prob)
        return Speculation(TokenTree(tuple(tokens), tuple(parents)), tuple(probs), length)


class _Key(Sequence[int]):
    """The sorted suffixes' tokens at one offset, as a sequence ``bisect`` can search."""

    def __init__(self, tokens: memoryview, suffixes: memoryview, offset: int) -> None:
        self.tokens, self.suffixes, self.offset = tokens, suffixes, offset

    def __getitem__(self, i: int) -> int:  # type: ignore[override]
        return int(self.tokens[self.suffixes[i] + self.offset])

    def __len__(self) -> int:
        return len(self.suffixes)


def build(sequences: Sequence[np.ndarray], max_depth: int = MAX_DEPTH) -> Generator[str, None, SuffixArray]:
    """Sort the suffixes of ``sequences`` by their first ``max_depth`` tokens; yields what it is doing before each
    sort (so a caller can say so, or stop it there), returns the array."""
    if max_depth < 1:
        raise ValueError("a suffix array needs a depth of at least 1")
    parts: list[np.ndarray] = []
    for seq in sequences:
        parts += [np.asarray(seq, dtype=np.int32), np.array([SEPARATOR], dtype=np.int32)]
    parts.append(np.full(max_depth, SEPARATOR, dtype=np.int32))
    tokens = np.concatenate(parts)
    n = len(tokens) - max_depth  # suffixes start before the padding
    real = tokens[:n] >= 0
    # Prefix doubling: rank[i] orders the suffix at i by its first h tokens; pairing it with rank[i + h] orders it
    # by 2h. Ranks are dense (np.unique), so the pair fits one int64 key.
    rank = (tokens.astype(np.int64) + 1)  # the separator ranks lowest
    h, rounds = 1, max(1, math.ceil(math.log2(max_depth)))
    for done in range(rounds):
        if h >= max_depth:
            break
        yield f"sorting {int(real.sum()):,} tokens' suffixes ({done + 1} of {rounds})"
        top = int(rank.max()) + 1
        after = np.zeros_like(rank)
        after[: len(rank) - h] = rank[h:]
        _, rank = np.unique(rank * top + after, return_inverse=True)
        rank = rank.astype(np.int64)
        del after
        h *= 2
    order = np.argsort(rank[:n], kind="stable").astype(np.int32)
    suffixes = order[real[order]]
    return SuffixArray(tokens, np.ascontiguousarray(suffixes), max_depth)


def built(sequences: Sequence[np.ndarray], max_depth: int = MAX_DEPTH) -> SuffixArray:
    """:func:`build`, run to its end."""
    return drive(build(sequences, max_depth))
