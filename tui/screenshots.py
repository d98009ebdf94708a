"""Saving the screen as an SVG, for a slide: the main app's and the race's ``X`` key.

Textual draws the SVG (``App.save_screenshot``); this names the file, clears the toasts first (a slide shows
the run, not the last messages: an SVG taken at once kept them), and turns a failure into a message for the
user instead of an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual.app import App


def save_svg(app: App[int], name: str, tell: Callable[[str, bool], None]) -> None:
    """Save ``app``'s screen as ``name`` in the working folder once the toasts are gone from it; ``tell`` gets the
    message to show and whether it worked."""
    app.clear_notifications()

    def save() -> None:
        try:
            saved = app.save_screenshot(filename=name, path=str(Path.cwd()))
        except OSError as exc:
            tell(f"Could not write {name}: {exc.strerror}", False)
            return
        tell(f"screen saved to {Path(saved).name}", True)

    app.call_after_refresh(save)
