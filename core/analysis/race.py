"""A race of decoding modes on one prompt: each mode run alone, warm, with every event's time kept.

Running the modes at once on one device would slow each by the others, and
the race would show contention, not the modes. So each mode is warmed up
(core/warmup.py), then run on its own, by the protocol every speed-up here
follows (core/analysis/compare.py): rounds of one run a mode, the order reversed from
round to round. A lane keeps its median run's events with their seconds since
its first event, and every run's speed. Played back side by side from the
same start (the app's race screen), each lane moves at the pace it really
had; its speed-up over plain greedy is the median of the rounds' ratios, with
their range.

It knows runs and events; nothing about files or display.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ..params import DecodeConfig
from ..record.events import Event, Finished
from ..warmup import warm_up

if TYPE_CHECKING:
    from ..drafting.draft_models import DraftModel
    from ..model.loading import LoadedModel

BASELINE = "greedy"
T = TypeVar("T")


@dataclass(frozen=True)
class Lane:
    """One mode in the race: its name, its settings, the run shown (the one of median speed, its events each with
    the seconds since the run's first) and the tokens per second of every timed run, round by round."""

    name: str
    config: DecodeConfig
    events: tuple[tuple[float, Event], ...]
    rates: tuple[float, ...] = ()

    @property
    def finished(self) -> Finished | None:
        last = self.events[-1][1] if self.events else None
        return last if isinstance(last, Finished) else None


@dataclass(frozen=True)
class Spread:
    """A speed-up: the median of the rounds' ratios, their lowest and highest, and how many rounds."""

    median: float
    low: float
    high: float
    runs: int


def speedup(lane: Lane, baseline: Lane) -> Spread | None:
    """``lane``'s tokens per second over the baseline's, round by round (None until both have finished)."""
    if lane.rates and len(lane.rates) == len(baseline.rates):
        ratios = [mine / base for mine, base in zip(lane.rates, baseline.rates, strict=True) if base]
    else:  # a race saved with one run a mode: its shown runs are all there is
        mine, base = lane.finished, baseline.finished
        if mine is None or base is None or not base.tokens_per_s:
            return None
        ratios = [mine.tokens_per_s / base.tokens_per_s]
    if not ratios:
        return None
    return Spread(statistics.median(ratios), min(ratios), max(ratios), len(ratios))


def timed(events: Iterable[Event]) -> Iterator[tuple[float, Event]]:
    """Each event with the seconds since the first one."""
    start: float | None = None
    for event in events:
        now = time.perf_counter()
        start = now if start is None else start
        yield now - start, event


def make_lane(name: str, config: DecodeConfig, runs: Sequence[tuple[tuple[float, Event], ...]]) -> Lane:
    """A mode's lane from its timed runs (round by round): the median-speed run shown, every run's speed kept."""
    def rate(run: tuple[tuple[float, Event], ...]) -> float:
        last = run[-1][1] if run else None
        return last.tokens_per_s if isinstance(last, Finished) else 0.0

    rates = tuple(rate(run) for run in runs)
    shown = sorted(range(len(runs)), key=lambda i: rates[i])[len(runs) // 2]
    return Lane(name, config, runs[shown], rates)


def rounds(names: Sequence[T], runs: int) -> Iterator[tuple[int, T]]:
    """(round, name) in the protocol's order: ABC, CBA, ABC, ... so a drift in the machine falls on all alike."""
    for i in range(runs):
        for name in names if i % 2 == 0 else reversed(names):
            yield i, name


def measure(lm: LoadedModel, prompt: str, configs: Mapping[str, DecodeConfig], *, runs: int = 3,
            draft: DraftModel | None = None, progress: Callable[[str], None] | None = None) -> list[Lane]:
    """Each config warmed up, then ``runs`` rounds of one run each, alternated; the lanes in ``configs``' order
    (greedy among them: the baseline)."""
    from ..run import Run

    if BASELINE not in configs or len(configs) < 2:
        raise ValueError("a race needs plain greedy and at least one other mode")
    if runs < 1:
        raise ValueError("at least one timed run a mode is needed")
    for name, config in configs.items():
        if progress is not None:
            progress(f"warming up {name}")
        warm_up(lm, prompt, config, draft)
    done: dict[str, list[tuple[tuple[float, Event], ...]]] = {name: [] for name in configs}
    for i, name in rounds(list(configs), runs):
        if progress is not None:
            progress(f"round {i + 1} of {runs}: {name} alone")
        done[name].append(tuple(timed(Run(lm, prompt, configs[name], draft).events())))
    return [make_lane(name, config, done[name]) for name, config in configs.items()]
