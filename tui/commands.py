"""Command palette entries (ctrl+p): every key binding's action, each mode, each theme, and loading a model."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from ..core.events import MODES

if TYPE_CHECKING:
    from .app import DecodeApp


class DecodeCommands(Provider):
    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = cast("DecodeApp", self.app)
        entries: list[tuple[str, Callable[[], object], str]] = []
        for binding in app.all_bindings():
            action = binding.action
            entries.append((binding.description, partial(app.run_action, action), f"key: {binding.key}"))
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
