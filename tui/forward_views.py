"""How a run's forward passes are shown, by ``decode-tui bench``/``whatif`` and by the app's forwards screen alike.

The acceptance line (acceptance by draft position as a sparkline, and the
tokens per verifying forward the per-position rate predicts beside the
observed figure), a timeline row's cells, and the PLD what-if grid (rows
``--max-ngram-size``, columns ``--num-pred-tokens``). Rich only, no Textual,
so the command line prints them without loading the app. It knows the core's
timeline and what-if rows; it measures and decodes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from rich import box
from rich.table import Table
from rich.text import Text

from ..core.analysis.whatif import WhatIf
from ..core.drafting.replay import DRAFT_LENGTHS, NGRAM_SIZES
from ..core.record.timeline import ForwardRow, expected_tokens_per_forward, per_position_rate, sparkline

FORWARD_COLUMNS = ("fwd", "tokens", "drafted", "kept", "draft ms", "verify ms")  # draft nodes, tokens kept
BAR_COLUMN = "█ token · rejected draft"  # the header of forward_cells' last cell


def acceptance_line(by_position: Sequence[float] | None, rows: Sequence[ForwardRow]) -> str | None:
    """Acceptance by draft position and the expected against the observed tokens per verifying forward; None
    when no draft was verified."""
    rate, yields = per_position_rate(rows), expected_tokens_per_forward(rows)
    if rate is None or yields is None:
        return None
    line = (f"per-position acceptance a = {rate:.2f}: expected {yields[0]:.2f} tokens per verifying forward "
            f"((1 - a^(k+1)) / (1 - a) at each round's k), observed {yields[1]:.2f}"
            + (" (acceptances came in runs)" if yields[1] > 1.1 * yields[0] else ""))
    if by_position:
        line = f"acceptance by draft position 1-{len(by_position)} {sparkline(by_position)}; " + line
    return line


def forward_cells(row: ForwardRow, wall: bool) -> list[str]:
    """One timeline row: FORWARD_COLUMNS, then the wall time (``wall``), then a bar (█ a token, · a rejected draft)."""
    cells = [str(row.forward), str(row.tokens), "-" if row.k is None else str(row.k),
             "-" if row.accepted is None else str(row.accepted),
             "-" if row.draft_ms is None else f"{row.draft_ms:.1f}",
             "-" if row.verify_ms is None else f"{row.verify_ms:.1f}"]
    if wall:
        cells.append(f"{row.wall_ms:.1f}")
    return [*cells, "█" * row.tokens + ("·" * (row.k - (row.accepted or 0)) if row.k else "")]


def lookup_grid(title: str, rows: Mapping[tuple[int | None, int], WhatIf], cell: Callable[[WhatIf], str | Text],
                compact: bool = False) -> Table:
    """A PLD what-if grid: one cell per (max_ngram_size, num_pred_tokens) of ``rows``. ``compact`` drops the
    vertical rules, for a terminal 80 columns wide."""
    grid = Table(title=title + " · rows --max-ngram-size, columns --num-pred-tokens", title_justify="left",
                 box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD, pad_edge=not compact)
    grid.add_column("n\\k", justify="right")
    for k in DRAFT_LENGTHS:
        grid.add_column(str(k), justify="right")
    for n in NGRAM_SIZES:
        grid.add_row(str(n), *(cell(rows[(n, k)]) for k in DRAFT_LENGTHS))
    return grid
