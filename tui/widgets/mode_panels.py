"""The current mode's panel: candidates by sampling stage, the beams, the draft rounds, or prompt lookup.

One panel per mode family in a ``ContentSwitcher``; a mode change shows its
panel and a new run clears them all. :meth:`ModePanels.paint` hands one
paint's worth of a run (a :class:`~decode_tui.tui.run_view.Pending`) to the
panels that show it, and the border says what a slow step is busy with.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ContentSwitcher

from ...core.modes import MODE_SPECS, View
from ...core.record.draft_stats import DraftStats
from ...core.record.events import Mode
from ..cost_view import cost_line
from ..run_view import Pending
from .beam_panel import BeamPanel
from .candidates import CandidatesPanel
from .draft_panel import DraftPanel
from .lookup_panel import LookupPanel

PANEL_FOR_VIEW: dict[View, str] = {"candidates": "panel-candidates", "beam": "panel-beam", "draft": "panel-draft",
                                   "lookup": "panel-pld"}


def panel_for(mode: Mode) -> str:
    """The panel that shows ``mode``: its view's (core/modes.py)."""
    return PANEL_FOR_VIEW[MODE_SPECS[mode].view]


class ModePanels(ContentSwitcher):
    def __init__(self, mode: Mode, *, id: str | None = None) -> None:
        super().__init__(initial=panel_for(mode), id=id)
        self.mode = mode

    def compose(self) -> ComposeResult:
        yield CandidatesPanel(id="panel-candidates")
        yield BeamPanel(id="panel-beam")
        yield DraftPanel(id="panel-draft")
        with Vertical(id="panel-pld"):
            yield LookupPanel(id="lookup")
            yield DraftPanel(id="pld-rounds")

    def start(self, mode: Mode) -> None:
        """A new run in ``mode``: its panel shown, every panel cleared."""
        self.mode = mode
        self.current = panel_for(mode)
        self.query_one(BeamPanel).reset()
        self.query_one(CandidatesPanel).reset()
        for panel in self.query(DraftPanel):
            panel.reset(self._waiting())
        self.query_one(LookupPanel).reset((), self._waiting())

    def _waiting(self) -> str:
        """What the mode's drafting panel says before its first round (its DrafterSpec's words)."""
        drafter = MODE_SPECS[self.mode].drafter
        return drafter.waiting if drafter is not None else "waiting for the first draft"

    def set_glyphs(self, glyphs: dict[str, str]) -> None:
        self.query_one(CandidatesPanel).glyphs = glyphs
        for panel in self.query(DraftPanel):
            panel.glyphs = glyphs

    def paint(self, pending: Pending, stats: DraftStats) -> None:
        """What arrived since the last paint, each panel once; ``stats``: the run's draft rounds so far."""
        lookup = self.query_one(LookupPanel)
        if pending.started is not None:
            # What the drafter said it starts from (a recycled matrix's rows) stands beside the waiting words.
            notes = pending.started.notes or ()
            lookup.reset(pending.started.prompt_pieces or (), " · ".join((self._waiting(), *notes)))
            max_new = pending.started.params.get("max_new_tokens")
            self.query_one(BeamPanel).max_new_tokens = max_new if isinstance(max_new, int) else None
        lookup.add_tokens([p.text for p in pending.pieces])
        if pending.sampled is not None:
            self.query_one(CandidatesPanel).show(pending.sampled)
        self.query_one(BeamPanel).add(pending.steps)
        spec = MODE_SPECS[self.mode]
        rounds = "#pld-rounds" if spec.view == "lookup" else "#panel-draft"
        if pending.adaptive is not None:
            self.query_one(rounds, DraftPanel).set_adaptive(pending.adaptive)
        if pending.rounds:
            panel = self.query_one(rounds, DraftPanel)
            panel.add(pending.rounds, stats.by_position(),
                      cost_line(stats, short=True) if spec.drafter is not None and spec.drafter.draft_model else None)
            if pending.lookup_changed:
                last = pending.rounds[-1]
                lookup.show(last.proposed, last.verified.accepted)

    def show_busy(self, label: str) -> None:
        if self.border_subtitle != label:
            self.border_subtitle = label

    def redraw(self) -> None:
        self.query_one(CandidatesPanel).redraw()
        self.query_one(BeamPanel).redraw()
        self.query_one(LookupPanel).redraw()
        for panel in self.query(DraftPanel):
            panel.redraw()
