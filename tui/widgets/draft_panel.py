"""Speculative and prompt lookup rounds: each draft token accepted, rejected (struck), resampled or bonus.

One row per round (newest last) with a glyph per status, the latest round's
per-position test (p, q, the uniform draw u and whether u < p/q), and the
acceptance rate by draft position so far.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ...core.events import DraftProposed, DraftVerified
from .live_panel import LivePanel

ROWS = 10


@dataclass(frozen=True)
class Round:
    proposed: DraftProposed
    verified: DraftVerified
    extra_text: str


class DraftPanel(LivePanel):
    COMPONENT_CLASSES: ClassVar[set[str]] = {"draft-panel--accepted", "draft-panel--rejected",
                                             "draft-panel--resampled", "draft-panel--bonus", "draft-panel--target"}

    def __init__(self, **kwargs: object) -> None:
        super().__init__("waiting for the first draft", **kwargs)
        self.rounds: list[Round] = []
        self.reached: list[int] = []
        self.accepted_at: list[int] = []
        self.glyphs: dict[str, str] = {}

    def reset(self) -> None:
        self.rounds, self.reached, self.accepted_at = [], [], []
        self.update("waiting for the first draft")

    def add(self, rounds: list[Round]) -> None:
        for r in rounds:
            k = len(r.verified.verdicts)
            while len(self.reached) < k:
                self.reached.append(0)
                self.accepted_at.append(0)
            for i in range(k):
                self.reached[i] += 1
                self.accepted_at[i] += i < r.verified.accepted
        if rounds:
            self.rounds = (self.rounds + rounds)[-ROWS:]
            self.redraw()

    def _glyph(self, name: str) -> str:
        return self.glyphs.get(name, "")

    def redraw(self) -> None:
        if not self.rounds:
            return
        style = {name: self.get_component_rich_style(f"draft-panel--{name}")
                 for name in ("accepted", "rejected", "resampled", "bonus", "target")}
        rows = Table.grid(padding=(0, 1))
        for r in self.rounds:
            line = Text()
            for v, text in zip(r.verified.verdicts, r.proposed.texts, strict=False):
                line.append(f"{self._glyph(v.verdict)}{text}", style=style[v.verdict])
                line.append(" ")
            kind = r.verified.extra_kind
            if kind is not None and r.verified.extra_token_id is not None:
                line.append("→ ")
                glyph = self._glyph(kind) if kind in ("resampled", "bonus") else ""
                line.append(f"{glyph}{r.extra_text}", style=style[kind])
            who = "copy" if r.proposed.drafter == "lookup" else "draft"
            rows.add_row(f"r{r.verified.round}", f"{who} {r.verified.accepted}/{len(r.verified.verdicts)}", line)
        last = self.rounds[-1]
        test = Table(title=f"round {last.verified.round}: the acceptance test", title_justify="left",
                     padding=(0, 1), box=box.SIMPLE_HEAD)
        # test: u against min(1, p/q) under sampling; whether the target's argmax agrees under greedy
        for name, width in (("token", 8), ("q", 4), ("p", 4), ("u", 4), ("test", 8), ("verdict", 10)):
            test.add_column(name, justify="left" if name in ("token", "verdict") else "right", no_wrap=True,
                            min_width=width, max_width=width if name == "token" else None)
        for v, text in zip(last.verified.verdicts, last.proposed.texts, strict=False):
            if v.u is None:  # greedy verification: the target's argmax decides, there is no draw
                rule = "argmax =" if v.verdict == "accepted" else "argmax ≠"
                u = "-"
            else:
                ratio = v.p / v.q if v.q > 0 else 0.0
                rule = f"u{'<' if v.u < min(1.0, ratio) else '≥'}{min(1.0, ratio):.2f}"
                u = f"{v.u:.2f}"
            test.add_row(repr(text), f"{v.q:.2f}", f"{v.p:.2f}", u, rule,
                         Text(f"{self._glyph(v.verdict)}{v.verdict}", style=style[v.verdict]))
        rates = "  ".join(f"{i + 1}:{a / r:.0%}" for i, (a, r) in enumerate(zip(self.accepted_at, self.reached,
                                                                               strict=True)) if r)
        self.update(Group(rows, test, Text(f"acceptance by position  {rates}")))
