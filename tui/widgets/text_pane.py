"""The streaming text: every emitted piece, coloured by where its token came from."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.widgets import Static

from ...core.events import TokenEmitted


class TextPane(Static):
    """Shows the output so far. Pieces never hold half a character (the core's detokeniser sees to it)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "text-pane--target", "text-pane--draft", "text-pane--lookup", "text-pane--resampled", "text-pane--bonus",
    }

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.pieces: list[TokenEmitted] = []

    def reset(self) -> None:
        self.pieces = []
        self.update("")

    def add(self, pieces: list[TokenEmitted]) -> None:
        """Append a batch of pieces and redraw once."""
        if not pieces:
            return
        self.pieces.extend(pieces)
        text = Text()
        for piece in self.pieces:
            text.append(piece.text, style=self.get_component_rich_style(f"text-pane--{piece.source}"))
        self.update(text)

    @property
    def plain(self) -> str:
        return "".join(p.text for p in self.pieces)
