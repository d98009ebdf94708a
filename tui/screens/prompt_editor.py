"""Edit the prompt; saving restarts the run with it (an empty prompt is refused in place)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, TextArea


class PromptEditor(ModalScreen[str | None]):
    CSS_PATH = "prompt_editor.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "save", "Run with this prompt", id="prompt.save"),
        Binding("escape", "cancel", "Cancel", id="prompt.cancel"),
    ]

    def __init__(self, prompt: str) -> None:
        super().__init__()
        self.prompt = prompt

    def compose(self) -> ComposeResult:
        with Vertical(id="prompt-box"):
            yield Label("Edit the prompt · ctrl+s runs it · esc cancels", id="prompt-title")
            yield TextArea(self.prompt, id="prompt-text", soft_wrap=True)
            yield Label("", id="prompt-error")

    def action_save(self) -> None:
        text = self.query_one(TextArea).text
        if not text.strip():
            self.query_one("#prompt-error", Label).update("The prompt is empty. Type something for the model to "
                                                          "continue, or press esc.")
            return
        self.dismiss(text)

    def action_cancel(self) -> None:
        self.dismiss(None)
