"""One line of run statistics: state, tokens, tokens per forward, finish reason."""

from __future__ import annotations

from textual.widgets import Static

from ...core.events import Finished


class StatsBar(Static):
    def __init__(self, **kwargs: object) -> None:
        super().__init__("loading…", **kwargs)  # type: ignore[arg-type]
        self.state = "loading"
        self.tokens = 0
        self.result: Finished | None = None

    def refresh_stats(self) -> None:
        parts = [self.state, f"{self.tokens} tokens"]
        if self.result is not None:
            r = self.result
            per_forward = r.new_tokens / r.target_forwards if r.target_forwards else 0.0
            parts += [f"{r.target_forwards} target forwards ({per_forward:.2f}/forward)",
                      f"finish: {r.finish_reason}"]
            if r.acceptance_rate is not None:
                parts.append(f"acceptance {r.acceptance_rate:.0%}")
        self.update(" · ".join(parts))
