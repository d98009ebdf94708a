"""One line under the text that says what the last step did (most useful while stepping)."""

from __future__ import annotations

from rich.text import Text

from .live_panel import LivePanel


class Caption(LivePanel):
    def say(self, text: str) -> None:
        # One line: a longer caption (a draft round's, on an 80-column terminal) ends in an ellipsis, so that it
        # reads as cut rather than as the whole story; the panels above it show the round in full.
        self.update(Text(text, no_wrap=True, overflow="ellipsis"))
