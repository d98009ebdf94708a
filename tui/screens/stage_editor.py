"""The stage editor: every sampling stage with its value, in the order generate applies them; up and down pick
one, left and right change it, and the change applies from the next step as the other knobs' keys do. The bad
words, a list of words rather than a value to step, are typed in a field under the list (tab reaches it).

It knows the knobs (tui/settings.py) and asks its host to turn one; what a change means for the run (live,
no effect in this mode, refused in a replay) is the host's answer, shown under the list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option

from ...core.params import WARPERS
from ..settings import EDITOR_ORDER, KNOBS_BY_ID, Settings, said_words


class StageEditor(ModalScreen[None]):
    CSS_PATH = "stage_editor.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "turn(-1)", "Lower the stage's value", id="stages.lower"),
        Binding("right", "turn(1)", "Raise the stage's value", id="stages.raise"),
        Binding("escape,z", "close", "Close the stage editor", id="stages.close"),
    ]

    def __init__(self, settings: Callable[[], Settings], turn: Callable[[str, int], str],
                 set_words: Callable[[str], str]) -> None:
        """``settings``: the host's current settings; ``turn(knob_id, direction)`` changes one and says what it
        did; ``set_words(text)`` sets the bad words from comma-separated text and says what it did."""
        super().__init__()
        self.settings, self.turn, self.set_words = settings, turn, set_words

    def compose(self) -> ComposeResult:
        with Vertical(id="stages-box"):
            yield Label("Sampling stages, in the order generate applies them. ↑↓ pick, ←→ change (from the next "
                        "step), esc closes.", id="stages-title")
            yield OptionList(*(Option(self._label(knob_id), id=knob_id) for knob_id in EDITOR_ORDER),
                             id="stages-list")
            yield Label(self._bad_words(), id="stages-words")
            yield Input(", ".join(self.settings().config.sampling.bad_words), id="stages-words-input",
                        placeholder="bad words, comma-separated (sorry, apologize); enter applies")
            yield Label("", id="stages-said")

    def _label(self, knob_id: str) -> str:
        knob = KNOBS_BY_ID[knob_id]
        # Where the stage stands in generate: the processors apply in every mode, the warpers only when sampling.
        kind = "sampling only" if knob_id in WARPERS else "every mode"
        return f"{knob.label:<24} {knob.fmt(knob.get(self.settings())):>8}   {kind}"

    def _bad_words(self) -> str:
        words = said_words(self.settings().config.sampling.bad_words)
        return f"bad words (every mode): {words} · tab to edit, enter applies"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.query_one("#stages-said", Label).update(self.set_words(event.value))
        self.query_one("#stages-words", Label).update(self._bad_words())

    def action_turn(self, direction: int) -> None:
        options = self.query_one(OptionList)
        index = options.highlighted
        if index is None:
            return
        knob_id = EDITOR_ORDER[index]
        self.query_one("#stages-said", Label).update(self.turn(knob_id, direction))
        options.replace_option_prompt_at_index(index, self._label(knob_id))

    def action_close(self) -> None:
        self.dismiss(None)
