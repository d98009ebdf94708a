"""Lookahead decoding: n-grams harvested from a Jacobi iteration, verified in the same forward.

Fu, Bailis, Stoica and Zhang, "Break the Sequential Dependency of LLM Inference Using Lookahead Decoding" (ICML
2024; reference code: github.com/hao-ai-lab/LookaheadDecoding; llama.cpp's ``examples/lookahead``, whose layout of
one forward this follows). Jacobi decoding guesses the next W tokens at once and refines every guess in parallel:
the guess at position i becomes the target's argmax after the guesses before it. Lookahead keeps the last N - 1
iterations of that window, its *levels*, and reads them as n-grams:

- **lookahead branch**: level j's column i sits i + j positions past the pending token (level 0's column 0 *is*
  the pending token) and reads the pending token, level 0's columns 1 .. i and column i's levels 1 .. j - 1: its
  own trajectory. The target's argmax after each column's last level is the window's next level.
- **n-gram pool**: each column read down its levels, ended by the next level's token, is N consecutive guesses;
  it is kept under its first token, the G newest per token, none twice.
- **verification branch**: the pool's n-grams that start with the pending token (at most G), checked as drafts.

Here the two branches are one token tree rooted at the pending token: level 0 is a chain (the trunk), each
column's higher levels hang off it, and the pool's n-grams are chains from the root, all merged where they agree.
The verifier's tree attention reads it in one forward and its tree acceptance keeps what the target agrees with,
a lookahead guess too: any path of the tree is exact, so greedy stays greedy token for token. The drafts are
deterministic (q one-hot), so sampling keeps the target's distribution through the same acceptance as suffix
trees (the paper's sampling verifies the pool's n-grams one by one, which this verifier does not need).

The window is W x (N - 1) tokens and one forward reads (W - 1) + W (N - 2) + G (N - 1) nodes: where width is dear
(a small CPU) it rarely pays, and the adaptive policy then takes plain steps (BENCHMARKS.md, "Lookahead decoding").

It knows the window, the pool and the Drafter protocol; nothing of verification or acceptance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..params import DraftParams, check_lookahead, lookahead_nodes
from ..token_tree import ROOT
from .drafters import Draft, Drafter

if TYPE_CHECKING:
    from transformers import LogitsProcessor

    from ..record.events import Stage, TokenSource
    from ..record.transcript import Transcript
    from .context import DraftingContext
    from .drafters import Replay


@dataclass(frozen=True)
class Shape:
    """The window (W columns, N - 1 levels, n-grams of N tokens) and how many pool n-grams a forward checks (G)."""

    window: int  # W
    ngram: int  # N
    guesses: int  # G

    @property
    def nodes(self) -> int:
        """The nodes one forward reads at most: level 0's columns past the pending token, the higher levels, and G
        n-grams of N - 1 tokens after the pending one."""
        return lookahead_nodes(self.window, self.ngram, self.guesses)


def shape_for(budget: int) -> Shape:
    """The widest window that fits ``budget`` nodes, with as many guesses as columns (the paper's G = W) where they
    fit: n-grams of 4 from 31 nodes, of 3 from 7, else of 2 (then at least 2 columns: one column of one level
    would be the pending token alone, with no lookahead branch)."""
    ngram = 4 if budget >= 31 else 3 if budget >= 7 else 2
    window = 2 if ngram == 2 else 1
    while Shape(window + 1, ngram, window + 1).nodes <= budget:
        window += 1
    guesses = window
    while guesses and Shape(window, ngram, guesses).nodes > budget:
        guesses -= 1
    return Shape(window, ngram, guesses)


class LookaheadDrafter:
    """Drafts the lookahead and verification branches as one tree, and moves the window on from the target's
    logits after every forward that read it."""

    kind = "lookahead"
    source: TokenSource = "draft"
    free_to_ask = True  # the tree is read from the window and the pool: no forward
    stops_itself = False
    ranked = False  # the window's nodes are all needed for its next level
    learns = True  # the next level is the target's argmax after the last one: read from the verification

    def __init__(self, shape: Shape, eos_token_ids: frozenset[int] = frozenset()) -> None:
        if shape.window < 1 or shape.ngram < 2 or shape.guesses < 0 or shape.window + shape.ngram < 4:
            raise ValueError(f"a lookahead window needs W >= 1, N >= 2, G >= 0 and a node past the pending token "
                             f"(W = 1 needs N >= 3), not {shape}")
        self.shape = shape
        self.tree_budget = shape.nodes
        self.eos_token_ids = eos_token_ids
        # levels[j][i]: level j's guess at column i, i + j positions past the pending token (levels[0][0] stands
        # for the pending token itself). Filled from the context at the first draft.
        self.levels: list[list[int]] = []
        self.anchor = 0  # the context length the window's positions count from
        self.pool: dict[int, list[tuple[int, ...]]] = {}  # first token -> its newest n-grams' other N - 1 tokens
        self.harvested: list[tuple[int, ...]] = []  # the n-grams the last forward that read the window added
        self._read: tuple[tuple[int, ...], list[int]] | None = None  # the last tree's tokens, each column's last node

    def _start(self, context: Sequence[int]) -> None:
        """A window of the context's own last tokens, column by column as they stand: the first harvest then holds
        n-grams of the text (the paper starts from random tokens of the prompt)."""
        w, levels = self.shape.window, self.shape.ngram - 1
        span = [*context[-(w + levels - 1) :]]
        span = (span * (w + levels))[: w + levels - 1] if span else [0] * (w + levels - 1)
        self.levels = [[span[i + j] for i in range(w)] for j in range(levels)]
        self.anchor = len(context)

    def _move_on(self, context: Sequence[int]) -> None:
        """One level down for every token the context gained since the window's positions were counted: level 1
        then guesses what level 0 guessed (llama.cpp's shift; the new top level repeats level 0, as there)."""
        for _ in range(min(len(context) - self.anchor, len(self.levels))):
            self.levels = [*self.levels[1:], list(self.levels[1] if len(self.levels) > 1 else self.levels[0])]
        self.anchor = len(context)

    def propose(self, context: list[int], k: int, processors: list[tuple[Stage, LogitsProcessor]], greedy: bool,
                generator: torch.Generator | None) -> Draft:
        self._read = None
        if k < 1 or not context:
            return Draft([])
        if not self.levels:
            self._start(context)
        self._move_on(context)
        pending = context[-1]
        if pending in self.eos_token_ids:
            return Draft([])
        tokens: list[int] = []
        parents: list[int] = []
        sources: list[str] = []
        depths: list[int] = []
        child: dict[tuple[int, int], int] = {}  # (parent, token) -> node: paths that agree share their nodes

        def add(parent: int, token: int, source: str) -> int | None:
            depth = 1 + (depths[parent] if parent != ROOT else 0)
            if depth > k or (parent != ROOT and tokens[parent] in self.eos_token_ids):
                return None  # deeper than the round may draft, or after an end of text
            node = child.get((parent, token))
            if node is None:
                node = child[(parent, token)] = len(tokens)
                tokens.append(token)
                parents.append(parent)
                sources.append(source)
                depths.append(depth)
            return node

        levels, w = self.levels, self.shape.window
        # The lookahead branch: level 0 from the pending token on, then each column's higher levels.
        trunk: list[int | None] = [ROOT]
        for i in range(1, w):
            above = trunk[-1]
            trunk.append(add(above, levels[0][i], f"Jacobi level 1, position {i}") if above is not None else None)
        last: list[int] = []  # each column's last level's node (ROOT: the pending token), -2 where not fed
        for i in range(w):
            node = trunk[i]
            for j in range(1, len(levels)):
                node = add(node, levels[j][i], f"Jacobi level {j + 1}, position {i + j}") if node is not None else None
            last.append(-2 if node is None else node)
        # The verification branch: the pool's n-grams after the pending token.
        for ngram in self.pool.get(pending, [])[: self.shape.guesses]:
            parent: int | None = ROOT
            for token in ngram:
                parent = add(parent, token, "n-gram from the pool") if parent is not None else None
        if not tokens:
            return Draft([], stopped="the window reaches no further than the pending token")
        self._read = (tuple(tokens), last)
        rows = [(f"level {j + 1}", (pending, *level[1:]) if j == 0 else tuple(level)) for j, level in enumerate(levels)]
        rows += [("harvested", ngram) for ngram in self.harvested]
        return Draft(tokens, parents=tuple(parents), sources=tuple(sources), rows=tuple(rows))

    def observed(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        """After the tree this drafter proposed (``tokens`` = the pending token and its nodes): the next level is
        the target's argmax after each column's last level, and every column becomes an n-gram of the pool."""
        read, self._read = self._read, None
        if read is None or tuple(tokens[1:]) != read[0] or logits.shape[0] != len(tokens):
            return  # a plain step's, the prefill's, or a tree the grammar cut: the window waits
        self.harvested = []
        last = read[1]
        fed = [n for n in last if n != -2]
        top = logits[[1 + n for n in fed]].argmax(-1).tolist() if fed else []  # [fed]: the next level's guesses
        guesses = iter(top)
        new = [next(guesses) if n != -2 else self.levels[-1][i] for i, n in enumerate(last)]
        columns = [[level[i] for level in self.levels] + [new[i]] for i in range(self.shape.window)]
        columns[0][0] = tokens[0]  # column 0 starts at the pending token itself
        self.levels = [*self.levels[1:], new]
        self.anchor += 1  # the next level guesses one position further on
        for i, column in enumerate(columns):
            if last[i] != -2:
                self._keep(column)

    def _keep(self, ngram: list[int]) -> None:
        """An n-gram into the pool under its first token: the G newest kept, none twice."""
        first, rest = ngram[0], tuple(ngram[1:])
        kept = self.pool.setdefault(first, [])
        if rest in kept:
            return
        kept.insert(0, rest)
        del kept[max(self.shape.guesses, 1) :]
        self.harvested.append((first, *rest))

    def rollback(self, confirmed: int) -> None:
        pass  # the window's positions are recounted from the context at the next draft (_move_on)

    def prefilled(self, context: list[int], cache: object) -> None:
        pass

    def replay(self, transcript: Transcript) -> Replay | None:
        return None  # the window moves with every forward that reads it: the policy probes instead

    def draft_length(self, params: DraftParams) -> int:
        return params.length("num_pred_tokens")

    def time_step(self, context: list[int], processors: list[tuple[Stage, LogitsProcessor]]) -> float:
        return 0.0

    def tune(self, params: DraftParams) -> None:
        pass  # the window's shape is the run's: a forward's width is fixed when the run starts

    def close(self) -> None:
        pass


def shape_of(params: DraftParams, budget: int) -> Shape:
    """The run's window: --lookahead-window, --lookahead-ngram and --lookahead-guesses where given (G: as many as
    the columns where only W is), the rest sized to the device's tree budget (:func:`shape_for`); a UsageError
    where that is no window, or a forward wider than any tree may be."""
    sized = shape_for(budget)
    window = params.lookahead_window or sized.window
    guesses = params.lookahead_guesses
    if guesses is None:
        guesses = window if params.lookahead_window else sized.guesses
    shape = Shape(window, params.lookahead_ngram or sized.ngram, guesses)
    check_lookahead(shape.window, shape.ngram, shape.guesses)
    return shape


def build(ctx: DraftingContext) -> Drafter:
    """lookahead: a window sized to the device's tree budget where the options do not set it (:func:`shape_of`)."""
    return LookaheadDrafter(shape_of(ctx.params, ctx.tree_budget), ctx.eos_token_ids)
