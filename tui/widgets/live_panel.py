"""The base of the app's panels: content replaced many times a second, painted through Textual's line API.

Two costs are avoided here, both measured (BENCHMARKS.md). ``Static.update``
asks Textual for a layout pass, which reflows the whole screen; at 30 updates
a second that cost about half a CPU core and took it from the decoder thread
(profiled: ``Screen._refresh_layout``). Every panel has its size fixed by the
stylesheet, so new content needs only a repaint of that one widget. And a
widget's ``render()`` result goes through Textual's ``Content`` conversion,
which for a 30-line Rich ``Text`` took several times longer than Rich's own
``Console.render_lines``; so a panel renders its content to ``Strip`` s once
per update (or resize, or theme change) with Rich, and ``render_line`` hands
them out, as Textual's own ``Log`` widget does.

Content taller than the panel is cut at the bottom; a panel that grows
(:class:`TextPane`) chooses its window in :meth:`LivePanel.render_strips`. The app
paints all panels together, a few times a second (see ``DecodeApp.drain``).
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget


class LivePanel(Widget):
    def __init__(self, placeholder: str = "", **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._content: RenderableType = Text(placeholder)
        self._strips: list[Strip] = []
        self._style = Style()
        self._cached_component_styles: dict[str, Style] = {}
        self._strips_key: tuple[int, int] | None = None  # the content size _strips were rendered for

    @property
    def content(self) -> RenderableType:
        return self._content

    def update(self, content: RenderableType) -> None:
        """Show ``content`` (a plain ``str`` is shown as it is, never parsed as markup).

        Only the lines that differ from those on screen are repainted: new text in the streaming pane
        usually changes its last line alone, and Textual's per-line styling is most of a paint's cost.
        """
        self._content = Text(content) if isinstance(content, str) else content
        width, height = self.content_size
        if self._strips_key != (width, height) or not self.is_mounted:
            self._strips_key = None  # rendered lazily, in full, by render_line
            self.refresh()
            return
        old, new = self._strips, self.render_strips(width, height)
        self._strips = new
        changed = [y for y in range(max(len(old), len(new))) if y >= len(old) or y >= len(new) or old[y] != new[y]]
        if changed:  # one region from the first changed line to the last: a refresh per line cost more
            self.refresh(Region(0, changed[0], width, changed[-1] - changed[0] + 1))

    def render_strips(self, width: int, height: int) -> list[Strip]:
        """The lines a content area of this size shows: the content's top, cut at the bottom.

        A panel that keeps rendered lines overrides this (:class:`TextPane`); one that chooses what to keep
        where not everything fits overrides :meth:`fit`.
        """
        # ``rich_style`` walks the ancestors' styles; read once per render, not once per line.
        self._style = self.rich_style
        return [Strip(line, width) for line in self.fit(width, height)[:height]]

    def fit(self, width: int, height: int) -> list[list[Segment]]:
        """The rendered lines to show, from the top (those past ``height`` are cut): the whole content here."""
        return self.lines_of(self._content, width)

    def lines_of(self, content: RenderableType, width: int) -> list[list[Segment]]:
        """``content`` rendered ``width`` cells wide in the panel's style (read by :meth:`fit`)."""
        console = self.app.console
        return console.render_lines(content, console.options.update_width(max(1, width)), style=self._style, pad=True)

    def style_of(self, component: str) -> Style:
        """A component class's Rich style, kept until the styles change.

        Textual caches these too, but empties its cache at every ``refresh``, which these panels
        call at every paint, and the lookup walks the DOM.
        """
        style = self._cached_component_styles.get(component)
        if style is None:
            style = self._cached_component_styles[component] = self.get_component_rich_style(component)
        return style

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips_key = None  # a new theme: the base style changed
        self._cached_component_styles.clear()

    def render_line(self, y: int) -> Strip:
        width, height = self.content_size
        if (width, height) != self._strips_key:
            self._strips = self.render_strips(width, height)
            self._strips_key = (width, height)
        return self._strips[y] if y < len(self._strips) else Strip.blank(width, self._style)
