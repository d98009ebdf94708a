"""How often the app repaints while a run streams: often enough to look live, rarely enough to leave the decoder alone.

Every paint costs the UI thread CPU time and holds the interpreter lock, which the decoder thread needs
between torch ops. On a machine whose cores are all busy decoding (two cores here, both running torch's
OpenMP threads) that time comes straight out of decoding (BENCHMARKS.md, "The app against headless"). A fixed
rate is either too slow
for a fast machine or too costly for a slow one, so the :class:`PaintPacer` measures what the UI thread
actually spent (``time.thread_time``, the calling thread's own CPU clock) between two paints and spaces
the next one so that the UI thread's share of a core stays within ``budget``: cheap paints go at up to
``max_hz``, costly ones no slower than ``min_hz``.

It paces the paints of a streaming run only. Paints a user is waiting for (a key, a pause, a step, the
end of a run, an error) are the app's to make at once, whatever the pacer says. It knows nothing of
widgets, events or threads beyond reading the calling thread's clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class PaintPacer:
    """Says when the next paint of a streaming run is due, keeping the UI thread's CPU share within a budget."""

    def __init__(self, max_hz: float = 8.0, min_hz: float = 2.0, budget: float = 0.02,
                 cpu_clock: Callable[[], float] = time.thread_time) -> None:
        if not 0 < min_hz <= max_hz:
            raise ValueError(f"need 0 < min_hz <= max_hz, got min_hz={min_hz}, max_hz={max_hz}")
        if not 0 < budget <= 1:
            raise ValueError(f"budget is a share of one core, in (0, 1]; got {budget}")
        self.max_hz, self.min_hz, self.budget = max_hz, min_hz, budget
        self.cpu_clock = cpu_clock
        self.interval = 1 / max_hz  # until a paint has been measured, assume it is cheap
        self._painted_at: float | None = None
        self._cpu_at = 0.0

    def due(self, now: float) -> bool:
        return self._painted_at is None or now - self._painted_at >= self.interval

    def painted(self, now: float) -> None:
        """Note a paint made at ``now`` (whether paced or urgent) and set the interval to the next one.

        The UI thread's CPU time since the previous paint is that paint, the compositor's pass after it,
        and the drain ticks and keys in between; spacing paints by ``spent / budget`` keeps the share at
        ``budget``. Smoothed, so one slow paint (a garbage collection, a full-screen redraw after a key)
        does not halve the frame rate for the next second.
        """
        cpu = self.cpu_clock()
        if self._painted_at is not None:
            wanted = (cpu - self._cpu_at) / self.budget
            self.interval = 0.7 * self.interval + 0.3 * min(max(wanted, 1 / self.max_hz), 1 / self.min_hz)
        self._painted_at, self._cpu_at = now, cpu

    @property
    def hz(self) -> float:
        return 1 / self.interval
