"""What a run's draft rounds added up to: drafted, accepted, where the time went, acceptance by position.

The speculative loop records every round here for its ``Finished`` event, and
a viewer records the rounds it is shown with the same class, so both count
alike. Plain arithmetic: no torch, no events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class DraftStats:
    """Counters for the Finished event: what was drafted, what was accepted, where the time went."""

    drafted: int = 0
    accepted: int = 0
    draft_forwards: int = 0
    draft_time_s: float = 0.0
    verify_time_s: float = 0.0
    reached: list[int] = field(default_factory=list)  # drafts that reached position i
    accepted_at: list[int] = field(default_factory=list)  # ... and were accepted there

    def record(self, k: int, n: int) -> None:
        self.drafted += k
        self.accepted += n
        while len(self.reached) < k:
            self.reached.append(0)
            self.accepted_at.append(0)
        for i in range(k):
            self.reached[i] += 1
            self.accepted_at[i] += i < n

    def by_position(self) -> tuple[float, ...]:
        """For each draft position, the share of the drafts that reached it which were accepted there."""
        return tuple(a / r for a, r in zip(self.accepted_at, self.reached, strict=True))

    def extras(self) -> dict[str, Any]:
        return {
            "drafted": self.drafted,
            "accepted": self.accepted,
            "draft_forwards": self.draft_forwards,
            "acceptance_rate": self.accepted / self.drafted if self.drafted else 0.0,
            "acceptance_by_position": self.by_position(),
            "draft_time_s": self.draft_time_s,
            "verify_time_s": self.verify_time_s,
        }
