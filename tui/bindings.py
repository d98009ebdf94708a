"""The app's key bindings, each with an id and a description: the data a keymap, the help and the palette read.

An id names what a binding does (``pause``, ``temperature.up``), so a user's
keymap (``[keys]`` in the config file, see cli/config.py) can move it to
another key without touching code, as posting's does. Textual applies a
keymap by binding id (``App.set_keymap``); :func:`keys_after` says which key
each binding ends up on, for the help screen and the palette.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from textual.binding import Binding

from .settings import KNOBS

if TYPE_CHECKING:
    from textual.dom import DOMNode


def _knob_bindings() -> list[Binding]:
    out: list[Binding] = []
    for knob in KNOBS:
        down, up = knob.keys
        out.append(Binding(down, f"knob('{knob.id}', -1)", knob.describe(-1), show=False, id=f"{knob.id}.down"))
        out.append(Binding(up, f"knob('{knob.id}', 1)", knob.describe(1), show=False, id=f"{knob.id}.up"))
    return out


# The footer shows each shown binding's description, in this order, as far as the width goes: short ones, and
# help early, so that "?" is in view even in 80 columns. A tooltip holds the longer explanation where there
# is one: the help screen and the palette show that (:func:`explained`).
APP_BINDINGS: tuple[Binding, ...] = (
    Binding("space", "toggle_pause", "Pause/resume", id="pause"),
    Binding("n", "step", "Step", tooltip="Step (a token, beam step or draft round)", id="step"),
    Binding("question_mark,f1", "help", "Keys", tooltip="Help: every key, and what the colours mean", id="help"),
    Binding("r", "restart", "Restart", id="restart"),
    Binding("m", "cycle_mode", "Mode", tooltip="Cycle mode (restarts the run)", id="mode"),
    Binding("e", "edit_prompt", "Prompt", tooltip="Edit prompt (restarts the run)", id="prompt"),
    Binding("z", "stages", "Stages", show=False, tooltip="Stage editor: every sampling stage's value (min-p, "
            "typical-p, epsilon, eta, top-h, n-gram, min new tokens...), changed with the arrow keys", id="stages"),
    *_knob_bindings(),
    Binding("left", "select(-1)", "Select previous token", show=False, id="select.previous"),
    Binding("right", "select(1)", "Select next token", show=False, id="select.next"),
    Binding("escape", "clear_selection", "Clear token selection", show=False, id="select.clear"),
    Binding("enter", "branch_here", "Branch here", show=False,
            tooltip="Branch here: force another token or text at the selected token and decode on", id="branch"),
    Binding("B", "branches", "Branches", show=False, tooltip="Branches: the tree, show one, compare two",
            id="branches"),
    Binding("v", "colouring", "Colour by probability", show=False,
            tooltip="Colour the text by how likely each token was, or by where it came from", id="colouring"),
    Binding("f", "forwards", "Forwards", tooltip="Forward passes and what-if", id="forwards"),
    Binding("b", "toggle_boundaries", "Boundaries", tooltip="Token boundaries", id="boundaries"),
    Binding("a", "toggle_auto_pause", "Auto-pause on notable events", show=False, id="auto-pause"),
    Binding("c", "cycle_theme", "Theme", id="theme"),
    Binding("x", "export", "Export trace", show=False, id="export"),
    Binding("R", "race", "Race greedy, PLD and speculative on this prompt, side by side", show=False, id="race"),
    Binding("X", "save_svg", "Save the screen as an SVG (for a slide)", show=False, id="screenshot"),
    Binding("pagedown", "narration_page(1)", "Scroll the lesson's text down", show=False, id="narration.down"),
    Binding("pageup", "narration_page(-1)", "Scroll the lesson's text up", show=False, id="narration.up"),
    Binding("q", "quit", "Quit", id="quit"),
    Binding("ctrl+c", "interrupt", "Quit (Ctrl-C)", show=False, priority=True, id="interrupt"),
)


QUIT_TO_LIST = "Back to the list"  # q's words where the app was opened from the start screen, which q returns to


def relabelled(bindings: list[Binding], binding_id: str, description: str) -> list[Binding]:
    """``bindings`` with the one whose id is ``binding_id`` described as ``description`` (its tooltip too)."""
    return [dataclasses.replace(b, description=description, tooltip=description if b.tooltip else b.tooltip)
            if b.id == binding_id else b for b in bindings]


def relabel(node: DOMNode, binding_id: str, description: str) -> None:
    """Describe ``node``'s binding ``binding_id`` as ``description`` on this node alone (its footer, the
    palette)."""
    _rewrite(node, lambda bindings: relabelled(bindings, binding_id, description))


def unshown(node: DOMNode, binding_ids: Collection[str]) -> None:
    """Leave ``node``'s bindings ``binding_ids`` out of its footer, on this node alone: their keys still act."""
    _rewrite(node, lambda bindings: [dataclasses.replace(b, show=False) if b.id in binding_ids else b
                                     for b in bindings])


def _rewrite(node: DOMNode, change: Callable[[list[Binding]], list[Binding]]) -> None:
    """Textual reads a node's bindings from a copy of its class's, which this rewrites in place: it has no
    per-node way to redescribe or hide a binding."""
    table = node._bindings.key_to_bindings
    for key, bindings in table.items():
        table[key] = change(bindings)


def explained(binding: Binding) -> str:
    """What a binding does, in full: its tooltip where it has one, else its (footer) description."""
    return binding.tooltip or binding.description


BINDING_IDS: frozenset[str] = frozenset(b.id for b in APP_BINDINGS if b.id is not None)


def keys_after(bindings: list[Binding], keymap: Mapping[str, str]) -> list[Binding]:
    """``bindings`` with each one's key as a keymap moved it (the binding itself otherwise)."""
    return [Binding(keymap[b.id], b.action, b.description, show=b.show, priority=b.priority, tooltip=b.tooltip,
                    id=b.id)
            if b.id is not None and b.id in keymap else b for b in bindings]
