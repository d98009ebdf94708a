"""Adaptive draft length: how many tokens a speculative round should draft, from what the run measured.

The policy only; the speculative loop asks it for k before each round and
tells it what the round cost and how much was accepted. It knows nothing of
models, drafters or events.
"""

from __future__ import annotations


class AdaptiveDraftLength:
    """Chooses how many tokens to draft from the measured acceptance and the measured cost of verifying.

    With acceptance rate a, a round that drafts k tokens emits on average
    (1 - a^(k+1)) / (1 - a) tokens and costs k draft steps plus one target
    forward over k + 1 tokens. We pick the k with the most tokens per second;
    k = 0 is a plain decoding step. The verify cost is modelled as
    ``cost(k) = c0 + c1 * k``, fitted by least squares to the rounds seen so
    far: on this CPU c1 is small next to c0 (a 16-token verify costs about
    two steps) but a 1-token verify is still cheaper than a 2-token one; on a
    GPU c1 is nearly 0. With a poor drafter the best k is 0 and the run is
    plain decoding. No library offers this policy, hence the hand-written
    estimate. It first measures both ends (k = max, then k = 0) and keeps
    probing a short draft now and then so a changing acceptance is noticed;
    a probe that gets nothing accepted doubles the wait before the next one
    (up to 64 rounds), so a useless drafter costs well under 1 %.
    """

    def __init__(self, max_k: int, probe_every: int = 8) -> None:
        self.max_k = max_k
        self.probe_every = probe_every
        self.probe_wait = probe_every  # rounds until the next probe; doubles after a fruitless one
        self.next_probe = probe_every
        self.probing = False
        # The per-position acceptance rate a, estimated from decayed counts of trials: each examined position
        # is one trial (a draft stops being examined at its first rejection, so accepted / k would
        # underestimate a badly for long drafts).
        self.accepted_sum, self.trials_sum = 0.6, 1.0
        self.samples: list[tuple[int, float]] = []  # (k, verify seconds), most recent last
        self.draft_cost = 0.0  # seconds per drafted token, moving average
        self.rounds = 0

    def _fit(self) -> tuple[float, float] | None:
        recent = self.samples[-64:]
        ks = {k for k, _ in recent}
        if len(ks) < 2:
            return None
        n = len(recent)
        mean_k = sum(k for k, _ in recent) / n
        mean_t = sum(t for _, t in recent) / n
        var = sum((k - mean_k) ** 2 for k, _ in recent)
        slope = max(0.0, sum((k - mean_k) * (t - mean_t) for k, t in recent) / var)
        return max(mean_t - slope * mean_k, 1e-6), slope

    def _best(self) -> int | None:
        """The k with the most expected tokens per second, or None before two draft lengths were timed."""
        fit = self._fit()
        if fit is None:
            return None
        c0, c1 = fit
        a = min(self.accepted_sum / self.trials_sum, 0.999)
        best_k, best_rate = 0, 0.0
        for k in range(self.max_k + 1):
            tokens = (1 - a ** (k + 1)) / (1 - a)
            rate = tokens / (c0 + c1 * k + k * self.draft_cost)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k

    def choose(self) -> int:
        self.rounds += 1
        if self.rounds == 1:
            return self.max_k
        if self.rounds == 2:
            return 0
        best = self._best()
        if best is None:
            return self.max_k
        if best == 0 and self.rounds >= self.next_probe:
            self.probing = True
            return min(2, self.max_k)
        return best

    def observe(self, k: int, accepted: int, verify_s: float, draft_s: float) -> None:
        smooth = 0.3
        self.samples.append((k, verify_s))
        if k > 0:
            decay = 0.9
            self.accepted_sum = decay * self.accepted_sum + accepted
            self.trials_sum = decay * self.trials_sum + accepted + (accepted < k)
            # The first draft also prefilled the draft model's cache with the whole prompt: not a per-token cost.
            if self.rounds > 1:
                per_token = draft_s / k
                previous = self.draft_cost or per_token
                self.draft_cost = (1 - smooth) * previous + smooth * per_token
        if self.probing:  # back off unless the probe changed the decision
            self.probing = False
            self.probe_wait = self.probe_every if self._best() else min(64, 2 * self.probe_wait)
            self.next_probe = self.rounds + self.probe_wait
