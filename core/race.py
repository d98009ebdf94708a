"""A race of decoding modes on one prompt: each mode run alone, warm, with every event's time kept.

Running the modes at once on one device would slow each by the others, and
the race would show contention, not the modes. So each mode is warmed up
(core/warmup.py), then run on its own, one after another; a lane keeps the
run's events with their seconds since its first event. Played back side by
side from the same start (the app's race screen), each lane then moves at the
pace it really had. Plain greedy is the baseline of every speed-up.

It knows runs and events; nothing about files or display.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .events import Event, Finished
from .params import DecodeConfig
from .warmup import warm_up

if TYPE_CHECKING:
    from .drafters import DraftModel
    from .loading import LoadedModel

BASELINE = "greedy"


@dataclass(frozen=True)
class Lane:
    """One mode's run: its name, its settings and its events, each with the seconds since the run's first."""

    name: str
    config: DecodeConfig
    events: tuple[tuple[float, Event], ...]

    @property
    def finished(self) -> Finished | None:
        last = self.events[-1][1] if self.events else None
        return last if isinstance(last, Finished) else None


def speedup(lane: Lane, baseline: Lane) -> float | None:
    """``lane``'s tokens per second over the baseline's (None until both have finished)."""
    mine, base = lane.finished, baseline.finished
    if mine is None or base is None or not base.tokens_per_s:
        return None
    return mine.tokens_per_s / base.tokens_per_s


def measure(lm: LoadedModel, prompt: str, configs: Mapping[str, DecodeConfig], *, draft: DraftModel | None = None,
            progress: Callable[[str], None] | None = None) -> list[Lane]:
    """Each config warmed up, then run alone; the lanes in ``configs``' order (greedy among them: the baseline)."""
    from .run import Run

    if BASELINE not in configs or len(configs) < 2:
        raise ValueError("a race needs plain greedy and at least one other mode")
    for name, config in configs.items():
        if progress is not None:
            progress(f"warming up {name}")
        warm_up(lm, prompt, config, draft)
    lanes = []
    for name, config in configs.items():
        if progress is not None:
            progress(f"running {name} alone")
        events: list[tuple[float, Event]] = []
        start: float | None = None
        for event in Run(lm, prompt, config, draft).events():
            now = time.perf_counter()
            start = now if start is None else start
            events.append((now - start, event))
        lanes.append(Lane(name, config, tuple(events)))
    return lanes
