"""Details of the selected token: how likely it was, its alternatives at that step, or the verdict on it if it
was drafted."""

from __future__ import annotations

import math

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ...core.record.events import PositionVerdict, TokenEmitted, TokenSampled
from ..numbers import bar, nth, percent
from .live_panel import LivePanel

BAR = 16


class TokenInspector(LivePanel):
    def show(self, piece: TokenEmitted, sampled: TokenSampled | None, verdict: PositionVerdict | None,
             glyphs: dict[str, str]) -> None:
        # A token that writes no text (the end of text) by the name the candidates give it, not as ''.
        named = piece.text or (sampled.text if sampled is not None and sampled.token_id == piece.token_id else "")
        shown = repr(named) if named else "(a special token: it writes no text)"
        title = f"token {nth(piece.index)}: {shown} (id {piece.token_id}, {piece.source}){likelihood(piece)}"
        if sampled is not None:
            # The title as its own line above the table: as the table's title it wrapped at the table's width,
            # about 25 columns of a 73-column panel.
            table = Table(box=None, padding=(0, 1), show_header=False)
            final = sampled.stages[-1]
            for c in final.kept[:6]:
                mark = glyphs.get("chosen", ">") if c.token_id == sampled.token_id else " "
                table.add_row(mark, repr(c.text), bar(c.prob, BAR), percent(c.prob))
            if final.chosen_prob is not None and all(c.token_id != sampled.token_id for c in final.kept[:6]):
                # drawn from below the candidates shown: its own row, with its rank
                table.add_row(glyphs.get("chosen", ">"), repr(sampled.text), bar(final.chosen_prob, BAR),
                              f"{percent(final.chosen_prob)} #{final.chosen_rank}")
            self.update(Group(Text(title), table))
        elif verdict is not None:
            self.update(f"{title}\n  {verdict_line(verdict, copied=piece.source == 'lookup')}")
        elif piece.source in ("resampled", "bonus", "target", "forced"):
            how = {"resampled": "resampled from max(0, p - q) after a rejection",
                   "bonus": "the bonus token, drawn from p after a fully accepted draft",
                   "target": "the target's own choice",
                   "forced": "forced by the user: p and rank are what the model gave it before it was forced"
                   }[piece.source]
            self.update(f"{title}\n  {how}")
        else:
            self.update(title)


def likelihood(piece: TokenEmitted) -> str:
    """`` · p 12.0% #3 · H 1.20``: the token's raw probability, rank and the entropy (nats) where it stands."""
    if piece.logprob is None:
        return ""
    return f" · p {percent(math.exp(piece.logprob))} #{piece.rank} · H {piece.entropy or 0.0:.2f}"


def verdict_line(verdict: PositionVerdict, copied: bool) -> str:
    """The test a drafted token passed or failed, in the terms of its verification: under sampling u against
    min(1, p/q), under greedy verification whether it is the target's argmax (there is no u to show)."""
    how = "copied from the text (q=1)" if copied else f"drafted with q={verdict.q:.3f}"
    if verdict.u is None:
        test = ("it is the target's argmax" if verdict.verdict == "accepted"
                else "the target's argmax is another token")
    else:
        test = (f"u={verdict.u:.3f} {'<' if verdict.u < verdict.threshold else '≥'} "
                f"min(1, p/q)={verdict.threshold:.3f}")
    return f"{how}; the target's p={verdict.p:.3f}; {test} → {verdict.verdict}"
