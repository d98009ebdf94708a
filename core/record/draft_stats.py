"""What a run's draft rounds added up to: drafted, accepted, where the time went, acceptance by position, and
what Leviathan et al.'s formula predicts from them.

The speculative loop records every round here for its ``Finished`` event, and
a viewer records the rounds it is shown with the same class, so both count
alike. Plain arithmetic: no torch, no events.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def predicted_speedup(alpha: float, gamma: float, c: float, verify: float = 1.0) -> float:
    """Leviathan et al. 2023, Theorem 3.8: the expected walltime improvement of speculative decoding,
    (1 - alpha^(gamma + 1)) / ((1 - alpha)(gamma c + 1)), with alpha the per-position acceptance rate, gamma the
    tokens drafted a round and c a draft forward's time over a target step's. The paper counts the verification
    of gamma + 1 tokens as one target step; ``verify`` is what it really costs, in steps, where it is known."""
    tokens = gamma + 1 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return tokens / (gamma * c + verify)


def fit_verify_costs(times_by_k: Mapping[int, Sequence[float]]) -> tuple[float, float] | None:
    """(c0, c1) of cost(k) = c0 + c1 * k, k the tokens drafted: least squares over the median time of each k
    (medians, so one slow round does not tilt the line); None before two draft lengths were timed."""
    points = [(k, statistics.median(ts)) for k, ts in times_by_k.items() if ts]
    if len(points) < 2:
        return None
    n = len(points)
    mean_k = sum(k for k, _ in points) / n
    mean_t = sum(t for _, t in points) / n
    var = sum((k - mean_k) ** 2 for k, _ in points)
    slope = max(0.0, sum((k - mean_k) * (t - mean_t) for k, t in points) / var)
    return max(mean_t - slope * mean_k, 1e-6), slope


def caught_up(fed: int | None) -> bool:
    """Whether a draft model fed this many context tokens before drafting was catching up on tokens it had
    skipped: a round after a round that drafted feeds it one (the target's extra token), or two (the last drafted
    token too, when all were accepted)."""
    return fed is not None and fed > 2


@dataclass
class DraftStats:
    """Counters for the Finished event: what was drafted, what was accepted, where the time went."""

    # One definition everywhere a count is shown (docs/events.md): ``drafted`` is the nodes drafted (a chain's
    # tokens, a tree's nodes), ``accepted`` the draft tokens the target kept (each round's kept path, summed), so
    # the acceptance rate is tokens kept per node proposed; ``depth`` sums each round's longest path (a chain's
    # length), what the acceptance by position and the paper's gamma count along; ``rounds`` the rounds that drafted.
    drafted: int = 0
    accepted: int = 0
    depth: int = 0
    rounds: int = 0
    draft_forwards: int = 0
    draft_time_s: float = 0.0
    verify_time_s: float = 0.0
    reached: list[int] = field(default_factory=list)  # drafts that reached position i
    accepted_at: list[int] = field(default_factory=list)  # ... and were accepted there
    rejections: int = 0  # rounds that ended on a rejected draft token
    # Timed rounds: the draft's seconds per drafted token (the first round left out: it also fed the prompt to
    # the draft; and a round whose draft first caught up on tokens it skipped, after plain steps: in an adaptive
    # run that does not draft, such rounds are most of the drafting ones, and counted they doubled c), the
    # verifications' seconds by draft length, and what the timed rounds emitted in what time.
    draft_step_s: list[float] = field(default_factory=list)
    verify_by_k: dict[int, list[float]] = field(default_factory=dict)
    round_tokens: int = 0
    round_s: float = 0.0
    # A plain target step's seconds, timed once at the run's start (one forward of one token, rolled back); None
    # where it was not (the compiled path, an older recording): then it is inferred from the verifications.
    plain_step_s: float | None = None

    def record(self, k: int, n: int, draft_s: float | None = None, verify_s: float | None = None,
               emitted: int | None = None, fed: int | None = None, nodes: int | None = None) -> None:
        """A round that drafted ``k`` tokens deep of which ``n`` were accepted, with its times where known and the
        tokens it emitted (n + 1 unless the run ended inside it). ``fed``: the context tokens a draft model was
        fed before drafting (:attr:`~decode_tui.core.drafting.drafters.Draft.fed`), where known. ``nodes``: a tree's
        nodes, ``k`` being its longest path (None: a chain of ``k``)."""
        width = k if nodes is None else nodes
        self.drafted += width
        self.depth += k
        self.rounds += k > 0
        self.accepted += n
        self.rejections += n < k
        while len(self.reached) < k:
            self.reached.append(0)
            self.accepted_at.append(0)
        for i in range(k):
            self.reached[i] += 1
            self.accepted_at[i] += i < n
        if draft_s is None or verify_s is None:
            return
        if k > 0 and self.reached[0] > 1 and not caught_up(fed):  # nor the run's first drafting round
            self.draft_step_s.append(draft_s / k)
        self.verify_by_k.setdefault(width, []).append(verify_s)  # a verification costs by the tokens it reads
        self.round_tokens += n + 1 if emitted is None else emitted
        self.round_s += draft_s + verify_s

    def by_position(self) -> tuple[float, ...]:
        """For each draft position, the share of the drafts that reached it which were accepted there."""
        return tuple(a / r for a, r in zip(self.accepted_at, self.reached, strict=True))

    def gamma(self) -> float | None:
        """The mean draft length of the rounds that drafted (every one of them reached position 1), the paper's
        gamma; None before any drafted."""
        return self.depth / self.reached[0] if self.reached else None

    def alpha(self) -> float | None:
        """The per-position acceptance rate: accepted over tested positions (a round tests up to its first
        rejection), the paper's alpha."""
        tested = self.accepted + self.rejections
        return self.accepted / tested if tested else None

    def step_s(self) -> float | None:
        """A plain target step's time: the one timed at the run's start where there is one. Else inferred: the
        verification cost line's value at k = 0 (:func:`fit_verify_costs`: one token in, no draft), at most the
        cheapest draft length's median verification. Where the line cannot say it (one draft length timed, or
        noisy times tilting it to under half of that median: a step costs at least half a verification of a few
        tokens on any device measured), that median itself, which on a CPU costs a little more than a step."""
        if self.plain_step_s is not None:
            return self.plain_step_s
        if not self.verify_by_k:
            return None
        cheapest = min(statistics.median(ts) for ts in self.verify_by_k.values() if ts)
        line = fit_verify_costs(self.verify_by_k)
        return cheapest if line is None or line[0] < cheapest / 2 else min(line[0], cheapest)

    def cost_ratio(self) -> float | None:
        """c: a draft forward's time over a plain target step's (medians), measured in this run."""
        step = self.step_s()
        return statistics.median(self.draft_step_s) / step if self.draft_step_s and step else None

    def verify_steps(self) -> float | None:
        """What a verification of the drafts cost, in plain target steps: the formula counts it as 1; on a GPU
        it is close to 1, on a CPU more (each drafted token is one more row through every layer)."""
        step = self.step_s()
        times = [t for k, ts in self.verify_by_k.items() if k > 0 for t in ts]
        return statistics.median(times) / step if times and step else None

    def predicted(self) -> float | None:
        """The run's one prediction: Leviathan et al.'s formula from this run's alpha, mean draft length, c and
        what a verification really cost in steps (the paper's 1 where none was timed), all against the same step."""
        alpha, gamma, c = self.alpha(), self.gamma(), self.cost_ratio()
        if alpha is None or gamma is None or c is None:
            return None
        return predicted_speedup(alpha, gamma, c, self.verify_steps() or 1.0)

    def far_from_prediction(self, measured: float) -> str | None:
        """Why ``measured`` is far (a quarter or more either way) from :meth:`predicted`, in words, where it is;
        None where it is close. The causes in the order they most often are: a busy machine (the same draft
        length's verifications took very different times), then acceptance that falls along the draft (the
        formula takes one rate for every position), then what the formula leaves out (the host's time a round)."""
        predicted = self.predicted()
        if predicted is None or 0.75 <= measured / predicted <= 1.33:
            return None
        said = f"{measured:.2f}x measured against {predicted:.2f}x predicted"
        spreads = [max(ts) / min(ts) for ts in self.verify_by_k.values() if len(ts) >= 3 and min(ts) > 0]
        if spreads and max(spreads) >= 2.0:
            return (f"{said}: verifications of one draft length took up to {max(spreads):.1f}x one another, so "
                    "the machine was busy (other work shares its cores); measure again when it is quiet")
        rates = self.by_position()
        if len(rates) >= 2 and rates[0] - rates[-1] >= 0.3:
            return (f"{said}: acceptance falls along the draft ({rates[0]:.0%} at its first token, {rates[-1]:.0%} at "
                    "its last), and the formula takes one rate a for every position")
        return (f"{said}: the formula counts only forwards, and each round also spends host time (drafting "
                "bookkeeping, the acceptance test, the events)")

    def observed(self) -> float | None:
        """The rounds' tokens per second times a plain step's time: the speed-up over plain decoding as this run
        went (``bench`` measures it against greedy itself)."""
        step = self.step_s()
        return self.round_tokens / self.round_s * step if self.round_s and step else None

    def extras(self) -> dict[str, Any]:
        return {
            "drafted": self.drafted,
            "accepted": self.accepted,
            "draft_forwards": self.draft_forwards,
            "acceptance_rate": self.accepted / self.drafted if self.drafted else None,  # undefined: nothing drafted
            "draft_rounds": self.rounds,
            "draft_depth": self.depth,
            "acceptance_by_position": self.by_position(),
            "draft_time_s": self.draft_time_s,
            "verify_time_s": self.verify_time_s,
            "draft_cost_ratio": self.cost_ratio(),
            "verify_cost_steps": self.verify_steps(),
            "predicted_speedup": self.predicted(),
        }
