"""One line of run statistics: state, tokens, tokens/s, target forwards, tokens per forward, acceptance, elapsed.

While a run is going the counts come from the events seen so far; once it
finishes they are the core's exact ``Finished`` figures.
"""

from __future__ import annotations

from ...core.events import Finished
from .live_panel import LivePanel


class StatsBar(LivePanel):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("loading…", **kwargs)
        self.state = "loading"
        self.tokens = 0
        self.forwards = 0
        self.drafted = 0
        self.accepted = 0
        self.elapsed_s = 0.0
        self.result: Finished | None = None

    def reset(self, state: str) -> None:
        self.state, self.tokens, self.forwards, self.drafted, self.accepted = state, 0, 0, 0, 0
        self.elapsed_s, self.result = 0.0, None

    def refresh_stats(self) -> None:
        r = self.result
        tokens = r.new_tokens if r else self.tokens
        forwards = r.target_forwards if r else self.forwards
        elapsed = r.elapsed_s if r else self.elapsed_s
        rate = r.tokens_per_s if r else (tokens / elapsed if elapsed > 0 else 0.0)
        noun = "token" if tokens == 1 else "tokens"
        parts = [self.state, f"{tokens} {noun}", f"{rate:.1f} tok/s", f"{forwards} target forwards"]
        if forwards:
            parts.append(f"{tokens / forwards:.2f} tok/forward")
        drafted = r.drafted if r and r.drafted is not None else self.drafted
        accepted = r.accepted if r and r.accepted is not None else self.accepted
        if drafted:
            parts.append(f"acceptance {accepted / drafted:.0%}")
        parts.append(f"{elapsed:.1f} s")
        if r is not None:
            parts.append(f"finish: {r.finish_reason}")
        self.update(" · ".join(parts))
