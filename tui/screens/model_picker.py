"""Type a model to load (alias, repo id, folder or .gguf); it is checked on disk before the run restarts."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from ...core.errors import DecodeTuiError


def known_models() -> dict[str, str]:
    """Each alias, the repo id it stands for, and whether it loads here: on disk, fetched when chosen (the
    embedded model), or not without the hub. A look at the folders only, quick enough for the UI thread."""
    from ...core.model.registry import ALIASES, EMBEDDED_ALIASES, resolve

    def where(alias: str) -> str:
        try:
            resolve(alias)
        except DecodeTuiError:
            return "fetched when chosen" if alias in EMBEDDED_ALIASES else "not on this machine"
        return "on this machine"

    return {alias: f"{repo}  ({where(alias)})" for alias, repo in ALIASES.items()}


def cannot_load(spec: str) -> str | None:
    """Why ``spec`` cannot load here (it is not on disk and not the embedded model, which is fetched when
    chosen), or None when it can: checked before the run restarts, so a typo loses nothing."""
    from ...core.model.registry import EMBEDDED_ALIASES, resolve

    try:
        resolve(spec)
    except DecodeTuiError as err:
        return None if spec in EMBEDDED_ALIASES else err.message
    return None


class ModelPicker(ModalScreen[str | None]):
    CSS_PATH = "model_picker.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel", id="model.cancel")]

    def __init__(self, current: str, known: dict[str, str]) -> None:
        """``known``: alias -> the repo id it stands for and whether it is on this machine, each shown whole (a
        line each, wrapped, never cut)."""
        super().__init__()
        self.current = current
        self.known = known

    def compose(self) -> ComposeResult:
        with Vertical(id="model-box"):
            yield Label(f"Load another model (now: {self.current}): an alias below, or a repo id, a folder or a "
                        ".gguf file. enter loads, esc cancels.", id="model-title")
            yield Label("\n".join(f"  {alias:<14} {repo}" for alias, repo in self.known.items()), id="model-aliases")
            yield Input(placeholder=self.current, id="model-input")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        value = event.value.strip()
        self.dismiss(value or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
