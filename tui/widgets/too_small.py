"""Shown instead of the layout when the terminal is too small to draw it legibly."""

from __future__ import annotations

from .live_panel import LivePanel

MIN_WIDTH, MIN_HEIGHT = 80, 20


class TooSmall(LivePanel):
    def check(self, width: int, height: int) -> None:
        """Mark the screen ``too-small`` (its stylesheet then shows this instead of the layout) when it is."""
        small = width < MIN_WIDTH or height < MIN_HEIGHT
        self.screen.set_class(small, "too-small")
        # A dialog open over the screen hides its own content too, so the notice is not drawn under it.
        self.app.set_class(small, "too-small")
        if small:
            self.show_size(width, height)

    def show_size(self, width: int, height: int) -> None:
        self.update(f"The terminal is {width}×{height}; decode-tui needs at least {MIN_WIDTH}×{MIN_HEIGHT}.\n"
                    "Enlarge the window or reduce the font size. (q quits)")
