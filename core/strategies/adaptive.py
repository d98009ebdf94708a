"""Adaptive draft length: how many tokens a speculative round should draft, from what the run measured.

The policy only; the speculative loop asks it for k before each round and
tells it what the round cost and how much was accepted. It knows nothing of
models (a model is only the key its verify times are kept under), drafters or
events.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from ..drafting.drafters import Draft, Replay
from ..execution.widths import Times, verify_prices
from ..record.draft_stats import fit_verify_costs
from .replayed_length import MIN_HISTORY, SHORT_MATCH_COPY, ReplayedLength, unproven
from .tree_sizes import PRIOR_TREE_TOKENS, RankedSizes, TreeRounds

# The first round's draft length with a draft model (a ranked tree is drafted to the most): enough to measure the
# acceptance, and a draft that cannot pay (a GPU, where a draft step costs about a target step) costs at most this
# many of its steps before the policy knows.
FIRST_DRAFT = 8
# Where a draft step was timed before the first round (``timed``), the first draft is also kept short enough that, if
# the target rejects it whole, its steps cost about this many plain steps: a dear draft that nobody accepts must not
# cost a short run several steps in its first round alone.
FIRST_DRAFT_STEPS = 2.0
# A draft that stops itself, asked for the most over 8 clean rounds, measured under this share of plain steps' speed
# loses. Not 1: on a CPU short drafts (prose) measure slower than the whole run, with its long drafts, goes.
LOST = 0.8
# Drafting is left for good (no probes) when even an acceptance of 1 would give under this: a drafting round's own
# work (the draft's catch-up, the verdicts) is not in the prices, so a draft priced just over 1x measures under it.
CEILING = 1.1
# A fruitless probe's cost over a plain step is kept under this share of the rounds until the next: a probe after
# plain steps pays the draft's catch-up on the tokens it skipped (on a GPU an eager forward, several steps), unless
# the draft was made from the target, which copies their keys and values from it instead.
PROBES = 0.03
# Before any draft is verified the acceptance is taken to be 60 %, as if from one trial: the first rounds then move
# it at once (one rejection at the first position takes it to 28 %), and later ones outweigh it as it fades.
PRIOR_ACCEPTANCE = 0.6
# A tree drafter's rounds are drafted where what they measured (:class:`~.tree_sizes.TreeRounds`) beats plain steps
# by this share, as a replay must (:data:`~.replayed_length.REPLAY_MARGIN`).
TREE_MARGIN = 0.1
# A ranked tree already drafted goes on while its predicted speed-up is at least this: its rounds pay work outside
# their timed parts (their events), and near break-even a few rounds' noisy prices would keep a losing size drafted.
RANKED_STAY = 1.03


class AdaptiveDraftLength:
    """Chooses how many tokens to draft from the measured acceptance and the measured cost of verifying.

    With acceptance rate a, a round that drafts k tokens emits on average (1 - a^(k+1)) / (1 - a) tokens and costs k
    draft steps plus one target forward over k + 1 tokens. We pick the k with the most tokens per second; k = 0 is a
    plain decoding step. No library offers this policy, hence the hand-written estimate. (The geometric model assumes
    independent acceptance, but acceptance comes in runs: its best k cut off long accepted drafts of the code edit.)

    A verification of k drafts costs what it was measured to cost, the median of its last 16 rounds: a CPU's matrix
    kernels are not linear in the width, so no line through the widths says which k is cheap. A k timed fewer than
    three times is priced on the cheap side (:func:`~decode_tui.core.execution.widths.verify_prices`), so that a width
    is tried before it is ruled out and one slow round does not rule it out for good. The times are the target
    model's, kept from run to run (:func:`~decode_tui.core.execution.widths.remembered_times`); a plain step's are
    those of the stretches of plain steps the loop runs in its own way.

    With a draft model the policy first drafts FIRST_DRAFT tokens (for the acceptance and a drafted token's cost),
    then, unless earlier runs timed two widths already, takes a plain step. Where the loop timed a draft step before
    the first round (:meth:`timed`), a draft whose c rules out any gain is never drafted from, and the first draft is
    shorter where a drafted token is dear (FIRST_DRAFT_STEPS). A drafted token's cost is taken from a draft with no
    prefill and no catch-up in it once there is one; until then from the lowest of the rounds so far, on the high
    side (never 0: a draft priced free would be drafted on a GPU where it cannot pay). A draft model that stops
    drafting where it is unsure (``stops_itself``) chooses each draft's length itself; the policy then only chooses
    the most or nothing, and keeps to plain steps where the most was measured slower than them
    (:meth:`_measured_loss`). With a poor drafter the best k is 0 and the run is plain decoding; a short probe now and
    then notices a changing acceptance, and a fruitless one doubles the wait to the next (up to 64 rounds), or more:
    enough for its cost over a plain step to be a share PROBES of the rounds between.

    A drafter that drafts trees (``tree_budget`` nodes at most) and cannot be replayed (token recycling, lookahead)
    is priced by its rounds, not by the geometric model (:mod:`.tree_sizes`): a tree's forward costs what its nodes
    cost whatever its depth. A whole tree (lookahead's) is drafted where what its rounds kept a second beats a plain
    step by TREE_MARGIN (:class:`~.tree_sizes.TreeRounds`); a tree that comes best first (``ranked``: token
    recycling's) is verified only as far as pays on this device (:class:`~.tree_sizes.RankedSizes`: Sequoia's
    hardware-aware size, measured in the run; the tree cut with
    :meth:`~decode_tui.core.drafting.drafters.Draft.cut`). Else plain steps, with probes of a whole tree as above;
    where the drafter's tree is free to ask, the plain steps stand in for tree rounds instead
    (:meth:`observe_shadow`): what its trees would have kept is known from the tokens the steps emit.

    A drafter whose proposals are known without drafting (prompt lookup, suffix drafting) needs neither the
    geometric model nor probes: given ``replay``, the policy drafts what an exact replay of the run so far finds
    fastest (:mod:`.replayed_length`).
    """

    def __init__(self, max_k: int, probe_every: int = 8, replay: Replay | None = None, times_by_k: Times | None = None,
                 stops_itself: bool = False, tree_budget: int = 0, ranked: bool = False,
                 forwards: dict[int, float] | None = None, shadows: bool = False) -> None:
        self.max_k = max_k
        self.tree_budget = tree_budget  # the most nodes a draft tree has (0: the drafter drafts chains)
        # The drafter's tree nodes come best first: the policy verifies the first ``nodes`` of them (0: all).
        self.ranked = ranked
        self.nodes = 0
        # A forward's seconds for n nodes as the warm-up timed them (a CPU's), a ranked tree's price until timed.
        self.forwards = forwards
        self.sizes = RankedSizes()  # a ranked tree's nodes' chances, its grafts' tokens and its last sizing
        # A tree round's tokens kept (the target's own included) and seconds: decayed sums, and the last 16.
        self.tree = TreeRounds()
        # Shadow rounds (core/strategies/shadow.py) stand in for probes: while plain steps run, what the drafter's
        # trees would have kept is known without their forwards, so a tree is drafted again once that pays. Known
        # from the start where the loop says its plain steps will stand in (``shadows``: a drafter free to ask), so
        # that no whole tree is probed when drafting first stops paying.
        self.shadowed = shadows
        self.stops_itself = stops_itself  # the drafter ends a draft where it is unsure: choose 0 or max_k
        self.replay = ReplayedLength(replay, max_k) if replay is not None else None
        self.spent_s = 0.0  # the rounds' measured time so far
        self.probe_every = probe_every
        self.probe_wait = probe_every  # rounds until the next probe; doubles after a fruitless one
        self.next_probe = probe_every
        self.probing = False
        # The per-position acceptance rate a, estimated from decayed counts of trials: each examined position
        # is one trial (a draft stops being examined at its first rejection, so accepted / k would
        # underestimate a badly for long drafts).
        self.accepted_sum, self.trials_sum = PRIOR_ACCEPTANCE, 1.0
        # Verify seconds of the last 16 rounds of each draft length; earlier runs' (remembered_times) when given.
        self.times_by_k: Times = {} if times_by_k is None else times_by_k
        self.draft_cost = 0.0  # seconds per drafted token, moving average
        self.draft_clean = False  # draft_cost was measured on a draft with no prefill and no catch-up in it
        self.asked = 0  # the draft length the last choice asked for
        # A draft that stops itself: the tokens and seconds of its last rounds asked for the most, and, once those
        # were measured to lose to plain steps, the acceptance then and the measured speed-up.
        self.most_rounds: deque[tuple[int, float]] = deque(maxlen=8)
        self.lost: tuple[float, float] | None = None
        self.last_k = 0  # the draft length of the last round observed
        self.rounds = 0
        self.reason = ""  # why the last choice, in words (a front end shows it)
        # What kind of choice it was, with its k: a front end is told the reason when this changes, not every time
        # the acceptance in its words moves a point.
        self.decision: tuple[str, int] = ("", -1)
        self.step_s = 0.0  # a plain step's price, as the last choice priced it
        self.c = 0.0  # a drafted token's cost in plain steps, as the last choice priced it
        self.best_drafting = (0, 0.0)  # the best k > 0 at the last choice, and its predicted speed-up
        self.ceiling = float("inf")  # the best speed-up drafting could give at an acceptance of 1, as last priced
        self.timed_step_s = 0.0  # a plain step's seconds as timed before the first round (``timed``), if it was

    def _fit(self) -> tuple[float, float] | None:
        """(c0, c1) of cost(k) = c0 + c1 * k (:func:`~decode_tui.core.record.draft_stats.fit_verify_costs`) over each
        k's last 16 times: per k, so a long stretch of one length (plain steps on prose) does not make the policy
        forget what the others cost and measure them again."""
        return fit_verify_costs(self.times_by_k)

    @property
    def trees(self) -> bool:
        """Whether rounds are priced as tree rounds: the drafter drafts trees and no replay prices its widths."""
        return self.tree_budget > 0 and self.replay is None

    def _prices(self, fit: tuple[float, float], widest: int = 0) -> list[float]:
        """Seconds to verify k = 0 .. max(max_k, widest) drafted tokens (nodes, where a draft is a tree;
        :func:`~decode_tui.core.execution.widths.verify_prices`)."""
        # A ranked tree's sizes are priced by the warm-up's forwards, else the line, until timed, as a replay's are:
        # pushed to the cheapest timed, every size would be tried.
        return verify_prices(self.times_by_k, max(self.max_k, widest), fit,
                             push=self.replay is None and not self.ranked,
                             forwards=self.forwards if self.ranked else None)

    def _best(self) -> int | None:
        """The k with the most expected tokens per second, or None before two draft lengths were timed."""
        fit = self._fit()
        if fit is None:
            return None
        if self.trees:
            return self._best_tree(fit)
        a = min(self.accepted_sum / self.trials_sum, 0.999)
        best_k, best_rate = 0, 0.0
        rates = []
        prices = self._prices(fit)
        for k, price in enumerate(prices):
            tokens = (1 - a ** (k + 1)) / (1 - a)
            rates.append(tokens / (price + k * self.draft_cost))
            if rates[-1] > best_rate:
                best_k, best_rate = k, rates[-1]
        # For the reason shown when drafting does not pay: c (a drafted token's cost in plain steps) and the
        # predicted speed-up of the best draft length, which is then under 1.
        drafting = max(range(1, len(rates)), key=lambda k: rates[k], default=0)
        self.step_s = prices[0]
        self.c = self.draft_cost / prices[0] if prices[0] > 0 else 0.0
        self.best_drafting = (drafting, rates[drafting] / rates[0] if drafting and rates[0] > 0 else 0.0)
        # The most drafting could give if every drafted token were accepted: k + 1 tokens for one verification and
        # k drafted tokens. No acceptance can beat it, so under CEILING no probe is worth its cost either.
        self.ceiling = max(((k + 1) * prices[0] / (prices[k] + k * self.draft_cost) for k in range(1, len(prices))),
                           default=0.0)
        return best_k

    def _best_tree(self, fit: tuple[float, float]) -> int:
        """The whole tree (max_k deep) where its rounds were measured to beat a plain step by TREE_MARGIN, else 0."""
        # A ranked tree's prices run on past its budget, for a copy grafted onto it (max_k nodes at most).
        prices = self._prices(fit, self.tree_budget + (self.max_k if self.ranked else 0))
        self.step_s = prices[0]
        self.c = self.draft_cost / prices[0] if prices[0] > 0 else 0.0
        if self.ranked:
            return self._best_nodes(prices)
        # Before a tree round was timed in this run (earlier runs' times gave the fit): the widest tree's price.
        steps = self.tree.steps(prices[self.tree_budget], prices[0])
        gain = self.tree.mean() / steps
        self.best_drafting = (self.max_k, gain)
        self.ceiling = (self.max_k + 1) / steps  # every round keeping a path max_k deep
        # Trees already drafted go on while they beat plain steps at all: the measure is noisy, and each return
        # after a dip waits for a probe.
        drafting = self.decision[0] == "draft"
        return self.max_k if gain >= (1.0 if drafting else 1 + TREE_MARGIN) else 0

    def _best_nodes(self, prices: list[float]) -> int:
        """A ranked tree's choice: the first n nodes :func:`~.tree_sizes.best_size` finds best, at the verification
        prices measured and the rounds' drafting time, drafted (the tree max_k deep, cut to n nodes) where they beat
        plain steps by TREE_MARGIN (already drafting: RANKED_STAY), else 0."""
        size = self.sizes.size(prices, self.tree_budget)
        self.best_drafting = (self.max_k, size.gain)
        self.ceiling = (min(size.nodes, self.max_k) + 1) / size.steps  # every round keeping a path through them all
        drafting = self.decision[0] == "draft"
        self.nodes = size.nodes if size.gain >= (RANKED_STAY if drafting else 1 + TREE_MARGIN) else 0
        return self.max_k if self.nodes else 0

    def _tree_why(self) -> str:
        """The numbers a tree drafter's choice weighed, in words."""
        if self.ranked:
            return self.sizes.why(self.best_drafting[1])
        tokens = self.tree.mean()
        gain = self.best_drafting[1]
        return (f"a tree round keeps an estimated {tokens:.2f} tokens (from a prior of {PRIOR_TREE_TOKENS:.0f}) and "
                f"costs {tokens / gain if gain > 0 else 0.0:.2f} plain steps: drafting goes {gain:.2f}x")

    def _decide(self, kind: str, k: int, reason: str) -> int:
        self.decision, self.reason, self.asked = (kind, k), reason, k
        if kind != "draft":
            self.nodes = 0  # a first round or a probe drafts the whole tree
        return k

    def timed(self, step_s: float, draft_s: float) -> None:
        """A plain step's and a draft step's seconds, timed by the loop before the first round (one forward of
        each, with no prefill or catch-up in the draft's): c is known before anything is drafted, so a draft
        that could not pay even if every token were accepted is never drafted from, and a first draft that
        could is kept to what FIRST_DRAFT_STEPS allows."""
        self.draft_cost, self.draft_clean, self.timed_step_s = draft_s, True, step_s

    def _ceiling_before_drafting(self) -> float:
        """The ceiling (the speed-up at an acceptance of 1) from the timed c, before any round: from the verify
        times of earlier runs where there are two widths, else with a verification priced at a plain step, the
        least one costs, which can only overstate it."""
        if self._fit() is not None:
            self._best()
            return self.ceiling
        self.step_s, self.c = self.timed_step_s, self.draft_cost / self.timed_step_s
        self.ceiling = max(((k + 1) / (1 + k * self.c) for k in range(1, self.max_k + 1)), default=0.0)
        return self.ceiling

    def _no_ceiling(self) -> int:
        """Plain steps for good, no probes: c alone says drafting could not pay."""
        self.next_probe = self.rounds + 64
        return self._decide("plain", 0, f"plain steps: a drafted token costs c = {self.c:.2f} steps, so even if "
                            f"the target accepted every one, drafting would go at most {self.ceiling:.2f}x")

    def _first(self) -> int:
        """The first draft's length: FIRST_DRAFT, or the most for a ranked tree (token recycling's), whose depth costs
        nothing (its nodes are priced, and its copies cost nothing to draft)."""
        return self.max_k if self.ranked else min(self.max_k, FIRST_DRAFT)

    def choose(self) -> int:
        self.rounds += 1
        if self.replay is not None:
            return self._choose_by_replay()
        if self.rounds == 1:  # the acceptance, and what a drafted token costs unless it was timed
            first = self._first()
            if self.timed_step_s > 0 and self._ceiling_before_drafting() < CEILING:
                return self._no_ceiling()
            # The first draft is a probe, backed off like one where it was fruitless: on open-ended text a second
            # probe only a few rounds later cost a short answer several percent (BENCHMARKS.md, "The floor where
            # nothing can be copied").
            self.probing = True
            if self.timed_step_s > 0:
                c = self.draft_cost / self.timed_step_s
                first = max(1, min(first, int(FIRST_DRAFT_STEPS / c) if c > 0 else first))
                return self._decide("first", first, f"drafting {first}: the first round measures the acceptance "
                                    f"(a drafted token was timed at c = {c:.2f} steps)")
            return self._decide("first", first, f"drafting {first}: the first round measures the "
                                "acceptance and what drafting costs")
        if self._fit() is None:  # a second width to draw a line through, unless the timed c ruled drafting out
            if self.draft_clean and self.ceiling < CEILING:
                return self._no_ceiling()
            if not any(k > 0 and times for k, times in self.times_by_k.items()):
                # Only plain steps timed (the first round's drafter had nothing to propose): the missing width is a
                # draft's, which a plain step would never time.
                first = self._first()
                return self._decide("first", first, f"drafting {first}: nothing was drafted yet, and a draft's "
                                    "verification is the width still to time")
            return self._decide("timing", 0, "a plain step: timing a second width, to price every draft length")
        return self._choose_by_model()

    def _choose_by_replay(self) -> int:
        """Draft the most until the costs of two widths are known (a lookup's copies vary in length by themselves:
        no plain step is forced), then what the replay finds fastest (:mod:`.replayed_length`)."""
        assert self.replay is not None
        fit = self._fit()
        # A replay of a few tokens says little about the rest of the text: until there are MIN_HISTORY, draft the
        # most (a copy that fails costs one wider verify; a copy missed costs a forward a token).
        if fit is not None and self.replay.trusted():
            k = self.replay.choose(lambda widest: self._prices(fit, widest), self.rounds, self.spent_s)
            return self._decide("replay", k, f"copying up to {k}: replayed, the run so far would have been fastest "
                                f"at {k}" if k else "plain steps: replayed, the run so far would have been fastest "
                                "with no copies")
        return self._decide("history", self.max_k, f"copying up to {self.max_k} ({SHORT_MATCH_COPY} after a match of "
                            f"one token) until {MIN_HISTORY} tokens and two widths are timed")

    def unproven(self, draft: Draft) -> Draft:
        """``draft`` as far as it is verified: while no replay prices copies yet (the history above), a copy after a
        match of one token cut short (:func:`~.replayed_length.unproven`); any other, and any later, whole."""
        return unproven(draft) if self.decision[0] == "history" else draft

    def _choose_by_model(self) -> int:
        best = self._best()
        if best is None:
            return self.max_k
        if self.trees:
            return self._choose_tree(best)
        a = min(self.accepted_sum / self.trials_sum, 0.999)
        k_best, gain = self.best_drafting
        # The acceptance in words is the estimate the choice used, said to be one: after a few short rounds it
        # still holds some of the prior, where the panel's counts of this run's verdicts may say 0 %.
        why = (f"a drafted token costs c = {self.c:.2f} steps and the target accepts an estimated {a:.0%} (from a "
               f"prior of {PRIOR_ACCEPTANCE:.0%}): the best draft length, {k_best}, would go {gain:.2f}x")
        if self.draft_clean and self.ceiling < CEILING:  # c measured on a clean draft: nothing can pay, no probe
            return self._no_ceiling()
        if best == 0 and self.rounds >= self.next_probe:
            self.probing = True
            return self._decide("probe", min(2, self.max_k), f"a probe of {min(2, self.max_k)}: drafting does not "
                                f"pay ({why}), and a probe notices when that changes")
        if best == 0:
            return self._decide("plain", 0, f"plain steps: {why}")
        if self.stops_itself:
            lost = self._measured_loss(a)
            if lost is not None:
                return self._decide("plain", 0, lost)
        k = self.max_k if self.stops_itself else best
        return self._decide("draft", k, f"drafting {'up to ' if self.stops_itself else ''}{k}: at acceptance "
                            f"{a:.0%} and the verify times measured, it beats a plain step"
                            + (" (the draft stops by itself where it is unsure)" if self.stops_itself else ""))

    def _choose_tree(self, best: int) -> int:
        """A tree drafter's choice: the whole tree, plain steps, or a probe (a whole tree) now and then."""
        why = self._tree_why()
        if best and self.nodes:
            return self._decide("draft", best, f"drafting the first {self.nodes} node{'s' if self.nodes != 1 else ''} "
                                f"of a tree {best} deep: {why}")
        if best:
            return self._decide("draft", best, f"drafting a tree {best} deep: {why}")
        if self.shadowed:  # the plain steps' shadow rounds say what a tree would keep: no probe needed
            return self._decide("plain", 0, f"plain steps: {why}, as the plain steps' own tokens show")
        if self.rounds >= self.next_probe:
            self.probing = True
            return self._decide("probe", self.max_k, f"a probe, a tree {self.max_k} deep: drafting does not pay "
                                f"({why}), and a probe notices when that changes")
        return self._decide("plain", 0, f"plain steps: {why}")

    def _measured_loss(self, a: float) -> str | None:
        """Why a draft that stops itself should not be asked for the most, though the geometric model says it
        pays: its last 8 clean rounds asked for the most were measured clearly slower than plain steps (under
        LOST). The model assumes drafts of the length it picks, where such a draft goes on as long as it is sure:
        on a GPU, a confident draft of 20 steps that each cost half a target step loses. Kept until the
        acceptance rises past what it was then (a probe shows it). None where drafting was not measured to lose.
        """
        if self.lost is None and len(self.most_rounds) == self.most_rounds.maxlen:  # priced by _best just before
            tokens, seconds = sum(t for t, _ in self.most_rounds), sum(s for _, s in self.most_rounds)
            measured = tokens * self.step_s / seconds if seconds > 0 else 0.0
            if measured < LOST:
                self.lost = (a, measured)
            self.most_rounds.clear()
        if self.lost is not None and a > self.lost[0] + 0.05:
            self.lost = None  # the acceptance changed: measure again
        if self.lost is None:
            return None
        return (f"plain steps: drafting up to {self.max_k} was measured at {self.lost[1]:.2f}x a plain step (a "
                f"drafted token costs c = {self.c:.2f} steps, the target accepts an estimated {self.lost[0]:.0%})")

    def plain_stretch(self) -> int:
        """How many plain steps the last choice (of none) stands for: the rounds until its next probe or replay.
        The loop runs them as one stretch (:mod:`~decode_tui.core.strategies.plain_steps`)."""
        kind = self.decision[0]
        if self.asked != 0 or kind not in ("plain", "replay"):
            return 1
        if kind == "plain" and self.shadowed:  # no probe to wait for: the shadow rounds are looked at again
            return self.probe_every
        until = self.replay.next_replay if kind == "replay" and self.replay is not None else self.next_probe
        return until - self.rounds if until > self.rounds else self.probe_every

    def observe_shadow(self, path: Sequence[int]) -> None:
        """A tree round that plain steps stood in for (:mod:`~decode_tui.core.strategies.shadow`): it would have
        kept the nodes ``path`` and emitted the target's token after them. Its cost is a tree round's as
        measured."""
        self.tree.observe(len(path) + 1)
        self.observe_path(path)
        self.shadowed = True

    def keeps_graft(self, extra: int, match: int, alone: bool = False) -> bool:
        """Whether a copy of ``extra`` nodes grafted onto the ranked tree after a match of ``match`` tokens is verified
        with the first nodes the policy chose (``alone``: on a tree that grew none): always where it verifies them
        all (no cut), else where the graft pays for its width (:meth:`~.tree_sizes.RankedSizes.keeps_graft`)."""
        return not self.nodes or self.sizes.keeps_graft(extra, match, alone)

    def observe_graft(self, tokens: int, match: int) -> None:
        """A round with a copy grafted after a match of ``match`` tokens kept ``tokens`` of its nodes (or would have,
        where it was not verified: the emitted tokens walked down it)."""
        self.sizes.graft(match).observe(tokens)

    def observe_path(self, path: Sequence[int], unknown: Sequence[int] = ()) -> None:
        """A ranked tree's round (verified, or stood in for) kept the nodes ``path`` of the whole tree drafted and
        showed every other node not kept but the ``unknown`` (:meth:`~.tree_sizes.NodeChances.observe`)."""
        if self.ranked:
            self.sizes.chances.observe(path, unknown, self.tree_budget)

    def observe_plain(self, steps: int, seconds: float) -> None:
        """A stretch of plain steps, each a round that drafted nothing (:meth:`choose` counted the first)."""
        for _ in range(steps):
            self.observe(0, 0, seconds / steps, 0.0)
        self.rounds += steps - 1

    def observe(self, k: int, accepted: int, verify_s: float, draft_s: float, caught_up: bool | None = None,
                nodes: int | None = None) -> None:
        """A round that drafted ``k`` tokens (0: a plain step; a tree's depth) of which ``accepted`` were kept, with
        its times. ``caught_up``: whether its draft was first fed tokens it had skipped, where the loop knows
        (:attr:`~decode_tui.core.drafting.drafters.Draft.fed`); None: assumed after every round that drafted nothing.
        ``nodes``: a tree's node count, the width its verification was timed at (None: a chain's, k)."""
        smooth = 0.3
        last_k, self.last_k = self.last_k, k
        # A clean measure of a draft's cost: no prefill (the first round), no catch-up. A draft made from the target
        # takes the skipped tokens' keys and values instead of catching up, so its probes after plain steps are
        # clean too, and the ceiling below can rule drafting out after the first of them.
        clean = self.rounds > 1 and (last_k > 0 if caught_up is None else not caught_up)
        self.spent_s += verify_s + draft_s
        self.times_by_k.setdefault(k if nodes is None else nodes, deque(maxlen=16)).append(verify_s)
        if k > 0 and self.trees:
            self.tree.observe(accepted + 1, verify_s + draft_s)
            self.sizes.draft_s.append(draft_s)
        if k > 0:
            decay = 0.9
            self.accepted_sum = decay * self.accepted_sum + accepted
            self.trials_sum = decay * self.trials_sum + accepted + (accepted < k)
            # A draft after plain steps first feeds the draft model the tokens it skipped, and the first draft may
            # prefill the prompt: neither is a per-token cost, but until a draft is timed without them, an estimate
            # on the high side is better than none (a drafter idle between probes would otherwise look free).
            per_token = draft_s / k
            if clean:
                previous = self.draft_cost if self.draft_clean else per_token
                self.draft_cost = (1 - smooth) * previous + smooth * per_token
                self.draft_clean = True
            elif not self.draft_clean:  # the lowest of the high-side estimates so far
                self.draft_cost = min(self.draft_cost or per_token, per_token)
            if self.asked == self.max_k and clean:
                # What a round asked for the most gave, and cost (a draft that stops itself), measured clean: after
                # plain steps the draft first catches up on the tokens it skipped, which no drafting round pays.
                self.most_rounds.append((accepted + 1, verify_s + draft_s))
        if self.probing:  # back off unless the probe changed the decision
            self.probing = False
            self.probe_wait = self.probe_every if self._best() else min(64, 2 * self.probe_wait)
            if self.step_s > 0 and self.probe_wait > self.probe_every:  # its cost over a plain step, kept a share
                self.probe_wait = max(self.probe_wait, math.ceil(((verify_s + draft_s) / self.step_s - 1) / PROBES))
            self.next_probe = self.rounds + self.probe_wait
