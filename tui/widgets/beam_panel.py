"""Beam search live: the open beams, the finished hypotheses, the ancestry tree and the early-stopping test.

The finished hypotheses can be re-ranked for another length penalty at once
(:func:`~decode_tui.core.strategies.beam.rerank` is a pure function of their
scores), which is why the panel keeps its own copy of the last step.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich import box
from rich.console import Group
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ...core.events import BeamStepped, Hypothesis, rerank
from .live_panel import LivePanel

TREE_STEPS = 6  # the ancestry tree shows this many most recent steps
COMPACT_BELOW = 50  # a panel narrower than this (an 80-column terminal) lays the tables out compactly


class BeamPanel(LivePanel):
    COMPONENT_CLASSES: ClassVar[set[str]] = {"beam-panel--best", "beam-panel--finished", "beam-panel--pruned"}

    def __init__(self, **kwargs: object) -> None:
        super().__init__("waiting for the first beam step", **kwargs)
        self.history: list[BeamStepped] = []
        self.length_penalty: float | None = None  # set when the user re-ranks with another penalty
        self._parts: tuple[Table, Table, Text, Text, Tree] | None = None  # the last redraw's, in their usual order

    def reset(self) -> None:
        self.history, self.length_penalty = [], None
        self.update("waiting for the first beam step")

    def add(self, steps: list[BeamStepped]) -> None:
        if steps:
            self.history.extend(steps)
            self.history = self.history[-TREE_STEPS:]
            self.redraw()

    def rerank_finished(self, length_penalty: float) -> tuple[Hypothesis, ...]:
        self.length_penalty = length_penalty
        self.redraw()
        return self.finished()

    def finished(self) -> tuple[Hypothesis, ...]:
        if not self.history:
            return ()
        hyps = self.history[-1].finished
        return rerank(hyps, self.length_penalty) if self.length_penalty is not None else hyps

    def redraw(self) -> None:
        if not self.history:
            return
        step = self.history[-1]
        beams, finished = self._tables(compact=False)
        pruned = [c for c in step.candidates if c.verdict == "pruned"]
        pruned_line = Text("pruned: " + ", ".join(f"{c.text!r} (from {c.parent}, {c.sum_logprobs:.2f})"
                                                  for c in pruned[:4]) if pruned else "pruned: none",
                           style=self.style_of("beam-panel--pruned"))
        check = step.early_stop
        if check.best_attainable_score is not None and check.worst_finished_score is not None:
            verdict = "stop" if check.done else "go on"
            stop_line = (f"early stop ({check.early_stopping}): best attainable {check.best_attainable_score:.3f} vs "
                         f"worst finished {check.worst_finished_score:.3f} → {verdict}")
        else:
            stop_line = f"early stop ({check.early_stopping}): {'done' if check.done else 'no finished hypothesis yet'}"
        self._parts = (beams, finished, pruned_line, Text(stop_line), self._tree())
        self.update(Group(*self._parts))

    def _tables(self, compact: bool) -> tuple[Table, Table]:
        """The open beams and the finished hypotheses; ``compact``: for a narrow panel, without vertical rules
        and with shorter texts, so the scores keep all their digits."""
        step = self.history[-1]
        best = self.style_of("beam-panel--best")
        look: dict[str, Any] = dict(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True) \
            if compact else {}
        tail, text = (14, 16) if compact else (28, 32)
        beams = Table(title=f"step {step.step}: open beams", title_justify="left", expand=True, padding=(0, 1),
                      **look)
        # Compact, the text goes last, where it can wrap: the figures keep their columns.
        columns = ["#", "slot←p" if compact else "slot←parent", "text tail", "Σ log p", "score"]
        order = [0, 1, 3, 4, 2] if compact else [0, 1, 2, 3, 4]
        for i in order:
            beams.add_column(columns[i], justify="left" if i in (1, 2) else "right", no_wrap=i != 2)
        for rank, b in enumerate(sorted(step.beams, key=lambda b: b.score, reverse=True), start=1):
            cells = [str(rank), f"{b.beam}←{b.parent}", repr(b.text_tail[-tail:]), f"{b.sum_logprobs:.3f}",
                     f"{b.score:.3f}"]
            beams.add_row(*(cells[i] for i in order), style=best if rank == 1 else "")
        lp = self.length_penalty
        title = "finished hypotheses" + (f" (re-ranked for lp={lp:g})" if lp is not None else "")
        finished = Table(title=title, title_justify="left", expand=True, padding=(0, 1), **look)
        for name, justify in (("#", "right"), ("text", "left"), ("len", "right"), ("Σ log p", "right"),
                              ("score", "right")):
            finished.add_column(name, justify=justify)  # type: ignore[arg-type]
        for rank, h in enumerate(self.finished(), start=1):
            finished.add_row(str(rank), repr(h.text[-text:]), str(len(h.token_ids)), f"{h.sum_logprobs:.3f}",
                             f"{h.score:.3f}")
        return beams, finished

    def fit(self, width: int, height: int) -> list[list[Segment]]:
        """Where the early-stopping test would be cut, it and the pruned candidates come right after the open
        beams, ahead of the finished hypotheses and the tree: cut at the bottom, an 80x24 terminal lost the
        test, which decides when beam search ends."""
        if not self.history or self._parts is None:
            return super().fit(width, height)
        beams, finished, pruned_line, stop_line, tree = self._parts
        if width < COMPACT_BELOW:  # the boxed tables would cut the scores to '-0.5…'
            beams, finished = self._tables(compact=True)
        lines = self.lines_of(Group(beams, finished, pruned_line, stop_line, tree), width)
        if not any("".join(segment.text for segment in line).startswith("early stop (") for line in lines[:height]):
            lines = self.lines_of(Group(beams, stop_line, pruned_line, finished, tree), width)
        return lines

    def _tree(self) -> Tree:
        """Ancestry of the open beams over the last steps: dead branches are left out."""
        steps = self.history
        alive = [{b.beam for b in steps[-1].beams}]
        for later in reversed(steps[1:]):
            alive.insert(0, {b.parent for b in later.beams if b.beam in alive[0]})
        tree = Tree(f"ancestry (last {len(steps)} steps)")
        nodes: dict[int, Tree] = {}
        for depth, step in enumerate(steps):
            texts = {(c.parent, c.token_id): c.text for c in step.candidates}
            new_nodes: dict[int, Tree] = {}
            for b in step.beams:
                if b.beam not in alive[depth]:
                    continue
                token = b.token_ids[-1] if b.token_ids else -1
                label = f"{texts.get((b.parent, token), str(token))!r} [{b.beam}] {b.sum_logprobs:.2f}"
                parent = nodes.get(b.parent, tree) if depth else tree
                new_nodes[b.beam] = parent.add(label)
            nodes = new_nodes
        return tree
