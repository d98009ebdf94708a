"""One line of run statistics: state, tokens, tokens/s, target forwards, tokens per forward, acceptance, the
drafter's own state (recycle: its matrix's fill), elapsed.

It shows a :class:`~decode_tui.tui.run_view.Counters`: while a run is going the
counts come from the events seen so far; once it finishes they are the core's
exact ``Finished`` figures. Where the bar is too narrow (80 columns, a race's
lane), it breaks only between figures, shortens their labels, and then leaves
out the least telling ones (the finish reason, which the caption also says,
first); a figure is never cut in half.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.text import Text

from ..numbers import count, decoded_tokens
from ..run_view import Counters
from .live_panel import LivePanel

SEP = " · "


class StatsBar(LivePanel):
    def __init__(self, short: bool = False, **kwargs: object) -> None:
        """``short``: the short labels even where the full ones fit (a race's lanes, compared side by side, say
        their figures the same way)."""
        super().__init__("loading…", **kwargs)
        self.counters = Counters()
        self.short = short
        # (full label, short label, rank): the lower the rank, the sooner it is left out where nothing else fits
        self._parts: list[tuple[str, str, int]] = []

    def show(self, counters: Counters) -> None:
        self.counters = counters
        r = counters.result
        # Only the tokens this run decoded count in its figures; a branch's kept and forced ones are said beside.
        tokens = counters.decoded
        forwards = r.target_forwards if r else counters.forwards
        elapsed = r.elapsed_s if r else counters.elapsed_s
        rate = r.tokens_per_s if r else (tokens / elapsed if elapsed > 0 else 0.0)
        given = counters.given
        parts = [(counters.state, counters.state, 9),
                 (decoded_tokens(*counters.token_counts), f"{tokens} tok" + (f" ({given})" if given else ""), 7),
                 (f"{rate:.1f} tok/s", f"{rate:.1f} tok/s", 8),
                 (count(forwards, "target forward"), f"{forwards} fwd", 5)]
        searching = r is None and counters.beam_steps > 0 and not tokens
        if searching:
            # A beam search under way has emitted nothing yet (its text comes at the end): its steps and the
            # tokens its beams decode a second say how it goes, instead of "0 tokens, 0.0 tok/s".
            steps, beam_rate = counters.beam_steps, counters.beam_tokens / elapsed if elapsed > 0 else 0.0
            parts[1:3] = [(f"step {steps}", f"step {steps}", 7),
                          (f"{beam_rate:.1f} beam tok/s", f"{beam_rate:.1f} beam tok/s", 8)]
        if forwards and not searching:
            parts.append((f"{tokens / forwards:.2f} tok/forward", f"{tokens / forwards:.2f} tok/fwd", 4))
        drafted = r.drafted if r and r.drafted is not None else counters.drafted
        accepted = r.accepted if r and r.accepted is not None else counters.accepted
        if drafted:  # nodes drafted and tokens kept, as the core counts them (tui/numbers.py's draft_counts)
            parts.append((f"kept {accepted}/{drafted}", f"kept {accepted / drafted:.0%}", 6))
        elif r is not None and r.drafted == 0:  # a drafting run that drafted nothing: no rate to show
            parts.append(("nothing drafted", "none drafted", 6))
        if counters.tree_nodes:  # the latest round's shape
            nodes = counters.tree_nodes
            parts.append((f"last round a tree of {count(nodes, 'node')}", f"tree {nodes}", 5))
        if counters.drafter_state:  # what the drafter holds (recycle: its matrix's fill)
            parts.append((counters.drafter_state, counters.drafter_state, 2))
        if (perplexity := counters.perplexity) is not None:
            parts.append((f"perplexity {perplexity:.2f}", f"ppl {perplexity:.2f}", 1))
        parts.append((f"{elapsed:.1f} s", f"{elapsed:.1f} s", 2))
        if r is not None:
            parts.append((f"finish: {r.finish_reason}", f"finish: {r.finish_reason}", 1))
        if counters.kernels:  # so a speed that changes when the compiled kernels arrive says why
            parts.append((f"kernels: {counters.kernels}", f"kernels: {counters.kernels}", 3))
        self._parts = parts
        self.update(SEP.join(full for full, _, _ in parts))

    def fit(self, width: int, height: int) -> list[list[Segment]]:
        """Every figure whole, in as few lines as ``height`` allows: full labels, then short ones, then without
        the least telling figures."""
        if not self._parts:
            return super().fit(width, height)
        lines = _packed([short if self.short else full for full, short, _ in self._parts], width)
        ranks = sorted(rank for _, _, rank in self._parts)  # the least telling first
        for left_out in range(len(ranks)):
            if len(lines) <= height:
                break
            lines = _packed([short for _, short, rank in self._parts if rank not in ranks[:left_out]], width)
        return self.lines_of(Text("\n".join(lines)), width)


def _packed(parts: list[str], width: int) -> list[str]:
    """``parts`` joined by the separator into lines of at most ``width`` cells, broken only between parts (a part
    wider than the line gets a line of its own)."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + len(SEP) + len(part) <= width:
            lines[-1] += SEP + part
        else:
            lines.append(part)
    return lines
