"""A copying drafter's draft length, from an exact replay of the run so far.

A drafter whose proposals are known without drafting (prompt lookup, suffix drafting: replayed exactly as
:mod:`~decode_tui.core.analysis.whatif` does, :mod:`~decode_tui.core.drafting.replay`) needs neither a model of the
acceptance nor probes: the run so far is replayed under every fixed k (0 .. max), each forward priced at the width
it had, and the fastest k is kept (the longer on a tie: copies come in runs) where it beats plain steps by
REPLAY_MARGIN. Until the run has MIN_HISTORY tokens no replay is trusted, and a copy after a match of one token is
verified to its first SHORT_MATCH_COPY tokens only (:func:`unproven`). Replays run on the host between rounds, with
the device idle, so they are kept to REPLAY_SHARE of the run's time. No library offers this, hence the module.

It knows replays, prices and the run's time; nothing of models or drafters beyond the replay it is given, and not
when to draft otherwise (:mod:`.adaptive` holds one and words its choice).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..drafting.drafters import Draft, Replay

MIN_HISTORY = 8  # tokens of the run a replay needs before its choice is trusted
# Until then a copy after a match of one token is verified this far only: on prose such copies are the common
# word's last continuation and almost never kept, and where a forward's width is dear (a CPU in float32) each one
# verified whole costs several steps; a code edit's first copies that pay follow matches of two tokens or more
# (BENCHMARKS.md, "The floor in float32 beside a CPU hog").
SHORT_MATCH_COPY = 2
# A replay of the run so far is kept to this fraction of the run's time at most: it runs on the host between rounds,
# with the device idle, and on prose where nothing is copied a larger share cost adaptive PLD its place beside greedy
# on a GPU (BENCHMARKS.md, "Each mode on a GPU").
REPLAY_SHARE = 1 / 100
# A replayed draft length is drafted only where it beat plain steps on the run so far by this share: on a question
# about a given text, copies of its words that the answer left at once cost prompt lookup a fifth of greedy's speed
# when the slightly best replayed length was drafted (BENCHMARKS.md, "The floor where nothing can be copied").
REPLAY_MARGIN = 0.1

Prices = Callable[[int], list[float]]  # widest -> seconds to verify 0 .. widest drafted tokens


class ReplayedLength:
    """The draft length an exact replay of the run so far finds fastest, replayed again every few rounds."""

    def __init__(self, replay: Replay, max_k: int) -> None:
        self.replay = replay
        self.max_k = max_k
        self.replayed: int | None = None  # the k the last replay chose
        self.replay_s = 0.0  # what the last replay cost
        self.next_replay = 3  # the round of the next replay

    def trusted(self) -> bool:
        """Whether the run is long enough (MIN_HISTORY tokens) for a replay of it to say much about the rest."""
        return len(self.replay(0)) + 1 >= MIN_HISTORY

    def choose(self, prices: Prices, rounds: int, spent_s: float) -> int:
        """The replayed best k at round ``rounds`` of a run that has spent ``spent_s`` seconds: replayed again where
        the last replay is due, else the last one's."""
        if self.replayed is None or rounds >= self.next_replay:
            self.replayed = min(self.fastest(prices), self.max_k)
            # Keep the replays under REPLAY_SHARE of the run: wait as many rounds as that takes, at least 4.
            per_round = spent_s / max(rounds - 1, 1)
            self.next_replay = rounds + max(4, round(self.replay_s / REPLAY_SHARE / max(per_round, 1e-9)))
        return self.replayed

    def fastest(self, prices: Prices) -> int:
        """The fixed k that would have been fastest on the run so far, by an exact replay of the drafter."""
        started = time.perf_counter()
        # A forward of width w verifies w - 1 drafted tokens (a tree's nodes, which may be more than its depth k).
        widths = {k: self.replay(k) for k in range(self.max_k + 1)}
        priced = prices(max((w for ws in widths.values() for w in ws), default=1) - 1)
        seconds = {k: sum(priced[w - 1] for w in ws) for k, ws in widths.items()}
        self.replay_s = time.perf_counter() - started
        best = min(seconds, key=lambda k: (seconds[k], -k))  # on a tie the longer draft: copies come in runs
        # The best of max_k fixed lengths on the run so far overstates its gain (the past's lucky copies pick it):
        # it must beat plain steps by REPLAY_MARGIN to be drafted.
        return best if seconds[best] < (1 - REPLAY_MARGIN) * seconds[0] else 0


def unproven(draft: Draft) -> Draft:
    """``draft`` as far as it is verified before a replay is trusted: a chain copied after a match of one token to
    its first SHORT_MATCH_COPY tokens; any other whole."""
    if draft.match is None or draft.tree is not None or draft.match[1] - draft.match[0] > 1:
        return draft
    return draft.cut(SHORT_MATCH_COPY)
