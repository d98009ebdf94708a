"""The run's forward passes one by one, and what other drafting settings would have cost on it.

Opened on the run shown (finished or not): a table with one row per target
forward pass (tokens it gave, the draft it verified, accepted, the drafter's
and the verification's own times), acceptance by draft position as a
sparkline with the tokens per forward that acceptance rate predicts beside
the observed figure, and for a finished greedy run (or greedy PLD or
speculative) the what-if grid: the exact target forwards prompt lookup needs
for each n-gram size and draft length (core/analysis/whatif.py), and, when the run
verified drafts of several lengths, the estimated speed-up of each priced
with those verify times. A plain greedy run measured no verify costs:
``decode-tui whatif`` on its exported trace measures them. It reads the run
view's trace; it decodes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from ...core.analysis.whatif import Costs, WhatIf, lookup_grid, table
from ...core.drafting.replay import DRAFT_LENGTHS, trace_from_events
from ...core.errors import UsageError
from ...core.record.events import Event, Finished, Started
from ...core.record.timeline import Timeline, draft_stats, verify_line
from .. import forward_views
from ..cost_view import cost_line
from ..numbers import count, decoded_tokens


def whatif_tables(events: Sequence[Event], timeline: Timeline) -> list[Table | str]:
    """The PLD what-if grids for a finished greedy run (forwards; and estimated speed-ups when the run timed
    verifications of two lengths or more), or why there are none."""
    try:
        trace = trace_from_events(events, "this run")
    except UsageError as err:
        return [f"What if: {err}"]
    if trace.eos_token_ids is None:
        return ["What if: this recording does not say which tokens end the text; replay it with `decode-tui whatif`."]
    line = verify_line(timeline.rows)
    # The run's own verify times price each forward: a draft run times several widths; plain greedy times none
    # apart from its steps, so it gets forwards only.
    costs = Costs(0.0, tuple(line[0] + line[1] * (w - 1) for w in range(1, max(DRAFT_LENGTHS) + 2))) \
        if line is not None else None
    rows = {(r.max_ngram_size, r.draft_length): r for r in table(trace, lookup_grid(trace, trace.eos_token_ids),
                                                                 costs)[1:]}
    fewest = min(r.target_forwards for r in rows.values())
    grids: list[Table | str] = []
    cells: list[tuple[str, Callable[[WhatIf], Text]]] = [(
        f"What if: target forwards prompt lookup would need for these {len(trace.token_ids)} tokens (exact; greedy "
        f"needs {len(trace.token_ids)}; bold: the fewest)",
        lambda r: Text(str(r.target_forwards), style="bold" if r.target_forwards == fewest else ""))]
    if costs is not None:
        best = max(r.est_speedup or 0.0 for r in rows.values())
        cells.append(("Estimated speed-up over greedy, priced with this run's own verify times (bold: the best)",
                      lambda r: Text(f"{r.est_speedup or 0.0:.1f}",
                                     style="bold" if (r.est_speedup or 0.0) == best else "")))
    for title, cell in cells:
        grids.append(forward_views.lookup_grid(title, rows, cell))
    if costs is None:
        grids.append("Estimated speeds need the cost of verifying drafts of several lengths, which a plain greedy run "
                     "does not measure: export the trace (x) and run `decode-tui whatif` on it.")
    return grids


class ForwardsScreen(ModalScreen[None]):
    CSS_PATH = "forwards.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,f", "dismiss", "Close", id="forwards.close"),
    ]

    def __init__(self, trace: Sequence[tuple[float, Event]]) -> None:
        super().__init__()
        self.events = [event for _, event in trace]
        self.timeline = Timeline()
        for t, event in trace:
            self.timeline.add(event, t)
        self.timeline.close()  # the latest forward, whose events are all in at a pause or a step, is a row too
        finished = [e for e in self.events if isinstance(e, Finished)]
        self.finished = finished[-1] if finished else None

    def compose(self) -> ComposeResult:
        rows = self.timeline.rows
        with VerticalScroll(id="forwards-body"):
            yield Static(f"[b]Forward passes[/b] · {count(len(rows), 'target forward')} so far"
                         if self.finished is None else
                         f"[b]Forward passes[/b] · {decoded_tokens(*self.finished.token_counts)} in "
                         f"{count(self.finished.target_forwards, 'target forward')}", id="forwards-title")
            line = forward_views.acceptance_line(self.finished.acceptance_by_position if self.finished else None,
                                                 rows)
            yield Static(line[0].upper() + line[1:] + "." if line else
                         "No draft was verified in this run: every forward after the prefill was a plain step. "
                         "What prompt lookup would have needed (for a greedy run) comes first; the forwards are below.",
                         id="forwards-acceptance")
            speculative = any(isinstance(e, Started) and e.mode == "speculative" for e in self.events)
            cost = cost_line(draft_stats(rows)) if speculative else None
            if cost:
                yield Static(cost[0].upper() + cost[1:] + ".", id="forwards-cost")
            whatif = [Static(part, id="forwards-whatif" if i == 0 else None, classes="forwards-whatif")
                      for i, part in enumerate(whatif_tables(self.events, self.timeline))]
            if line:  # the rounds first, then what other settings would have done
                yield DataTable(id="forwards-table", zebra_stripes=True, cursor_type="row")
                yield from whatif
            else:  # one plain step a row: the what-if is the news, so it comes first
                yield from whatif
                yield DataTable(id="forwards-table", zebra_stripes=True, cursor_type="row")

    def on_mount(self) -> None:
        forwards = self.query_one(DataTable)
        forwards.add_columns(*forward_views.FORWARD_COLUMNS, forward_views.BAR_COLUMN)
        for r in self.timeline.rows:
            forwards.add_row(*forward_views.forward_cells(r, wall=False))
