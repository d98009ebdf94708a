"""Command palette entries (ctrl+p): every key binding's action, each mode, each theme, and loading a model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Protocol, cast

from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider

from ..core.modes import MODES
from ..core.record.events import Mode
from .bindings import explained
from .themes import ThemeSpec


class Commandable(Protocol):
    """What the palette needs of the app. A protocol, so this module never imports the app that lists it."""

    theme_specs: Mapping[str, ThemeSpec]

    def all_bindings(self) -> list[Binding]: ...
    def run_action(self, action: str) -> Any: ...
    def switch_mode_to(self, mode: Mode) -> None: ...
    def set_theme(self, name: str) -> None: ...
    def action_load_model(self) -> None: ...


class DecodeCommands(Provider):
    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = cast(Commandable, self.app)
        entries: list[tuple[str, Callable[[], object], str]] = []
        for binding in app.all_bindings():
            action = binding.action
            entries.append((explained(binding), partial(app.run_action, action), f"key: {binding.key}"))
        for mode in MODES:
            entries.append((f"Mode: {mode}", partial(app.switch_mode_to, mode), "restarts the run"))
        for name, spec in app.theme_specs.items():
            entries.append((f"Theme: {spec.description}", partial(app.set_theme, name), name))
        entries.append(("Load another model…", app.action_load_model, "alias, repo id, folder or .gguf"))
        return entries

    async def discover(self) -> Hits:
        for name, callback, help_text in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, callback, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)
