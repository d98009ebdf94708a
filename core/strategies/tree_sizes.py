"""How many of a ranked tree's nodes to verify: each node's measured chance of being kept, against what verifying
the first n nodes costs on this device.

A ranked drafter's tree comes best first (token recycling's template), so its first n nodes are the best tree of n.
The first n keep an expected 1 + the sum of their chances a round (the target's own token, and each node on the kept
path); they cost their verification's price. This is Sequoia's hardware-aware tree size (Chen et al., "Sequoia:
Scalable, Robust, and Hardware-aware Speculative Decoding", 2024; reference code: github.com/Infini-AI-Lab/Sequoia),
measured during the run rather than planned from a profile: on a CPU whose forward over 2 positions costs little
more than 1, one or two nodes pay where a whole tree does not; on a GPU the whole tree costs about a step. No library
offers it for a tree that changes every round, hence this module.

A copy grafted onto the tree (token recycling's, after a short match) is no part of the ranking: it rides along
the first n nodes where the tokens that grafts after matches as long as its own added lately pay for its width
(:func:`graft_pays`), as one more node would. A copy after a match of one token is prose's common word's last
continuation; after three, a code edit's unchanged line: one kept apart from the other, a run of failed short
matches does not drop the long match's copy that would have paid. Where the tree grew no node (its row was empty),
the copy, or recycling's commonest tokens (kept as a match of none), is verified where it pays against a plain step.

A tree that is not ranked (lookahead's) is drafted whole or not at all: :class:`TreeRounds` keeps what its rounds
emitted and cost, which the policy weighs against a plain step.

It knows node indices, prices and decayed counts; nothing of drafters, models or the policy's other choices
(:mod:`.adaptive` decides whether to draft at all, and asks :class:`RankedSizes` how far, or
:class:`TreeRounds` what a whole tree gave).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

# The most nodes whose predicted speed-up is within this share of the best are verified: where width is nearly free
# (a GPU) a node not kept lately costs next to nothing, and a deep path it keeps now and then is a run of tokens;
# where it is not (a CPU), a node's column costs far more than this.
SIZE_TIE = 0.03
# Each node's chance of being kept is decayed by this a round: shadow rounds measure it for free at every few plain
# steps, so it can afford a long memory, and a node kept about a fifth of the time needs one (over ten rounds its
# estimate spreads from a tenth to a third, and a lucky start keeps losing trees drafted).
NODE_DECAY = 0.97
# Before any round the first node is taken to be kept half the time, as if from one round: where width is nearly free a
# first round that kept nothing then still drafts, and shadow rounds soon outweigh it where width is dear.
PRIOR_NODE = 0.5
# Before any round a grafted copy is taken to keep this many tokens past the tree's path, as if from one round.
PRIOR_GRAFT = 1.0
# Recycling's commonest tokens (a graft after a match of none), likewise, at about what they keep on prose (a token
# in six or seven rounds): tried where their width costs less than that, and dropped after a round that kept nothing
# where it costs more than half of it (a short answer in another language keeps none).
PRIOR_COMMONEST = 0.15
# A tree drafter whose tree is not ranked (lookahead's) is priced by its rounds: a round's tokens kept (decayed by
# TREE_DECAY a round, from a prior of one round that kept PRIOR_TREE_TOKENS: one drafted token and the target's) over
# its seconds. On a CPU a tree's forward costs what its width costs whatever its depth, so a round that keeps fewer
# tokens than that many plain steps loses (BENCHMARKS.md, "The floor where nothing can be copied").
TREE_DECAY = 0.9
PRIOR_TREE_TOKENS = 2.0


class Size(NamedTuple):
    """The first ``nodes`` nodes of a tree: their predicted speed-up over plain steps, the tokens they keep a round,
    and their round's price in plain steps."""

    gain: float
    nodes: int
    tokens: float
    steps: float


class NodeChances:
    """Node i of a ranked tree: how often it was on the kept path (``kept[i]``), over the rounds that showed whether
    it was (``seen[i]``), both decayed by NODE_DECAY a round, from a prior of one round that may have kept the first
    node (PRIOR_NODE)."""

    def __init__(self) -> None:
        self.kept: list[float] = [PRIOR_NODE]
        self.seen: list[float] = [1.0]

    def chance(self, node: int) -> float:
        """Node ``node``'s chance of being kept (0 where no round showed it)."""
        seen = self.seen[node] if node < len(self.seen) else 0.0
        return self.kept[node] / seen if seen > 0 else 0.0

    def observe(self, path: Sequence[int], unknown: Sequence[int], size: int) -> None:
        """A round (verified, or stood in for) kept the nodes ``path`` of the whole tree drafted, and showed every
        other node of the first ``size`` not kept but the ``unknown`` (under a node past the cut that the target's
        own token matched: the target never read them). A node the tree did not have is one not kept."""
        size = max(size, max(path, default=-1) + 1)
        self.kept += [0.0] * (size - len(self.kept))
        self.seen += [0.0] * (size - len(self.seen))
        hidden, kept = set(unknown), set(path)
        for node in range(size):
            if node not in hidden:
                self.kept[node] = NODE_DECAY * self.kept[node] + (node in kept)
                self.seen[node] = NODE_DECAY * self.seen[node] + 1


def best_size(chances: NodeChances, prices: Sequence[float], overhead: float) -> Size:
    """The first n nodes (n = 1 .. len(prices) - 1) with the most tokens a second, or the most nodes within SIZE_TIE
    of it. ``prices[n]``: seconds to verify n nodes (``prices[0]``: a plain step); ``overhead``: a round's drafting
    seconds."""
    sizes, tokens = [], 1.0
    for n in range(1, len(prices)):
        tokens += chances.chance(n - 1)
        steps = (prices[n] + overhead) / prices[0] if prices[0] > 0 else 1.0  # [plain steps]
        sizes.append(Size(tokens / steps, n, tokens, steps))
    most = max(size.gain for size in sizes)
    return max((size for size in sizes if size.gain >= (1 - SIZE_TIE) * most), key=lambda size: size.nodes)


class DecayedTokens:
    """Tokens a round, decayed by ``decay`` a round, from a prior of one round that kept ``prior``. What a copy
    grafted onto a ranked tree kept past the tree's own path (PRIOR_GRAFT, NODE_DECAY: optimistic, so that a graft is
    tried, and dropped once it is seen to keep less than its width costs), and what a whole tree's round emitted
    (PRIOR_TREE_TOKENS, TREE_DECAY)."""

    def __init__(self, prior: float, decay: float) -> None:
        self.kept, self.rounds, self.decay = prior, 1.0, decay

    def observe(self, tokens: int) -> None:
        self.kept = self.decay * self.kept + tokens
        self.rounds = self.decay * self.rounds + 1

    def mean(self) -> float:
        return self.kept / self.rounds


def graft_pays(size: Size | None, prices: Sequence[float], overhead: float, extra: int, tokens: float) -> bool:
    """Whether ``extra`` grafted nodes that keep ``tokens`` a round, verified with the first ``size.nodes``, keep at
    least as many tokens a second as those nodes alone; with no ``size`` (nothing ranked to ride on), as a plain
    step, which pays no drafting overhead. ``prices`` as :func:`best_size`'s; a width past them is not priced, and
    does not pay."""
    n = size.nodes if size is not None else 0
    if n + extra >= len(prices):
        return False
    if size is None:
        return (1 + tokens) / (prices[extra] + overhead) >= 1 / prices[0]
    return (size.tokens + tokens) / (prices[n + extra] + overhead) >= size.tokens / (prices[n] + overhead)


class TreeRounds:
    """A tree drafter's rounds (verified, or stood in for by plain steps): the tokens each emitted, decayed, and the
    seconds of the last 16 verified."""

    def __init__(self) -> None:
        self.tokens = DecayedTokens(PRIOR_TREE_TOKENS, TREE_DECAY)
        self.seconds: deque[float] = deque(maxlen=16)

    def observe(self, tokens: int, seconds: float | None = None) -> None:
        """A round that emitted ``tokens``; ``seconds``: what it cost, where it was verified."""
        self.tokens.observe(tokens)
        if seconds is not None:
            self.seconds.append(seconds)

    def mean(self) -> float:
        """The tokens a round emits, as measured."""
        return self.tokens.mean()

    def steps(self, widest: float, step: float) -> float:
        """A round's price in plain steps of ``step`` seconds: the median of the rounds verified, else ``widest``
        (the whole tree's verification price)."""
        cost = statistics.median(self.seconds) if self.seconds else widest
        return cost / step if step > 0 else 1.0


class RankedSizes:
    """A run's ranked trees: each node's chances, what grafts kept, the rounds' drafting seconds, and the last sizing
    (:meth:`size`), which the graft's test is against."""

    def __init__(self) -> None:
        self.chances = NodeChances()
        self.grafts: dict[int, DecayedTokens] = {}  # what copies grafted onto the tree kept past its path, by match
        self.draft_s: deque[float] = deque(maxlen=16)  # a tree round's drafting seconds (its host work), the last 16
        self.sized = Size(0.0, 0, 0.0, 0.0)  # the last sizing
        self.prices: list[float] = []  # its verification prices
        self.overhead = 0.0  # and a round's drafting seconds

    def size(self, prices: list[float], budget: int) -> Size:
        """The best first n nodes of a tree of ``budget`` (:func:`best_size`) at ``prices`` (``prices[n]``: seconds to
        verify n nodes, on past the budget for a graft) and the rounds' drafting seconds."""
        self.overhead = statistics.median(self.draft_s) if self.draft_s else 0.0
        self.prices = prices
        self.sized = best_size(self.chances, prices[: budget + 1], self.overhead)
        return self.sized

    def graft(self, match: int) -> DecayedTokens:
        """What grafts after a match of ``match`` tokens kept."""
        return self.grafts.setdefault(match, DecayedTokens(PRIOR_GRAFT if match else PRIOR_COMMONEST, NODE_DECAY))

    def keeps_graft(self, extra: int, match: int, alone: bool = False) -> bool:
        """Whether a graft of ``extra`` nodes, copied after a match of ``match`` tokens, pays beside the last sizing's
        nodes (:func:`graft_pays`); ``alone``: with no ranked node (the tree grew none), against a plain step."""
        return graft_pays(None if alone else self.sized, self.prices, self.overhead, extra, self.graft(match).mean())

    def why(self, gain: float) -> str:
        """The last sizing in words, with the speed-up the policy predicts of it."""
        n, tokens, steps = self.sized.nodes, self.sized.tokens, self.sized.steps
        return (f"its first {n} node{'s' if n != 1 else ''} keep an estimated {tokens:.2f} tokens a round and cost "
                f"{steps:.2f} plain steps: drafting goes {gain:.2f}x")
