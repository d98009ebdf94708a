"""The base of the app's panels: content replaced many times a second, repainted without a layout pass.

``Static.update`` asks Textual for a layout pass, which reflows the whole
screen; at 30 updates a second that cost about half a CPU core here and took
it from the decoder thread (profiled: ``Screen._refresh_layout``). Every panel
has its size fixed by the stylesheet, so new content needs only a repaint of
that one widget, which is all this class does. Content taller than the panel
is cut at the bottom; the panels show the newest rows first where it matters.

A panel may also limit how often it repaints (``min_repaint_s``): a table of
candidates changing 20 times a second cannot be read anyway, and each paint
takes the interpreter from the decoder. The last content is always painted.
"""

from __future__ import annotations

import time
from typing import ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual.widget import Widget


class LivePanel(Widget):
    min_repaint_s: ClassVar[float] = 0.0

    def __init__(self, placeholder: str = "", **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._content: RenderableType = Text(placeholder)
        self._painted = 0.0
        self._deferred = False

    @property
    def content(self) -> RenderableType:
        return self._content

    def update(self, content: RenderableType) -> None:
        self._content = content
        wait = self.min_repaint_s - (time.monotonic() - self._painted)
        if wait <= 0:
            self._paint()
        elif not self._deferred:
            self._deferred = True
            self.set_timer(wait, self._paint)

    def _paint(self) -> None:
        self._deferred = False
        self._painted = time.monotonic()
        self.refresh()

    def render(self) -> RenderableType:
        return self._content
