"""The streaming text: every emitted piece, coloured by where its token came from.

Pieces never hold half a character (the core's detokeniser sees to it), so
the pane never shows broken UTF-8. ``boundaries`` alternates a background per
token so the tokenisation is visible; a selected token (moved with the arrow
keys) is shown reversed, and the app shows its alternatives beside it.

The pane shows the lines that fit: the newest ones, or those around the
selected token. It does its own windowing instead of Textual scrolling
because a scrollable widget needs a layout pass for every new batch of text
(see :mod:`.live_panel`).
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import RenderableType
from rich.style import Style
from rich.text import Text

from ...core.events import TokenEmitted
from .live_panel import LivePanel


class TextPane(LivePanel):
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "text-pane--target", "text-pane--draft", "text-pane--lookup", "text-pane--resampled", "text-pane--bonus",
        "text-pane--boundary-a", "text-pane--boundary-b", "text-pane--selected",
    }

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)
        self.pieces: list[TokenEmitted] = []
        self.boundaries = False
        self.selected: int | None = None  # index into pieces
        self.selected_offset = 0  # its character offset in the text

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
        self.selected_offset = 0
        for i, piece in enumerate(self.pieces):
            if i == self.selected:
                self.selected_offset = len(text)
            style: Style = styles[piece.source]
            if self.boundaries:
                style = style + shades[i % 2]
            if i == self.selected:
                style = style + selected
            # A token whose piece is empty (it ends inside a character) still gets a visible mark when selected.
            text.append(piece.text or ("·" if i == self.selected or self.boundaries else ""), style=style)
        self.update(text)

    def render(self) -> RenderableType:
        text = self.content
        width, height = self.content_size.width, self.content_size.height
        if not isinstance(text, Text) or width < 1 or height < 1:
            return text
        lines = text.wrap(self.app.console, width)
        if len(lines) <= height:
            return text
        if self.selected is None:
            start = len(lines) - height
        else:  # keep the selected token's line in the middle
            line = len(text[: self.selected_offset].wrap(self.app.console, width)) - 1
            start = max(0, min(len(lines) - height, line - height // 2))
        return Text("\n").join(lines[start : start + height])

    @property
    def plain(self) -> str:
        return "".join(p.text for p in self.pieces)
