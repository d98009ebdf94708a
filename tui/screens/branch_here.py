"""Branch here: the selected position's candidates (with their raw probabilities beside) and a field for any
text; choosing one rewinds the run to that position, forces the choice and decodes on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from ...core.record.transcript import TokenStats
from ..numbers import nth, percent


@dataclass(frozen=True)
class Choice:
    """What to force: a candidate by id, or a typed text (``token_id`` None: the source tokenizes it)."""

    text: str
    token_id: int | None = None
    stats: TokenStats | None = None  # a candidate's raw log-prob, entropy and rank, where known


@dataclass(frozen=True)
class Row:
    """One candidate: its id, text, probability after the run's active stages, its raw probability, and its
    raw figures (log-prob, entropy, rank) where the run gave them."""

    token_id: int
    text: str
    prob: float
    raw: float | None
    chosen: bool
    stats: TokenStats | None = None


class BranchHere(ModalScreen[Choice | None]):
    CSS_PATH = "branch_here.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel", id="branch.cancel")]

    def __init__(self, position: int, current: str, rows: list[Row], stages: str) -> None:
        """``stages``: which stages the probabilities are after (e.g. "after temperature, top_k")."""
        super().__init__()
        self.position, self.current, self.rows, self.stages = position, current, rows, stages

    def compose(self) -> ComposeResult:
        with Vertical(id="branch-box"):
            yield Label(f"Branch at token {nth(self.position)} (the run chose {self.current!r}): pick another token, "
                        "or type any text; the run rewinds here, forces it and decodes on. The old path is kept "
                        "(B lists every branch). esc cancels.", id="branch-title")
            if self.rows:
                yield Label(f"candidates: p {self.stages} · raw p before any stage", id="branch-legend")
                yield OptionList(*(Option(self._label(r), id=str(i)) for i, r in enumerate(self.rows)),
                                 id="branch-candidates")
            else:
                yield Label("This mode did not record the candidates at this position: type the text to force.",
                            id="branch-legend")
            yield Input(placeholder="or type any text to force here", id="branch-text")

    @staticmethod
    def _label(row: Row) -> str:
        raw = f"   raw {percent(row.raw)}" if row.raw is not None else ""
        mark = "▶ " if row.chosen else "  "
        return f"{mark}{row.text!r:<20} {percent(row.prob):>7}{raw}"

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        row = self.rows[int(event.option.id or 0)]
        self.dismiss(Choice(row.text, row.token_id, row.stats))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.value:
            self.dismiss(Choice(event.value))

    def action_cancel(self) -> None:
        self.dismiss(None)
