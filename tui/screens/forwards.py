"""The run's forward passes one by one, and what other drafting settings would have cost on it.

Opened on the run shown (finished or not): a table with one row per target
forward pass (tokens it gave, the draft it verified, accepted, the drafter's
and the verification's own times), acceptance by draft position as a
sparkline with the tokens per forward that acceptance rate predicts beside
the observed figure, and for a finished greedy run (or greedy PLD or
speculative) the what-if grid: the exact target forwards prompt lookup needs
for each n-gram size and draft length (core/whatif.py). Estimated speeds need
this machine's measured forward costs: ``decode-tui whatif`` on the exported
trace gives them. It reads the run view's trace; it decodes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from ...core.errors import UsageError
from ...core.events import Event, Finished
from ...core.timeline import Timeline, expected_tokens_per_forward, per_position_rate, sparkline
from ...core.whatif import DRAFT_LENGTHS, NGRAM_SIZES, lookup_grid, trace_from_events


def acceptance_line(finished: Finished | None, timeline: Timeline) -> str:
    """Acceptance by draft position and the expected against the observed tokens per verifying forward."""
    by_position = finished.acceptance_by_position if finished is not None else None
    rate, yields = per_position_rate(timeline.rows), expected_tokens_per_forward(timeline.rows)
    if rate is None or yields is None:
        return "No draft was verified in this run: every forward after the prefill was a plain step."
    line = f"Per-position acceptance a = {rate:.2f}: expected {yields[0]:.2f} tokens per verifying forward " \
           f"((1 - a^(k+1)) / (1 - a) at each round's k), observed {yields[1]:.2f}."
    if by_position:
        line = f"Acceptance by draft position 1-{len(by_position)}: {sparkline(by_position)}   " + line
    return line


def whatif_table(events: Sequence[Event]) -> Table | str:
    """The PLD what-if grid for a finished greedy run, or why there is none."""
    try:
        trace = trace_from_events(events, "this run")
    except UsageError as err:
        return f"What if: {err}"
    if trace.eos_token_ids is None:
        return "What if: this recording does not say which tokens end the text; replay it with `decode-tui whatif`."
    rows = {(r.max_ngram_size, r.draft_length): r.target_forwards
            for r in lookup_grid(trace, trace.eos_token_ids)}
    table = Table(title=f"What if: target forwards prompt lookup would need for these {len(trace.token_ids)} tokens "
                        f"(exact; greedy needs {len(trace.token_ids)}) · rows --max-ngram-size, columns "
                        "--num-pred-tokens", title_justify="left")
    table.add_column("n\\k", justify="right")
    for k in DRAFT_LENGTHS:
        table.add_column(str(k), justify="right")
    fewest = min(rows.values())
    for n in NGRAM_SIZES:
        table.add_row(str(n), *(Text(str(rows[(n, k)]), style="bold" if rows[(n, k)] == fewest else "")
                                for k in DRAFT_LENGTHS))
    table.caption = ("Bold: the fewest forwards. For estimated tok/s from this machine's measured costs, export "
                     "the trace (x) and run `decode-tui whatif` on it.")
    return table


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
        finished = [e for e in self.events if isinstance(e, Finished)]
        self.finished = finished[-1] if finished else None

    def compose(self) -> ComposeResult:
        rows = self.timeline.rows
        with VerticalScroll(id="forwards-body"):
            yield Static(f"[b]Forward passes[/b] · {len(rows)} target forwards so far" if self.finished is None else
                         f"[b]Forward passes[/b] · {self.finished.new_tokens} tokens in "
                         f"{self.finished.target_forwards} target forwards", id="forwards-title")
            yield Static(acceptance_line(self.finished, self.timeline), id="forwards-acceptance")
            yield DataTable(id="forwards-table", zebra_stripes=True, cursor_type="row")
            yield Static(whatif_table(self.events), id="forwards-whatif")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("fwd", "tokens", "k", "accepted", "draft ms", "verify ms", "")
        for r in self.timeline.rows:
            table.add_row(str(r.forward), str(r.tokens), "-" if r.k is None else str(r.k),
                          "-" if r.accepted is None else str(r.accepted),
                          "-" if r.draft_ms is None else f"{r.draft_ms:.1f}",
                          "-" if r.verify_ms is None else f"{r.verify_ms:.1f}",
                          "█" * r.tokens + ("·" * (r.k - (r.accepted or 0)) if r.k else ""))
