"""One line under the text that says what the last step did (most useful while stepping)."""

from __future__ import annotations

from .live_panel import LivePanel


class Caption(LivePanel):
    def say(self, text: str) -> None:
        self.update(text)
