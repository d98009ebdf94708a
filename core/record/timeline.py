"""A forward-pass timeline: one row per target forward of a run, to see why it was fast or slow.

Each row says what one target forward pass produced: how many tokens, the
draft it verified (k, how many were accepted), the draft's and the
verification's own time as the strategy measured them, and the wall time
since the previous forward ended (what the run really spent on it, drafting,
lookups and events included). Rows are built from the events alone, by
``target_forwards`` (which every event that changes it carries), so the same
code serves a live run (:meth:`Timeline.watch` stamps each event as it
arrives) and a recording (:meth:`Timeline.add` with the recorded times).

:func:`expected_tokens_per_forward` gives what the measured acceptance rate
predicts a round yields, (1 - a^(k+1)) / (1 - a) (Leviathan et al. 2023,
eq. 1, with a the per-position acceptance rate), to set beside the observed
figure: more observed than expected means acceptances come in runs (a copied
passage), less means they fail together. :func:`sparkline` draws acceptance
by draft position. It knows events; nothing about how rows are shown.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .draft_stats import DraftStats, fit_verify_costs
from .events import DraftProposed, DraftVerified, Event, Finished, Started, TokenEmitted

BARS = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class ForwardRow:
    """One target forward pass."""

    forward: int  # its number in the run, from 1 (the prefill)
    tokens: int  # tokens it added to the output
    k: int | None  # draft tokens (a tree's nodes) it verified (None: a prefill or a plain step)
    accepted: int | None
    draft_ms: float | None  # the drafter's time for this round's draft
    verify_ms: float | None  # the verification's time (the forward and the acceptance test)
    wall_ms: float  # since the previous forward's last event: everything this forward cost the run
    step_ms: float | None = None  # a plain step's time, timed at the run's start (its DraftVerified says it)
    draft_fed: int | None = None  # a draft model's context tokens fed before drafting (DraftVerified.draft_fed)
    depth: int | None = None  # a tree's longest path (None: a chain, k deep)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Timeline:
    """Builds :class:`ForwardRow` s from a run's events and the times they arrived."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.rows: list[ForwardRow] = []
        self._forward: int | None = None
        self._tokens = 0
        self._verified: DraftVerified | None = None
        self._depth: int | None = None  # the latest proposal's, where it was a tree
        self._began: float | None = None  # when the previous forward ended (or the run started)
        self._last = 0.0  # the current forward's last event

    def watch(self, events: Iterable[Event]) -> Iterator[Event]:
        """Pass ``events`` through, stamping each with the moment it arrived."""
        for event in events:
            self.add(event, time.perf_counter())
            yield event

    def add(self, event: Event, now: float) -> None:
        if isinstance(event, Started):
            self._reset()  # a new run, a new timeline
            self._began = now
            return
        if isinstance(event, Finished):
            self._close()
            return
        if isinstance(event, DraftProposed):
            tree = event.tree
            self._depth = tree.depth if tree is not None else None
        forward = getattr(event, "target_forwards", None)
        if forward is None:
            return
        if forward != self._forward:
            self._close()
            self._forward, self._tokens, self._verified = forward, 0, None
            if self._began is None:
                self._began = now
        if isinstance(event, TokenEmitted):
            self._tokens += 1
        elif isinstance(event, DraftVerified):
            self._verified = event
        self._last = now

    def close(self) -> None:
        """Close the forward in progress: a row is otherwise closed by the next forward's first event, so a run
        paused or stepping at a round's end would show its latest forward only once the next one began."""
        self._close()

    def _close(self) -> None:
        if self._forward is None or self._began is None:
            return
        v = self._verified
        self.rows.append(ForwardRow(
            forward=self._forward, tokens=self._tokens, k=len(v.verdicts) if v else None,
            accepted=v.accepted if v else None,
            draft_ms=v.draft_s * 1e3 if v and v.draft_s is not None else None,
            verify_ms=v.verify_s * 1e3 if v and v.verify_s is not None else None,
            wall_ms=(self._last - self._began) * 1e3,
            step_ms=v.step_s * 1e3 if v and v.step_s is not None else None, draft_fed=v.draft_fed if v else None,
            depth=self._depth if v else None))
        self._began, self._forward = self._last, None


def draft_stats(rows: Sequence[ForwardRow]) -> DraftStats:
    """The counters of a run's verifying forwards, for a view that has only those: what the run itself counted
    (core/record/draft_stats.py)."""
    stats = DraftStats()
    for r in rows:
        if r.step_ms is not None:
            stats.plain_step_s = r.step_ms / 1e3
        if r.k is not None:
            stats.record(r.k if r.depth is None else r.depth, r.accepted or 0,
                         None if r.draft_ms is None else r.draft_ms / 1e3,
                         None if r.verify_ms is None else r.verify_ms / 1e3, r.tokens, r.draft_fed,
                         None if r.depth is None else r.k)
    return stats


def per_position_rate(rows: Sequence[ForwardRow]) -> float | None:
    """The per-position acceptance rate a: accepted / tested positions (a round tests up to its first rejection),
    counted as a run counts it (:meth:`DraftStats.alpha`)."""
    return draft_stats(rows).alpha()


def expected_tokens_per_forward(rows: Sequence[ForwardRow]) -> tuple[float, float] | None:
    """(expected, observed) tokens per verifying forward: (1 - a^(k+1)) / (1 - a) at each round's k, and k + 1
    accepted-plus-one as the rounds went; None without a draft round."""
    rounds = [r for r in rows if r.k]
    a = per_position_rate(rows)
    if not rounds or a is None:
        return None
    expected = [float(r.k + 1) if a >= 1 else (1 - a ** (r.k + 1)) / (1 - a) for r in rounds if r.k]
    observed = [(r.accepted or 0) + 1 for r in rounds]
    return sum(expected) / len(expected), sum(observed) / len(observed)


def sparkline(values: Sequence[float]) -> str:
    """One bar per value in 0..1 (acceptance by draft position): ▁ for 0 up to █ for 1."""
    return "".join(BARS[min(len(BARS) - 1, max(0, round(v * (len(BARS) - 1))))] for v in values)


def verify_line(rows: Sequence[ForwardRow]) -> tuple[float, float] | None:
    """:func:`fit_verify_costs` of a run's verifying forwards, in seconds."""
    by_k: dict[int, list[float]] = {}
    for r in rows:
        if r.k is not None and r.verify_ms is not None:
            by_k.setdefault(r.k, []).append(r.verify_ms / 1e3)
    return fit_verify_costs(by_k)
