"""Prompt lookup and suffix drafting: where the last copy came from, shown in the prompt and the output so far.

The context (prompt tokens, then generated ones) is shown around the matched
n-gram and the span copied after it, both highlighted with theme styles,
with the tail of the context (the n-gram that was looked up) marked too.
Suffix drafting copies from suffix trees, not from one span: there the
panel shows the pattern matched at the text's end and which trees the
draft came from. A drafter that copies nothing but says what it drafted
from, row by row (lookahead's Jacobi window and harvested n-grams, token
recycling's matrix rows), gets those rows; lookahead's window levels as a grid whose columns are the n-grams
they become.
"""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.text import Text

from ...core.record.events import DraftProposed
from ..numbers import count
from .live_panel import LivePanel

WINDOW = 24  # tokens shown either side of the copy
WAITING = "waiting for the first lookup"


class LookupPanel(LivePanel):
    COMPONENT_CLASSES: ClassVar[set[str]] = {"lookup-panel--match", "lookup-panel--copy"}

    def __init__(self, **kwargs: object) -> None:
        super().__init__(WAITING, **kwargs)
        self.prompt_len = 0
        self.context: list[str] = []  # one label per context token: the prompt's, then each emitted token's text
        self.last: DraftProposed | None = None
        self.last_accepted: int | None = None

    def reset(self, prompt_pieces: tuple[str, ...], waiting: str = WAITING) -> None:
        """A new run: ``waiting`` is what the panel says until its first round (the mode's DrafterSpec.waiting)."""
        self.context, self.prompt_len = list(prompt_pieces), len(prompt_pieces)
        self.last, self.last_accepted = None, None
        self.update(waiting)

    def add_tokens(self, texts: list[str]) -> None:
        self.context.extend(texts)

    def show(self, proposed: DraftProposed | None, accepted: int | None) -> None:
        if proposed is not None:
            self.last = proposed
        self.last_accepted = accepted
        self.redraw()

    def redraw(self) -> None:
        text = self._text(WINDOW)
        if text is not None:
            self.update(text)

    def _text(self, before: int) -> Text | None:
        """The last lookup, with ``before`` context tokens ahead of the match and WINDOW after the copy."""
        p = self.last
        if p is not None and p.match_start is not None and p.copy_start is None:
            return self._suffix_text(p, before)
        if p is None:
            return None
        if p.rows:
            return self._rows_text(p)
        if p.match_start is None or p.copy_start is None:
            return self._unplaced_text(p)
        match_style = self.style_of("lookup-panel--match")
        copy_style = self.style_of("lookup-panel--copy")
        m0, m1, c0, c1 = p.match_start, p.match_end or p.match_start, p.copy_start, p.copy_end or p.copy_start
        where = "the prompt" if c0 < self.prompt_len else "the earlier output"
        head = self._headline(p, f"the last {m1 - m0}-gram", (m0, m1),
                              f"was found at token {m0} of {where}; copied {count(len(p.token_ids), 'token')} after it")
        lo, hi = max(0, m0 - before), min(len(self.context), c1 + WINDOW)
        body = Text("…" if lo > 0 else "")
        for i in range(lo, hi):
            style = match_style if m0 <= i < m1 else copy_style if c0 <= i < c1 else ""
            body.append(self.context[i], style=style)
        if hi < len(self.context):
            body.append("…")
        return head + body

    def _unplaced_text(self, p: DraftProposed) -> Text:
        """A round whose drafter says where nothing came from (no span, no trees' sources): its draft alone."""
        if p.parents is not None:  # a tree's nodes joined would read as one text, which no path of it is
            head = Text(f"round {p.round}: {p.drafter} drafted a tree of {count(len(p.token_ids), 'node')}")
        else:
            head = Text(f"round {p.round}: {p.drafter} drafted {count(len(p.token_ids), 'token')} ")
            head.append(repr("".join(p.texts)), style=self.style_of("lookup-panel--copy"))
        if self.last_accepted is not None:
            head.append(f"; the target kept {self.last_accepted}")
        return head

    def _rows_text(self, p: DraftProposed) -> Text:
        """A round whose drafter says what it drafted from, row by row (lookahead's window levels and the n-grams
        it harvested, recycling's matrix rows): the round's counts, then each row. A matrix row (``row``, and
        ``written`` with the ``was`` it replaced) is a token, marked, then its guesses; a written row's guesses that
        changed are marked too."""
        text = self._unplaced_text(p)
        match_style, copy_style = self.style_of("lookup-panel--match"), self.style_of("lookup-panel--copy")
        rows = p.rows or ()
        width = max(len(row.label) for row in rows)
        # Lookahead's window as a grid: its levels' i-th tokens one above the other, so that each column read down
        # is the n-gram it becomes (the next level's guess ends it).
        cells = [[repr(t)[1:-1] or "∅" for t in row.texts] for row in rows]
        levels = [shown for shown, row in zip(cells, rows, strict=True) if row.label.startswith("level ")]
        columns = [max(cell_len(level[i]) for level in levels if i < len(level))
                   for i in range(max(map(len, levels), default=0))]
        for i, (row, shown) in enumerate(zip(rows, cells, strict=True)):
            text.append(f"\n{row.label:<{width}}  ")
            if row.label.startswith("level "):
                text.append(" · ".join(cell + " " * (columns[j] - cell_len(cell)) for j, cell in enumerate(shown))
                            .rstrip())
                continue
            if row.label in ("row", "written", "was") and shown:  # a token, then its guesses, most likely first
                text.append(shown[0], style=match_style if row.label != "was" else "dim")
                text.append(" → ")
                was = rows[i + 1].token_ids[1:] if row.label == "written" and i + 1 < len(rows) else None
                if len(shown) == 1:
                    text.append("(no guesses yet)", style="dim")
                for j, guess in enumerate(shown[1:]):
                    changed = was is not None and (j >= len(was) or was[j] != row.token_ids[1 + j])
                    style = "dim" if row.label == "was" else match_style if changed else copy_style
                    text.append(("" if j == 0 else " · ") + guess, style=style)
            else:
                text.append(" · ".join(shown), style=copy_style if row.label == "harvested" else "")
        return text

    def _headline(self, p: DraftProposed, what: str, match: tuple[int, int], found: str) -> Text:
        """A round's first line: what was matched, its tokens in the match style, where it was found, and how many
        of the draft the target accepted."""
        head = Text(f"round {p.round}: {what} ")
        head.append(repr("".join(self.context[match[0] : match[1]])), style=self.style_of("lookup-panel--match"))
        head.append(f" {found}")
        if self.last_accepted is not None:
            head.append(f"; target accepted {self.last_accepted}")
        head.append("\n\n")
        return head

    def _suffix_text(self, p: DraftProposed, before: int) -> Text:
        """Suffix drafting's round: the pattern it matched (the text's last tokens) and where the draft came from."""
        match_style = self.style_of("lookup-panel--match")
        m0, m1 = p.match_start or 0, p.match_end or len(self.context)
        sources = sorted(set(p.sources or ()))
        where = " and ".join(sources) if sources else "what the run has seen"
        one = m1 - m0 == 1
        last, were, them = ("token", "was", "it") if one else (f"{m1 - m0} tokens", "were", "them")
        drafted = count(len(p.token_ids), "token")
        head = self._headline(p, f"the text's last {last}", (m0, m1),
                              f"{were} seen before ({where}); drafted {drafted} of what followed {them}")
        lo = max(0, m0 - before)
        body = Text("…" if lo > 0 else "")
        for i in range(lo, min(m1, len(self.context))):
            body.append(self.context[i], style=match_style if i >= m0 else "")
        return head + body

    def fit(self, width: int, height: int) -> list[list[Segment]]:
        """The last lookup; where the panel is too short for it, less of the context before the match.

        Cut at the bottom alone, a short panel (an 80x24 terminal) would show the tokens before the match
        and hide the match and the copy, the two things the panel is for.
        """
        lines = super().fit(width, height)
        for before in (WINDOW // 3, 0):
            text = self._text(before) if len(lines) > height else None
            if text is None:
                break
            lines = self.lines_of(text, width)
        return lines
