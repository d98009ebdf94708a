"""How many positions to run a verification forward over: on a CPU, a few more can cost less than fewer.

A verification feeds the target the pending token and k drafted tokens, k + 1 positions. Speculative decoding
assumes that costs about one decoding step, as it does on a GPU, where any width up to a few dozen is one pass over
the weights. On a CPU it depends on how the matrix library multiplies a few rows by each weight. On 2 cores with
MKL, 2 or 3 rows take about two and three times as long as one, and 4 or 5 rows less than 2
(``benchmarks/verify_widths.py`` times them). So a verification of 1 or 2 drafted tokens is cheaper padded to 5
positions. The pads come after the real positions, which never attend to them, and the rollback after the
round forgets them with the rejected drafts, so no output changes.

Which widths are cheap is measured, not assumed: another library, CPU or thread count has other ones, and a proxy
(one weight's product) missed what the whole forward pays. The warm-up times each width it may pad to a couple of
times (:meth:`WidthCosts.fill`), the verifier adds every verification's time, keeps them per model for the
process's life, and pads to the cheapest; a tree's verification is padded as a chain's is. Off the CPU every
width runs as it is: a GPU's forward over a few positions costs about the same whatever their number, and timing
its asynchronous kernels would need a synchronisation every round. No library offers this choice, hence this module.

Past the padded widths a width is priced from the forwards the tree budget timed in the same warm-up
(:meth:`WidthCosts.time_wide`), for a ranked tree's sizes before the run times them.

It also keeps, per model, what each draft length's verification cost in earlier runs (:func:`remembered_times`),
and prices each length from those times (:func:`verify_prices`), for the adaptive draft length. It knows widths
and the clock, and nothing of models beyond using one as the key its times are kept under, nor of drafts,
acceptance or caches.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable

import numpy

from .model_state import state_of

MAX_WIDTH = 8  # wider verifications run as they are: past 8 rows the kernels' costs grow with the width again
GAIN = 0.85  # pad only to a width measured at least 15 % cheaper: a smaller difference may be noise
TRIES = 2  # forwards of a width before its times are compared (a first one may pay a kernel's warm-up)
STALE = 64  # forwards after which a width's times are taken again: one timed while the machine was busy does not
# price it for the rest of the process


class WidthCosts:
    """The measured seconds of a model's forwards of 2 .. MAX_WIDTH positions, and the width to run each at."""

    def __init__(self) -> None:
        self.seconds: dict[int, deque[float]] = {w: deque(maxlen=8) for w in range(2, MAX_WIDTH + 1)}
        self.forwards = 0  # forwards observed so far
        self.timed_at: dict[int, int] = {}  # each width's last forward, by that count
        # Forwards past MAX_WIDTH, in one-position forwards timed with them (the tree budget's, :mod:`.tree_budget`):
        # how a wide tree's verification costs more than one of MAX_WIDTH positions, by width.
        self.wide: dict[int, float] = {}

    def width_for(self, width: int, room: int) -> int:
        """The width to run a forward of ``width`` positions at, at most ``room`` (the positions the model has left
        and the cache holds: a pad past them would read a position the model has no embedding for).

        Until each candidate (``width`` and every wider one up to MAX_WIDTH that fits) was timed TRIES times, the
        first one short of that, so that it gets timed; one last timed STALE forwards ago is timed again (its
        times may be a busy moment's); then the cheapest, where it costs at most GAIN times ``width``'s own time,
        else ``width``."""
        if not 2 <= width <= MAX_WIDTH:
            return width
        candidates = range(width, max(width, min(MAX_WIDTH, room)) + 1)
        for v in candidates:
            if self.forwards - self.timed_at.get(v, self.forwards) > STALE:
                self.seconds[v].clear()  # its old times go: they are what may have been a busy moment's
            if len(self.seconds[v]) < TRIES:
                return v
        return self._padded(width, candidates)[0]

    def _padded(self, width: int, candidates: range) -> tuple[int, float]:
        """The width to run ``width`` at among ``candidates`` (each timed), and its median seconds."""
        cost = {v: statistics.median(self.seconds[v]) for v in candidates}
        best = min(candidates, key=lambda v: (cost[v], v))
        return (best, cost[best]) if cost[best] <= GAIN * cost[width] else (width, cost[width])

    def price(self, width: int) -> float | None:
        """What a forward of ``width`` positions costs as :meth:`width_for` runs it (padded), by the times so far;
        None where a width it may pad to is short of its tries. Past MAX_WIDTH, MAX_WIDTH's price grown as
        :meth:`time_wide`'s forwards grow from MAX_WIDTH to ``width`` (None past the widest of them)."""
        if width > MAX_WIDTH:
            base, grows, at = self.price(MAX_WIDTH), self._wide(width), self._wide(MAX_WIDTH)
            return None if base is None or grows is None or not at else base * max(1.0, grows / at)
        candidates = range(width, MAX_WIDTH + 1)
        if not 2 <= width <= MAX_WIDTH or any(len(self.seconds[v]) < TRIES for v in candidates):
            return None
        return self._padded(width, candidates)[1]

    def time_wide(self, seconds: dict[int, float]) -> None:
        """Forwards of the widths ``seconds`` holds (one position's among them) took those seconds, timed together:
        what prices the widths past MAX_WIDTH. Kept for the process's life, as the tree budget they were timed for."""
        one = seconds.get(1)
        if one:
            self.wide = {w: s / one for w, s in sorted(seconds.items())}

    def _wide(self, width: int) -> float | None:
        """A forward of ``width`` positions in one-position forwards, on the line between the two :meth:`time_wide`
        timed around it (a forward's cost is about linear in its width between them); None outside them."""
        if not self.wide or not min(self.wide) <= width <= max(self.wide):
            return None
        return float(numpy.interp(width, list(self.wide), list(self.wide.values())))  # its widths in order

    def forget_stale(self) -> int:
        """Forget the times of every width last timed STALE forwards ago (a busy moment's, maybe); how many widths
        are then short of TRIES times."""
        for w in self.seconds:
            if self.forwards - self.timed_at.get(w, self.forwards) > STALE:
                self.seconds[w].clear()
        return sum(len(seconds) < TRIES for seconds in self.seconds.values())

    def fill(self, time_width: Callable[[int], float]) -> int:
        """Time now every width short of TRIES times (or last timed STALE forwards ago) with ``time_width(w)``,
        the widths in turn, so that a run's own verifications never run at a width only to time it (on a CPU a
        verification of 3 positions may cost what one of 5 does and more: a short answer cannot afford to find
        out). A warm-up's work; returns the forwards it timed."""
        self.forget_stale()
        timed = 0
        for _ in range(TRIES):
            for w, seconds in self.seconds.items():
                if len(seconds) < TRIES:
                    self.observe(w, time_width(w))
                    timed += 1
        return timed

    def observe(self, width: int, seconds: float) -> None:
        """A forward of ``width`` positions took ``seconds``."""
        self.forwards += 1
        if width in self.seconds:
            self.seconds[width].append(seconds)
            self.timed_at[width] = self.forwards


def width_costs(model: object) -> WidthCosts:
    """The width costs measured for ``model`` by the runs of this process so far, to be added to."""
    state = state_of(model)
    if state.width_costs is None:
        state.width_costs = WidthCosts()
    costs: WidthCosts = state.width_costs
    return costs


Times = dict[int, deque[float]]  # draft length k -> verify seconds of its last 16 rounds (the adaptive policy's)

# What verifying each draft length cost, per target model, kept from run to run: it is the model's and the
# device's, not the prompt's, and a short run cannot afford to measure it again (on a CPU, trying a costly width
# three times is a sizeable share of a short answer). But attention reads the whole context, so it is kept per
# context length, to the power of two: a verification priced after a short context would stop a long prompt's
# drafting where drafting pays. Padded verifications (a static cache) are kept apart: their width is always the
# longest. They live in the model's state.


def remembered_times(model: object, context_length: int, padded: bool = False) -> Times:
    """The verify times of ``model`` after about ``context_length`` tokens measured by earlier runs of this
    process, to be added to by this one."""
    return state_of(model).verify_times.setdefault((padded, context_length.bit_length()), {})


TRUSTED = 3  # rounds of one draft length after which its own median alone prices it


def verify_prices(times_by_k: Times, max_k: int, fit: tuple[float, float], push: bool,
                  forwards: dict[int, float] | None = None) -> list[float]:
    """Seconds to verify k = 0 .. max_k drafted tokens, for the adaptive draft length: a k's own median once timed
    TRUSTED times; until then a guess on the cheap side, so that an untried or unlucky width gets tried: the lower
    of the line ``fit`` (c0 + c1 * k) and its own times.

    ``push`` (a draft model): the guess is also at most the cheapest verification timed. A draft model that stops
    drafting when unsure may never produce the long draft asked for, so that width is never timed, and the line
    extrapolated from the short drafts that cost the most (on a CPU) priced it out for good; asked for, it is
    drafted as far as the draft is confident, as with a fixed k. A lookup's replay needs no such push (a width it
    chooses gets timed), and on prose every wider verification it tried would be a loss.

    ``forwards``: a forward's seconds for k drafted tokens where the warm-up timed them (:meth:`WidthCosts.price`),
    the guess instead of the line: on a CPU the widths' costs are no line."""
    c0, c1 = fit
    timed = {k: statistics.median(ts) for k, ts in times_by_k.items() if ts}
    cheapest = min((t for k, t in timed.items() if k > 0), default=None)
    prices = []
    for k in range(max_k + 1):
        if len(times_by_k.get(k, ())) >= TRUSTED:
            prices.append(timed[k])
            continue
        guess = forwards[k] if forwards is not None and k in forwards else c0 + c1 * k
        guesses = [guess, *([timed[k]] if k in timed else [])]
        if push and k > 0 and cheapest is not None:
            guesses.append(cheapest)
        prices.append(min(guesses))
    # A verification does a plain step's work and more: one priced under a step is noise (tiny models, where
    # every width costs about the same), and drafting on it would look free.
    return [prices[0], *(max(p, prices[0]) for p in prices[1:])]
