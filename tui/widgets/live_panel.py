"""The base of the app's panels: content replaced many times a second, repainted without a layout pass.

``Static.update`` asks Textual for a layout pass, which reflows the whole
screen; at 30 updates a second that cost about half a CPU core here and took
it from the decoder thread (profiled: ``Screen._refresh_layout``). Every panel
has its size fixed by the stylesheet, so new content needs only a repaint of
that one widget, which is all this class does. Content taller than the panel
is cut at the bottom; the panels show the newest rows first where it matters.
The app paints all panels together, a few times a second (see ``DecodeApp.drain``).
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.widget import Widget


class LivePanel(Widget):
    def __init__(self, placeholder: str = "", **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._content: RenderableType = Text(placeholder)

    @property
    def content(self) -> RenderableType:
        return self._content

    def update(self, content: RenderableType) -> None:
        self._content = content
        self.refresh()

    def render(self) -> RenderableType:
        return self._content
