"""One line under the text that says what the last step did (most useful while stepping)."""

from __future__ import annotations

from textual.widgets import Static


class Caption(Static):
    def say(self, text: str) -> None:
        self.update(text)
