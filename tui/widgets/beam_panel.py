"""Beam search live: the open beams, the finished hypotheses, the ancestry tree and the early-stopping test.

The finished hypotheses can be re-ranked for another length penalty at once
(:func:`~decode_tui.core.record.events.rerank` is a pure function of their
scores), which is why the panel keeps its own copy of the last step.
"""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group, RenderableType
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ...core.record.events import Beam, BeamStepped, Hypothesis, rerank, rescored_check
from ..numbers import nth
from .live_panel import LivePanel

TREE_STEPS = 6  # the ancestry tree shows this many most recent steps
COMPACT_BELOW = 50  # a panel narrower than this (an 80-column terminal) lays the tables out compactly


class BeamPanel(LivePanel):
    COMPONENT_CLASSES: ClassVar[set[str]] = {"beam-panel--best", "beam-panel--finished", "beam-panel--pruned"}

    def __init__(self, **kwargs: object) -> None:
        super().__init__("waiting for the first beam step", **kwargs)
        self.history: list[BeamStepped] = []
        self.length_penalty: float | None = None  # set when the user re-ranks with another penalty
        self.max_new_tokens: int | None = None  # the run's, for the early-stopping test under `never`
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
        beams, finished = self._tables()
        pruned = [c for c in step.candidates if c.verdict == "pruned"]
        pruned_line = Text("pruned: " + ", ".join(f"{c.text!r} (from {c.parent}, {c.sum_logprobs:.2f})"
                                                  for c in pruned[:4]) if pruned else "pruned: none",
                           style=self.style_of("beam-panel--pruned"))
        check, lp = step.early_stop, self.length_penalty
        # One length penalty on screen: re-ranked, the test is re-scored with the same penalty as the table.
        rescored = f", re-scored for lp={lp:g}" if lp is not None else ""
        if lp is not None:
            check = rescored_check(step, lp, self.max_new_tokens)
        if check.best_attainable_score is not None and check.worst_finished_score is not None:
            verdict = ("would stop" if check.done else "would go on") if rescored else \
                ("stop" if check.done else "go on")
            stop_line = (f"early stop ({check.early_stopping}{rescored}): best attainable "
                         f"{check.best_attainable_score:.3f} vs worst finished {check.worst_finished_score:.3f} "
                         f"→ {verdict}")
        else:
            stop_line = f"early stop ({check.early_stopping}): {'done' if check.done else 'no finished hypothesis yet'}"
        self._parts = (beams, finished, pruned_line, Text(stop_line), self._tree())
        self.update(Group(*self._parts))

    def _tables(self) -> tuple[Table, Table]:
        """The open beams and the finished hypotheses, as boxed tables."""
        step = self.history[-1]
        best = self.style_of("beam-panel--best")
        beams = Table(title=f"step {nth(step.step)}: open beams", title_justify="left", expand=True, padding=(0, 1))
        for name, justify in (("#", "right"), ("slot←parent", "left"), ("text tail", "left"), ("Σ log p", "right"),
                              ("score", "right")):
            beams.add_column(name, justify=justify, no_wrap=name != "text tail")  # type: ignore[arg-type]
        for rank, b in enumerate(self._ranked(), start=1):
            beams.add_row(str(rank), f"{b.beam}←{b.parent}", quoted(b.text_tail[-28:]), f"{b.sum_logprobs:.3f}",
                          f"{b.score:.3f}", style=best if rank == 1 else "")
        finished = Table(title=self._finished_title(), title_justify="left", expand=True, padding=(0, 1))
        for name, justify in (("#", "right"), ("text", "left"), ("len", "right"), ("Σ log p", "right"),
                              ("score", "right")):
            finished.add_column(name, justify=justify)  # type: ignore[arg-type]
        hyps = self.finished()
        for rank, h in enumerate(hyps, start=1):
            finished.add_row(str(rank), _where_apart(h.text, [o.text for o in hyps if o is not h], 34),
                             str(len(h.token_ids)), f"{h.sum_logprobs:.3f}", f"{h.score:.3f}")
        return beams, finished

    def _compact(self, width: int) -> tuple[Text, Text]:
        """The same two tables for a narrow panel: each row's figures on one line and its text, cut from the
        left to the panel's width, on the next. In a text column the tails wrapped over three lines a row, and
        four beams pushed the early-stopping test out of an 80x24 terminal."""
        step = self.history[-1]
        best = self.style_of("beam-panel--best")
        beams = Text()
        beams.append(f"step {nth(step.step)}: open beams\n", style="italic")
        beams.append(f"{'#':>2} {'slot←p':<7}{'Σ log p':>9}{'score':>8}\n", style="bold")
        for rank, b in enumerate(self._ranked(), start=1):
            beams.append(f"{rank:>2} {f'{b.beam}←{b.parent}':<7}{b.sum_logprobs:>9.3f}{b.score:>8.3f}\n"
                         f"   {_tail(b.text_tail, width - 4)}\n", style=best if rank == 1 else "")
        finished = Text()
        finished.append(self._finished_title() + "\n", style="italic")
        if self.finished():
            finished.append(f"{'#':>2} {'len':>4}{'Σ log p':>9}{'score':>8}\n", style="bold")
        hyps = self.finished()
        for rank, h in enumerate(hyps, start=1):
            finished.append(f"{rank:>2} {len(h.token_ids):>4}{h.sum_logprobs:>9.3f}{h.score:>8.3f}\n"
                            f"   {_where_apart(h.text, [o.text for o in hyps if o is not h], width - 4)}\n")
        beams.rstrip()
        finished.rstrip()
        return beams, finished

    def _ranked(self) -> list[Beam]:
        return sorted(self.history[-1].beams, key=lambda b: b.score, reverse=True)

    def _finished_title(self) -> str:
        lp = self.length_penalty
        return "finished hypotheses" + (f" (re-ranked for lp={lp:g})" if lp is not None else "")

    def fit(self, width: int, height: int) -> list[list[Segment]]:
        """Where the early-stopping test would be cut, it and the pruned candidates come right after the open
        beams, ahead of the finished hypotheses and the tree, and where even that cuts it, first: cut at the
        bottom, an 80x24 terminal lost the test, which decides when beam search ends."""
        if not self.history or self._parts is None:
            return super().fit(width, height)
        beams: RenderableType
        finished: RenderableType
        beams, finished, pruned_line, stop_line, tree = self._parts
        if width < COMPACT_BELOW:  # the boxed tables would cut the scores to '-0.5…'
            beams, finished = self._compact(width)
        orders: list[tuple[RenderableType, ...]] = [(beams, finished, pruned_line, stop_line, tree),
                                                    (beams, stop_line, pruned_line, finished, tree)]
        if self.history[-1].early_stop.worst_finished_score is not None:
            # Shorter still (a lesson's narration below, in 80x24): a test that compares scores goes on top,
            # above the beams it judges. One that has no finished hypothesis to compare with yet does not.
            orders.append((stop_line, beams, pruned_line, finished, tree))
        needed = ["early stop ("]
        if any(c.verdict == "finished" for c in self.history[-1].candidates):
            # A beam finished at this step: the finished hypotheses are the news (a lesson's pause points at them),
            # so a short panel keeps them in view too, above the beams if it must.
            needed.append("finished hypotheses")
            orders += [(beams, stop_line, finished, pruned_line, tree), (stop_line, finished, beams, pruned_line, tree),
                       (finished, stop_line, beams, pruned_line, tree)]
        for order in orders:
            lines = self.lines_of(Group(*order), width)
            shown = ["".join(segment.text for segment in line).strip() for line in lines[:height]]
            if all(any(text.startswith(prefix) for text in shown) for prefix in needed):
                break
        texts = ["".join(segment.text for segment in line).strip() for line in lines]
        heading = next((i for i, text in enumerate(texts) if text.startswith("ancestry (")), None)
        if heading is not None and heading >= height - 1:  # the tree's heading would be cut from its tree
            lines = lines[:heading]
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


def quoted(text: str) -> str:
    """A beam's text in single quotes, its line breaks and tabs escaped as repr would, but not its quotes:
    repr turned 'is "Mermaid's Brew"' into ' is "Mermaid\\'s Brew"'."""
    return "'" + text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t") + "'"


def _tail(text: str, room: int) -> str:
    """``text``'s end, quoted, in at most ``room`` cells (never fewer than four characters of it), with an
    ellipsis where its start is left out: ``'…that was'``."""
    shown, n = quoted(text), min(len(text), max(room - 3, 4) + 1)  # quotes and the ellipsis take three cells
    while len(shown) > room and n > 4:
        n -= 1
        shown = "'…" + quoted(text[-n:])[1:]
    return shown


def _where_apart(text: str, others: list[str], room: int) -> str:
    """A finished hypothesis in ``room`` cells, shown from just before where it parts from the others: two
    hypotheses that end alike (``'…alance of its aquatic ecosystem.'``) read apart where they differ. Its whole
    text where it fits; its tail where it parts from none (one hypothesis alone)."""
    if len(quoted(text)) <= room or not others:
        return _tail(text, room)
    # The latest point where it still agrees with another: what comes after is its own.
    apart = max(_agreed(text, other) for other in others)
    start = max(0, apart - 6)
    shown = quoted(text[start:])
    if start:
        shown = "'…" + shown[1:]
    if len(shown) <= room:
        return shown
    return shown[: max(room - 2, 4)] + "…'"


def _agreed(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` share at their start."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)
