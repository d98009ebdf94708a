"""The streaming text: every emitted piece, coloured by where its token came from.

Pieces never hold half a character (the core's detokeniser sees to it), so
the pane never shows broken UTF-8. ``boundaries`` alternates a background per
token so the tokenisation is visible; a selected token (moved with the arrow
keys) is shown reversed, and the app shows its alternatives beside it.
"""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.widgets import Static

from ...core.events import TokenEmitted


class TextPane(Static):
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "text-pane--target", "text-pane--draft", "text-pane--lookup", "text-pane--resampled", "text-pane--bonus",
        "text-pane--boundary-a", "text-pane--boundary-b", "text-pane--selected",
    }

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.pieces: list[TokenEmitted] = []
        self.boundaries = False
        self.selected: int | None = None  # index into pieces

    def reset(self) -> None:
        self.pieces, self.selected = [], None
        self.update("")

    def add(self, pieces: list[TokenEmitted]) -> None:
        """Append a batch of pieces and redraw once."""
        if pieces:
            self.pieces.extend(pieces)
            self.redraw()

    def select(self, delta: int) -> TokenEmitted | None:
        """Move the selection by ``delta`` tokens (from the last token when nothing is selected)."""
        if not self.pieces:
            return None
        start = len(self.pieces) if self.selected is None else self.selected
        self.selected = max(0, min(len(self.pieces) - 1, start + delta))
        self.redraw()
        return self.pieces[self.selected]

    def clear_selection(self) -> None:
        self.selected = None
        self.redraw()

    def redraw(self) -> None:
        styles = {name: self.get_component_rich_style(f"text-pane--{name}")
                  for name in ("target", "draft", "lookup", "resampled", "bonus")}
        shades = (self.get_component_rich_style("text-pane--boundary-a"),
                  self.get_component_rich_style("text-pane--boundary-b"))
        selected = self.get_component_rich_style("text-pane--selected")
        text = Text()
        for i, piece in enumerate(self.pieces):
            style: Style = styles[piece.source]
            if self.boundaries:
                style = style + shades[i % 2]
            if i == self.selected:
                style = style + selected
            # A token whose piece is empty (it ends inside a character) still gets a visible mark when selected.
            text.append(piece.text or ("·" if i == self.selected or self.boundaries else ""), style=style)
        self.update(text)
        if self.selected is None:
            self.scroll_end(animate=False)

    @property
    def plain(self) -> str:
        return "".join(p.text for p in self.pieces)
