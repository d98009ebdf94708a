"""One line of run statistics: state, tokens, tokens/s, target forwards, tokens per forward, acceptance, elapsed.

It shows a :class:`~decode_tui.tui.run_view.Counters`: while a run is going the
counts come from the events seen so far; once it finishes they are the core's
exact ``Finished`` figures.
"""

from __future__ import annotations

from ..run_view import Counters
from .live_panel import LivePanel


class StatsBar(LivePanel):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("loading…", **kwargs)
        self.counters = Counters()

    def show(self, counters: Counters) -> None:
        self.counters = counters
        r = counters.result
        tokens = r.new_tokens if r else counters.tokens
        forwards = r.target_forwards if r else counters.forwards
        elapsed = r.elapsed_s if r else counters.elapsed_s
        rate = r.tokens_per_s if r else (tokens / elapsed if elapsed > 0 else 0.0)
        noun = "token" if tokens == 1 else "tokens"
        parts = [counters.state, f"{tokens} {noun}", f"{rate:.1f} tok/s", f"{forwards} target forwards"]
        if forwards:
            parts.append(f"{tokens / forwards:.2f} tok/forward")
        drafted = r.drafted if r and r.drafted is not None else counters.drafted
        accepted = r.accepted if r and r.accepted is not None else counters.accepted
        if drafted:
            parts.append(f"acceptance {accepted / drafted:.0%}")
        parts.append(f"{elapsed:.1f} s")
        if r is not None:
            parts.append(f"finish: {r.finish_reason}")
        if counters.kernels:  # so a speed that changes when the compiled kernels arrive says why
            parts.append(f"kernels: {counters.kernels}")
        self.update(" · ".join(parts))
