"""The streaming text: every emitted piece, coloured by where its token came from, or by how likely it was.

``colouring`` switches between provenance (the target, a draft, a copy, a resample, a bonus, a forced token)
and probability: each token's raw probability on a four-step scale from confident to surprising
(:data:`PROBABILITY_STEPS`), each step a theme colour *and* a text style, so ``mono`` and NO_COLOR show it
too; the border then carries the legend.

Pieces never hold half a character (the core's detokeniser sees to it), so
the pane never shows broken UTF-8. ``boundaries`` alternates a background per
token so the tokenisation is visible; a selected token (moved with the arrow
keys) is shown reversed, and the app shows its alternatives beside it.

The pane shows the lines that fit: the newest ones, or those around the
selected token. It does its own windowing instead of Textual scrolling
because a scrollable widget needs a layout pass for every new batch of text
(see :mod:`.live_panel`).

New pieces are appended to the styled text, only the tail is wrapped again
(:func:`rewrap`) and only the lines wrapped again are rendered again, so a
paint costs the same at token 2000 as at token 20 (the way toolong keeps a
line cache); restyling (boundaries, a selection, a theme) rebuilds it all.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from operator import attrgetter
from typing import ClassVar, Literal

from rich._wrap import divide_line
from rich.style import Style
from rich.text import Span, Text
from textual.strip import Strip

from ...core.record.events import TokenEmitted
from .live_panel import LivePanel

Colouring = Literal["provenance", "probability"]
# The probability scale: (the least raw probability a step takes, its name, its legend). Steps of a log-odds-like
# scale rather than a gradient: a reader tells four steps apart at a glance, and each has its own text style.
PROBABILITY_STEPS: tuple[tuple[float, str, str], ...] = (
    (0.9, "sure", "≥90%"),
    (0.5, "likely", "50-90%"),
    (0.1, "unsure", "10-50%"),
    (0.0, "surprising", "<10%"),
)


def probability_step(logprob: float | None) -> str | None:
    """The step of the scale a token's raw log-probability falls in (None: a recording without it)."""
    if logprob is None:
        return None
    p = math.exp(logprob)
    return next(name for least, name, _ in PROBABILITY_STEPS if p >= least)


def _last_word_start(plain: str, end: int) -> int:
    r"""Where ``divide_line`` starts the last word of ``plain[:end]``.

    Its words are ``\s*\S+\s*`` within a paragraph: a word owns the spaces after it, and the first
    word of a paragraph also owns the spaces before it. Found by stepping back from ``end`` over the
    trailing spaces and then the word, so the cost is the word's length, not the paragraph's (a regex
    search for the last word from the paragraph's start was dear on a long paragraph, at every paint).
    """
    paragraph = plain.rfind("\n", 0, end) + 1
    i = end
    while i > paragraph and plain[i - 1].isspace():
        i -= 1
    while i > paragraph and not plain[i - 1].isspace():
        i -= 1
    return i if plain[paragraph:i].strip() else paragraph


def tail(text: Text, start: int) -> Text:
    """``text[start:]`` in time proportional to the tail, for a text whose spans are in order and do not overlap.

    Rich's slicing divides the whole text, walking every span: one span per token, so each paint of a
    long run cost more than the last. The pane's text is built by appending one
    styled piece per token, so its spans are ordered by their ends and a binary search finds the first
    one the tail keeps.
    """
    spans = text.spans
    first = bisect_right(spans, start, key=attrgetter("end"))
    out = text.blank_copy(text.plain[start:])
    out.spans = [Span(max(0, s.start - start), s.end - start, s.style) for s in spans[first:]]
    return out


def wrap_from(text: Text, start: int, width: int) -> tuple[list[Text], list[int]]:
    """Word-wrap ``text[start:]`` (``start`` a line start) as ``Text.wrap`` does, with each line's offset.

    Written out because Rich's ``Text.wrap`` wraps a whole text and does not say where each line
    starts, which incremental wrapping needs. The steps are Rich's own: split at newlines,
    ``divide_line`` each paragraph (folding words longer than a line), trim what overhangs.
    ``text`` is built as the pane builds its own (see :func:`tail`).
    """
    lines: list[Text] = []
    starts: list[int] = []
    offset = start
    for paragraph in tail(text, start).split("\n", allow_blank=True):
        breaks = divide_line(paragraph.plain, width, fold=True)
        for line, line_start in zip(paragraph.divide(breaks), [0, *breaks], strict=True):
            line.rstrip_end(width)
            line.truncate(width, overflow="fold")
            lines.append(line)
            starts.append(offset + line_start)
        offset += len(paragraph) + 1
    return lines, starts


def _starts_a_word(plain: str, i: int) -> bool:
    """Whether ``divide_line`` would start a word at ``i`` (a line may also start inside a folded word)."""
    return i == 0 or plain[i - 1] == "\n" or (plain[i - 1].isspace() and not plain[i].isspace())


def rewrap(text: Text, lines: list[Text], starts: list[int], wrapped: int, width: int
           ) -> tuple[list[Text], list[int]]:
    """The wrapped ``lines`` (with their ``starts``) of ``text[:wrapped]``, brought up to all of ``text``.

    Wrapping is greedy, so a line's break depends on the words up to it alone; appending can change
    only the old text's last word (it may grow, or gain spaces), so the lines before the one where
    that word starts stay as they are and only the rest is wrapped again, from a line that starts
    at a word (wrapping from inside a folded word would cut the words differently).
    """
    if not lines:
        return wrap_from(text, 0, width)
    if len(text) == wrapped:
        return lines, starts
    plain = text.plain
    j = max(0, bisect_right(starts, _last_word_start(plain, wrapped)) - 1)
    while j > 0 and not _starts_a_word(plain, starts[j]):  # a long word was folded here: start at the word
        j -= 1
    tail, tail_starts = wrap_from(text, starts[j], width)
    return lines[:j] + tail, starts[:j] + tail_starts


class TextPane(LivePanel):
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "text-pane--target", "text-pane--draft", "text-pane--lookup", "text-pane--resampled", "text-pane--bonus",
        "text-pane--boundary-a", "text-pane--boundary-b", "text-pane--selected", "text-pane--forced",
        "text-pane--p-sure", "text-pane--p-likely", "text-pane--p-unsure", "text-pane--p-surprising",
    }

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)
        self.pieces: list[TokenEmitted] = []
        # Shown instead of the pieces: the best finished beam for another length penalty (a re-rank), which was
        # never emitted token by token. None: the run's own tokens.
        self.instead: str | None = None
        self.boundaries = False
        self.colouring: Colouring = "provenance"
        self.selected: int | None = None  # index into pieces
        self.selected_offset = 0  # its character offset in the text
        self._text = Text()
        self._lines: list[Text] = []  # self._text wrapped at self._width, up to self._wrapped characters
        self._starts: list[int] = []  # where each of those lines starts in self._text
        self._width = 0
        self._wrapped = 0
        # Rendered strips by line number, kept while the line is the same object (not wrapped again).
        self._line_strips: dict[int, tuple[Text, Style, Strip]] = {}

    def reset(self) -> None:
        self.pieces, self.selected, self.instead = [], None, None
        self.redraw()

    def show_instead(self, text: str | None) -> None:
        """Show ``text`` in place of the run's tokens (None: the tokens again)."""
        if text == self.instead:
            return
        self.instead, self.selected = text, None
        self.redraw()

    def add(self, pieces: list[TokenEmitted]) -> None:
        """Append a batch of pieces and redraw once."""
        if pieces and self.instead is not None:
            self.pieces.extend(pieces)
        elif pieces:
            for i, piece in enumerate(pieces, start=len(self.pieces)):
                self._append(i, piece)
            self.pieces.extend(pieces)
            self.update(self._text)

    def select(self, delta: int) -> TokenEmitted | None:
        """Move the selection by ``delta`` tokens (from the last token when nothing is selected)."""
        if not self.pieces or self.instead is not None:
            return None
        start = len(self.pieces) if self.selected is None else self.selected
        self.selected = max(0, min(len(self.pieces) - 1, start + delta))
        self.redraw()
        return self.pieces[self.selected]

    @property
    def selected_piece(self) -> TokenEmitted | None:
        """The selected token, when one is (and the pane shows the run's own tokens)."""
        return self.pieces[self.selected] if self.selected is not None and self.instead is None else None

    def clear_selection(self) -> None:
        self.selected = None
        self.redraw()

    def toggle_boundaries(self) -> None:
        self.boundaries = not self.boundaries
        self.redraw()

    def toggle_colouring(self) -> str:
        """Switch between the colourings; what the text is coloured by now, to tell the user."""
        self.colour_by("provenance" if self.colouring == "probability" else "probability")
        return "text coloured by " + ("how likely the model found each token (the legend is under the text)"
                                      if self.colouring == "probability" else "where each token came from")

    def colour_by(self, colouring: Colouring) -> None:
        """Colour the tokens by ``colouring``; with probability, the border shows the scale's legend."""
        self.colouring = colouring
        if colouring == "probability":
            legend = Text("p: ")
            for i, (_, name, label) in enumerate(PROBABILITY_STEPS):
                legend.append(" · " if i else "").append(label, style=self.style_of(f"text-pane--p-{name}"))
            self.border_subtitle = legend
        else:
            self.border_subtitle = ""
        self.redraw()

    def redraw(self) -> None:
        """Style every piece again (after a change of boundaries, selection, colouring or theme)."""
        self._text = Text()
        self._lines, self._starts, self._wrapped = [], [], 0
        self.selected_offset = 0
        if self.instead is not None:
            self._text.append(self.instead, style=self.style_of("text-pane--target"))
        else:
            for i, piece in enumerate(self.pieces):
                self._append(i, piece)
        self.update(self._text)

    def _append(self, i: int, piece: TokenEmitted) -> None:
        step = probability_step(piece.logprob) if self.colouring == "probability" else None
        style: Style = self.style_of(f"text-pane--p-{step}" if step else f"text-pane--{piece.source}")
        if self.boundaries:
            style = style + self.style_of("text-pane--boundary-a" if i % 2 == 0 else "text-pane--boundary-b")
        if i == self.selected:
            self.selected_offset = len(self._text)
            style = style + self.style_of("text-pane--selected")
        # A token whose piece is empty (it ends inside a character) still gets a visible mark when selected.
        self._text.append(piece.text or ("·" if i == self.selected or self.boundaries else ""), style=style)

    def _wrap(self, width: int) -> list[Text]:
        if width != self._width or not self._lines:
            self._line_strips.clear()
            self._lines, self._starts = wrap_from(self._text, 0, width)
        else:
            self._lines, self._starts = rewrap(self._text, self._lines, self._starts, self._wrapped, width)
        self._width, self._wrapped = width, len(self._text)
        return self._lines

    def render_strips(self, width: int, height: int) -> list[Strip]:
        """The shown lines as strips, each rendered once: only lines that were wrapped again are new."""
        if width < 1 or height < 1:
            return []
        lines = self._wrap(width)
        if len(lines) <= height:
            start = 0
        elif self.selected is None:
            start = len(lines) - height
        else:  # keep the selected token's line in the middle
            line = bisect_right(self._starts, self.selected_offset) - 1
            start = max(0, min(len(lines) - height, line - height // 2))
        self._style = style = self.rich_style
        console, cache = self.app.console, self._line_strips
        strips = []
        for i in range(start, min(len(lines), start + height)):
            hit = cache.get(i)
            if hit is None or hit[0] is not lines[i] or hit[1] != style:
                strip = Strip(lines[i].render(console), lines[i].cell_len).crop_extend(0, width, style)
                hit = cache[i] = (lines[i], style, strip.apply_style(style))
            strips.append(hit[2])
        return strips

    @property
    def plain(self) -> str:
        return "".join(p.text for p in self.pieces)
