"""Painting the run on screen: what arrived since the last paint handed to the widgets, each once, and the
widgets cleared for a new run or a stored branch.

Split from the app so the app keeps the run's life (start, drain, keys) and this the widgets' side. It knows the
main screen's widgets and the run's view; it decides nothing about when to paint (the app's pacer does).
"""

from __future__ import annotations

from textual.app import App

from ..core.record.events import Mode
from .numbers import nth
from .run_view import Pending, RunView
from .widgets.beam_panel import BeamPanel
from .widgets.caption import Caption
from .widgets.mode_panels import ModePanels
from .widgets.stats_bar import StatsBar
from .widgets.text_pane import TextPane
from .widgets.token_inspector import TokenInspector


class Painter:
    def __init__(self, app: App[int]) -> None:
        # Queried once: a DOM query per paint was a tenth of the UI thread's time.
        self.text = app.query_one(TextPane)
        self.panels = app.query_one(ModePanels)
        self.caption = app.query_one(Caption)
        self.stats = app.query_one(StatsBar)
        self.inspector = app.query_one(TokenInspector)
        self.beams = app.query_one(BeamPanel)

    def clear(self, mode: Mode, view: RunView) -> None:
        """Empty widgets for a new run in ``mode`` (or a stored branch about to be painted)."""
        self.panels.start(mode)
        self.text.reset()
        self.inspector.update("")
        self.caption.say("")
        self.stats.show(view.counters)

    def paint(self, pending: Pending, view: RunView, mode: Mode) -> None:
        """Hand what arrived since the last paint to the widgets, each once."""
        self.text.add(pending.pieces)
        self.panels.paint(pending, view.draft_stats)
        text = pending.caption_text()
        if text is not None:
            self.caption.say(text)
        self.stats.show(view.counters)
        if view.finished is not None and mode == "beam":
            self.show_best_beam(view)  # re-ranked while the search ran: its text is the best for the penalty shown
        elif mode == "beam" and pending.steps:
            # Beam search writes its text at the end: meanwhile the pane says so, with the best open beam's end.
            step = pending.steps[-1]
            best = max(step.beams, key=lambda b: b.score)
            self.text.show_instead(f"Searching, beam step {nth(step.step)}: the text comes when the search ends. "
                                   f"The best open beam so far ends …{best.text_tail}")

    def show_best_beam(self, view: RunView) -> None:
        """The text pane shows the best finished beam for the length penalty the beam panel ranks by: the run's
        own tokens where that is the hypothesis it emitted, else that hypothesis's text."""
        finished, hypotheses = view.finished, self.beams.finished()
        if finished is None or not hypotheses or self.beams.length_penalty is None:  # not re-ranked: the run's text
            self.text.show_instead(None)
            return
        best = hypotheses[0]
        self.text.show_instead(None if best.token_ids == finished.token_ids else best.text)
