"""The candidate distribution of the current step, stage by stage, with the drawn token marked."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text

from ...core.events import TokenSampled
from .live_panel import LivePanel

BAR_WIDTH = 20
STAGE_NAMES = {"raw": "raw logits", "repetition_penalty": "repetition penalty", "temperature": "temperature",
               "top_k": "top-k", "top_p": "top-p"}


class CandidatesPanel(LivePanel):
    """Top candidates after each sampling stage (raw, penalty, temperature, top-k, top-p) as bars."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"candidates--bar", "candidates--chosen", "candidates--stage"}

    def __init__(self, top: int = 5, **kwargs: object) -> None:
        super().__init__("waiting for the first step", **kwargs)
        self.top = top
        self.last: TokenSampled | None = None
        self.glyphs: dict[str, str] = {}

    def show(self, step: TokenSampled) -> None:
        self.last = step
        self.redraw()

    def redraw(self) -> None:
        step = self.last
        if step is None:
            return
        bar_style = self.get_component_rich_style("candidates--bar")
        chosen_style = self.get_component_rich_style("candidates--chosen")
        stage_style = self.get_component_rich_style("candidates--stage")
        table = Table.grid(padding=(0, 1))
        how = "argmax" if step.greedy else "drawn"
        table.add_row(Text(f"step {step.step}: {how} {step.text!r}  p={step.prob:.3f}", style=chosen_style), "", "")
        for stage in step.stages:
            table.add_row(Text(STAGE_NAMES[stage.stage], style=stage_style), "", "")
            for candidate in stage.candidates[: self.top]:
                chosen = candidate.token_id == step.token_id
                marker = self.glyphs.get("chosen", ">") if chosen else " "
                label = Text(f"{marker} {candidate.text!r}", style=chosen_style if chosen else "")
                bar = Text("█" * max(1, round(candidate.prob * BAR_WIDTH)), style=bar_style)
                table.add_row(label, bar, f"{candidate.prob:6.1%}")
        self.update(table)
