"""Every key binding with its description, and what the colours and glyphs mean."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..bindings import explained


def key_label(key: str) -> str:
    return {"space": "space", "question_mark": "?", "left": "←", "right": "→", "escape": "esc"}.get(key, key)


class HelpScreen(ModalScreen[None]):
    CSS_PATH = "help.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark,f1", "dismiss", "Close help", id="help.close"),
    ]

    def __init__(self, bindings: list[Binding], glyphs: dict[str, str]) -> None:
        super().__init__()
        self.bindings_shown = bindings
        self.glyphs = glyphs

    def compose(self) -> ComposeResult:
        table = Table(title="decode-tui keys · esc closes, ↑↓ scroll", title_justify="left", expand=True)
        table.add_column("key", no_wrap=True)
        table.add_column("does")
        table.add_column("id", style="dim", no_wrap=True)
        for b in self.bindings_shown:
            keys = " / ".join(key_label(k) for k in b.key.split(","))
            table.add_row(keys, explained(b), b.id or "")
        g = self.glyphs
        legend = (f"Text colours: target · accepted draft · lookup copy · resampled · bonus (see the theme).\n"
                  f"Draft rows: {g.get('accepted', '')} accepted  {g.get('rejected', '')} rejected (struck)  "
                  f"{g.get('resampled', '')} resampled from max(0, p-q)  {g.get('bonus', '')} bonus token.\n"
                  "Changes to sampling, draft length and n-gram size apply at the next step (the next run's, once a "
                  "run has ended: r restarts); mode, beams, prompt and model restart the run. ctrl+p opens the "
                  "command palette (also: load another model).")
        with VerticalScroll(id="help-body"):
            yield Static(table)
            yield Static(legend, id="help-legend")
