"""Speculative and prompt lookup rounds: each draft token accepted, rejected (struck), untested, resampled or bonus.

One row per round (newest last) with a glyph per status, the latest round's
per-position test (p, q, the uniform draw u and whether u < p/q), and the
acceptance rate by draft position so far.

Laid out by hand into one ``Text``, not with ``rich.table.Table``: a table
measures every cell on every render, and in PLD mode, where rounds arrive
many times a second, the tables were most of the UI thread's time.
"""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from ...core.modes import copied
from ...core.record.events import DraftProposed
from ..numbers import prob
from ..run_view import Round
from ..tree_lines import tree_lines
from .live_panel import LivePanel

ROWS = 10
TOKEN_W = 24  # the acceptance test's token column at its widest; it fits the round's longest token up to this


def _of(proposed: DraftProposed) -> str:
    """' of ≤k' where a round drafted fewer than it could: the draft length shown is the one drafted."""
    limit = proposed.max_tokens
    if proposed.parents is not None:  # a tree's limit is its depth, not its size
        return ""
    return f" of ≤{limit}" if limit is not None and len(proposed.token_ids) < limit else ""


class DraftPanel(LivePanel):
    COMPONENT_CLASSES: ClassVar[set[str]] = {"draft-panel--accepted", "draft-panel--rejected",
                                             "draft-panel--untested", "draft-panel--cut", "draft-panel--resampled",
                                             "draft-panel--bonus",
                                             "draft-panel--target"}

    def __init__(self, **kwargs: object) -> None:
        super().__init__("waiting for the first draft", **kwargs)
        self.rounds: list[Round] = []
        self.by_position: tuple[float, ...] = ()  # acceptance by draft position, from the run's DraftStats
        self.cost: str | None = None  # the draft's cost ratio and the formula's speed-up, from that DraftStats
        self.adaptive: str | None = None  # with --adaptive: what the policy drafts now, and why
        self.glyphs: dict[str, str] = {}
        self._rows: list[tuple[str, Text]] = []  # one per round shown, oldest first: its label and its tokens
        self._tail = Text()  # the latest round's test and the acceptance by position
        self._test_width = 0  # the width of that test's table, laid out in full

    def reset(self, waiting: str = "waiting for the first draft") -> None:
        """A new run: ``waiting`` is what the panel says until its first round (the mode's DrafterSpec.waiting)."""
        self.rounds, self.by_position, self.cost, self.adaptive = [], (), None, None
        self.update(waiting)

    def set_adaptive(self, decision: str) -> None:
        """The adaptive policy's decision and why: under the rounds, or alone while it takes plain steps."""
        self.adaptive = decision
        if self.rounds:
            self.redraw()
        else:
            self.update(f"no draft round yet\n{decision}")

    def add(self, rounds: list[Round], by_position: tuple[float, ...], cost: str | None = None) -> None:
        """Show the newest rounds, the acceptance by position of every round so far and ``cost``, the draft's cost
        ratio and the speed-up it predicts (tui/forward_views.py)."""
        self.by_position, self.cost = by_position, cost
        if rounds:
            self.rounds = (self.rounds + rounds)[-ROWS:]
            self.redraw()

    def _glyph(self, name: str) -> str:
        return self.glyphs.get(name, "")

    def redraw(self) -> None:
        if not self.rounds:
            return
        style = self._verdict_styles()
        labels = [(f"r{r.verified.round}", f"{_kind(r.proposed)} "
                                            f"{r.verified.accepted}/{len(r.verified.verdicts)}{_of(r.proposed)}")
                  for r in self.rounds]
        round_w, count_w = max(len(a) for a, _ in labels), max(len(b) for _, b in labels)
        rows: list[tuple[str, Text]] = []
        for r, (label, count) in zip(self.rounds, labels, strict=True):
            text = Text()
            rows.append((f"{label:<{round_w}} {count:<{count_w}} ", text))
            if r.proposed.parents is not None:  # a tree: the path it kept, then the rest of it in a count
                for v in r.verified.accepted_verdicts:
                    text.append(marked(self._glyph(v.verdict), r.proposed.texts[v.position]), style=style[v.verdict])
                    text.append(" ")
            else:
                for v, piece in zip(r.verified.verdicts, r.proposed.texts, strict=False):
                    text.append(marked(self._glyph(v.verdict), piece), style=style[v.verdict])
                    text.append(" ")
            kind = r.verified.extra_kind
            if kind is not None and r.verified.extra_token_id is not None:
                text.append("→ ")
                glyph = self._glyph(kind) if kind in ("resampled", "bonus") else ""
                text.append(marked(glyph, r.extra_text), style=style[kind])
            if r.proposed.parents is not None:
                others = len(r.verified.verdicts) - r.verified.accepted
                text.append(f"  (+{others} nodes)", style=style["untested"])
        text, self._test_width = self._test(style, compact=False)
        self._rows, self._tail = rows, text
        self.update(Text("\n").join([*(Text(label) + body for label, body in rows), text]))

    def _verdict_styles(self) -> dict[str, Style]:
        return {name: self.style_of(f"draft-panel--{name}")
                for name in ("accepted", "rejected", "untested", "cut", "resampled", "bonus", "target")}

    def _test(self, style: dict[str, Style], compact: bool) -> tuple[Text, int]:
        """The latest round's acceptance test and the acceptance by position, and the width its table takes;
        ``compact``: for a narrow panel, u and its threshold in one column and the verdict as its glyph, so
        each position keeps one line."""
        text = Text()
        last = self.rounds[-1]
        if last.proposed.parents is not None:
            return self._tree_test(last, style, compact)
        pieces = [repr(piece) for piece in last.proposed.texts]
        token_w = min(6 if compact else TOKEN_W, max([len("token"), *(cell_len(p) for p in pieces)]))
        # test: u against min(1, p/q) under sampling; whether the target's argmax agrees under greedy
        header = (f" {'token':<{token_w}} {'q':>7} {'p':>7} {'u vs p/q':>9}" if compact else
                  f"  {'token':<{token_w}} {'q':>7} {'p':>7} {'u':>6} {'test':>8}  verdict")
        drafted = len(last.proposed.token_ids)
        limit = last.proposed.max_tokens
        why = f" (stopped: {last.proposed.stopped})" if last.proposed.stopped else ""
        length = f"{drafted} drafted of at most {limit}{why}" if limit is not None else f"{drafted} drafted"
        text.append(f"round {last.verified.round}: {length}; the acceptance test\n\n{header}\n"
                    f" {'─' * (len(header) + (0 if compact else 1))}\n")
        width = len(header) + 1
        for v, piece in zip(last.verified.verdicts, pieces, strict=False):
            if v.verdict in ("untested", "cut"):  # discarded, or refused by the grammar: there was no test
                rule, u = "-", "-"
            elif v.u is None:  # greedy verification: the target's argmax decides, there is no draw
                rule = "argmax =" if v.verdict == "accepted" else "argmax ≠"
                u = "-"
            else:
                rule = f"u{'<' if v.u < v.threshold else '≥'}{v.threshold:.2f}"
                u = f"{v.u:.2f}"
            if cell_len(piece) > token_w:
                piece = set_cell_size(piece, token_w - 1) + "…"
            verdict = {"untested": "not tested", "cut": "cut by the grammar"}.get(v.verdict, v.verdict)
            if compact:
                test = rule if u == "-" else f"{u}{rule[1:]}"  # 0.66≥0.22: u against min(1, p/q)
                text.append(f" {set_cell_size(piece, token_w)} {prob(v.q):>7} {prob(v.p):>7} {test:>9} ")
                text.append(self._glyph(v.verdict) or verdict[:3], style=style[v.verdict])
            else:
                cells = f"  {set_cell_size(piece, token_w)} {prob(v.q):>7} {prob(v.p):>7} {u:>6} {rule:>8}  "
                said = f"{self._glyph(v.verdict)}{verdict}"
                text.append(cells)
                text.append(said, style=style[v.verdict])
                width = max(width, cell_len(cells + said))  # "·not tested" is wider than "verdict"
            text.append("\n")
        cut = [(i, piece) for i, piece in enumerate(pieces) if cell_len(piece) > token_w]
        if cut:  # nothing is only ever shown cut: the long ones in full, wrapped
            text.append("  in full: " + "; ".join(f"#{i + 1} {piece}" for i, piece in cut) + "\n")
        if any(v.verdict == "untested" for v in last.verified.verdicts):
            text.append(f"  {self._glyph('untested')}not tested: discarded with the rejection before it\n",
                        style=style["untested"])
        if any(v.verdict == "cut" for v in last.verified.verdicts):
            text.append(f"  {self._glyph('cut')}cut by the grammar: it forbids this token here, so the draft ends "
                        "before verification (p = 0 under the grammar)\n", style=style["cut"])
        self._rates(text)
        return text, width

    def _rates(self, text: Text) -> None:
        rates = "  ".join(f"{i + 1}:{rate:.0%}" for i, rate in enumerate(self.by_position))
        text.append(f"\nacceptance by position  {rates}")
        if self.cost:
            text.append(f"\n{self.cost}")
        if self.adaptive:
            text.append(f"\n{self.adaptive}", style="italic")

    def _tree_test(self, last: Round, style: dict[str, Style], compact: bool) -> tuple[Text, int]:
        """A tree round's verification: every node under its parent, the accepted path first (tui/tree_lines.py),
        then what its glyphs mean."""
        proposed, verified = last.proposed, last.verified
        text = Text(f"round {verified.round}: {len(proposed.token_ids)}-node tree, {verified.accepted} accepted\n")
        text.append_text(tree_lines(proposed, verified, style, self._glyph, compact))
        kind = verified.extra_kind
        if kind is not None and verified.extra_token_id is not None:
            said = {"target": "the target's own token",
                    "resampled": "drawn from what the refused children left of p",
                    "bonus": "bonus token after a whole branch"}[kind]
            text.append(f"  → {last.extra_text!r}: {said}\n", style=style[kind])
        text.append(f"  {self._glyph('rejected')}the target chose another token; "
                    f"{self._glyph('untested')}never tested\n", style=style["untested"])
        self._rates(text)
        return text, max((cell_len(line) for line in text.plain.splitlines()), default=0)

    def fit(self, width: int, height: int) -> list[list[Segment]]:
        """The newest rounds that fit above the latest round's test, newest last.

        Cut at the bottom like the other panels, a short panel (an 80x24 terminal, or PLD's half) would show
        the oldest rounds and hide the newest one and its test, which the caption is about.
        """
        if not self.rounds:
            return super().fit(width, height)
        test = self._tail
        if width < self._test_width:  # the test's columns would wrap, a position over two lines
            test = self._test(self._verdict_styles(), compact=True)[0]
        tail = self.lines_of(test, width)
        room, shown = height - len(tail), list[list[Segment]]()
        for label, body in reversed(self._rows):
            lines = self._hanging(label, body, width)
            if shown and len(lines) > room:
                break
            shown[:0] = lines  # the newest round always: it is what the test below is about
            room -= len(lines)
        return shown + tail

    def _hanging(self, label: str, body: Text, width: int) -> list[list[Segment]]:
        """A round's row with its tokens wrapped under the first token, not under the label (a hanging indent,
        so a long round in a narrow panel still reads as one row); plainly wrapped where little room is left."""
        indent = cell_len(label)
        if width - indent < 12:
            return self.lines_of(Text(label) + body, width)
        lines = self.lines_of(body, width - indent)
        return [[Segment(label if i == 0 else " " * indent, self._style), *line] for i, line in enumerate(lines)]


def _kind(proposed: DraftProposed) -> str:
    if proposed.parents is not None:
        return "tree"
    return "copy" if copied(proposed.drafter) else "draft"


def marked(glyph: str, piece: str) -> str:
    """A token with its verdict's glyph: " ✓gamma", the token's leading space before the glyph, so that a
    wrapped row never parts a glyph from its word ("✓" at a line's end, " gamma" on the next)."""
    shown = visible(piece)
    word = shown.lstrip(" ")
    return f"{shown[: len(shown) - len(word)]}{glyph}{word}"


def visible(piece: str) -> str:
    """A token's text for a round's row: a newline or a tab in it would break the row or vanish, so each shows
    as a mark, as does a token of spaces alone, and one whose text is still to come (part of a character)
    shows as ∅ (the acceptance test's table quotes its tokens instead)."""
    shown = piece.replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍")
    return (shown if shown.strip() else shown.replace(" ", "␣")) or "∅"
