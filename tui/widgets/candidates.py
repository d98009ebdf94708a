"""The candidate distribution of the current step, stage by stage, with the drawn token marked."""

from __future__ import annotations

from rich.table import Table
from textual.widgets import Static

from ...core.events import TokenSampled

BAR_WIDTH = 20


class CandidatesPanel(Static):
    """Top candidates after each sampling stage (raw, penalty, temperature, top-k, top-p) as bars."""

    def __init__(self, top: int = 5, **kwargs: object) -> None:
        super().__init__("waiting for the first step", **kwargs)  # type: ignore[arg-type]
        self.top = top
        self.last: TokenSampled | None = None

    def show(self, step: TokenSampled) -> None:
        self.last = step
        table = Table.grid(padding=(0, 1))
        for stage in step.stages:
            table.add_row(f"[b]{stage.stage}[/b]", "", "")
            for candidate in stage.candidates[: self.top]:
                bar = "█" * max(1, round(candidate.prob * BAR_WIDTH))
                marker = "▶" if candidate.token_id == step.token_id else " "
                table.add_row(f"{marker} {candidate.text!r}", bar, f"{candidate.prob:6.1%}")
        self.update(table)
