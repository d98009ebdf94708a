"""Saving the screen as an SVG, for a slide: the main app's and the race's ``X`` key.

Textual draws the SVG (``App.save_screenshot``); this names the file and
turns a failure into a message for the user instead of an exception.
"""

from __future__ import annotations

from pathlib import Path

from textual.app import App


def save_svg(app: App[int], name: str) -> tuple[str, bool]:
    """Save ``app``'s screen as ``name`` in the working folder: the message to show, and whether it worked."""
    try:
        saved = app.save_screenshot(filename=name, path=str(Path.cwd()))
    except OSError as exc:
        return f"Could not write {name}: {exc.strerror}", False
    return f"screen saved to {Path(saved).name}", True
