"""Parameters a front end may change while a run is going.

The TUI turns the temperature up mid-run; the decoder thread should use the
new value from its next step on, without a restart and without ever seeing
half an update. :class:`LiveParams` holds the current (frozen, already
validated) sampling and draft settings behind a lock with a version number;
a strategy reads a consistent snapshot at each step boundary and rebuilds its
processors only when the version moved.

What can change here is what can change between two steps without breaking
the algorithm: the sampling stages (temperature, top-k, top-p, repetition
penalty), the draft length and the prompt-lookup n-gram size. Anything that
changes the shape of the search (the mode, the number of beams, the model,
the prompt) needs a new run; the front end decides that, not this module.
It knows parameters, not strategies or threads beyond its lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .params import DraftParams, SamplingParams


@dataclass(frozen=True)
class Snapshot:
    version: int
    sampling: SamplingParams
    draft: DraftParams


class LiveParams:
    """Thread-safe holder of the settings a running strategy re-reads at every step."""

    def __init__(self, sampling: SamplingParams, draft: DraftParams | None = None) -> None:
        self._lock = threading.Lock()
        self._snapshot = Snapshot(0, sampling, draft or DraftParams())

    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._snapshot

    @property
    def version(self) -> int:
        return self._snapshot.version  # a single attribute read; the lock guards the swap

    def changed_since(self, version: int) -> Snapshot | None:
        """The current settings if they changed after ``version`` (the caller's last read), else None.

        A strategy calls this once per step: ``if (snap := live.changed_since(version)) is not None: ...``.
        """
        snapshot = self._snapshot  # one attribute read: a swap is atomic, so this is never half an update
        return snapshot if snapshot.version != version else None

    def update(self, sampling: SamplingParams | None = None, draft: DraftParams | None = None) -> Snapshot:
        """Swap in new settings (validated by their own constructors); returns the new snapshot."""
        with self._lock:
            old = self._snapshot
            self._snapshot = Snapshot(old.version + 1, sampling or old.sampling, draft or old.draft)
            return self._snapshot
