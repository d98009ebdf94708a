"""The run's branches: every path the user forked, kept with its own events, as plain state (no Textual).

A branch is a run that keeps its parent's first ``position`` tokens, forces a token or a text, and decodes on
(core/record/path.py). The tree keeps every branch's events as the app saw them, so showing a stored branch replays
its events into a fresh view (nothing decoded again), and its figures are its own ``finished`` event's.
:class:`BranchRequest` is what the app hands its source to start a branch: plain values, no torch, so this
module and the app stay light.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..core.record.events import Branched, Event, Finished, TokenEmitted, TokenSource
from ..core.record.transcript import TokenStats
from .numbers import nth


@dataclass(frozen=True)
class BranchRequest:
    """Start a run from a path: the parent's first tokens (with their sources and figures), then what is forced:
    a token by id (a candidate picked from the list) or a text (typed: the source tokenizes it)."""

    branch: int
    parent: int
    kept: tuple[int, ...]
    kept_sources: tuple[TokenSource, ...]
    kept_stats: tuple[TokenStats | None, ...]
    forced_ids: tuple[int, ...] = ()
    forced_text: str = ""
    # A picked candidate's figures, read from the parent's own distribution there (log-prob, entropy, rank):
    # the branch then feeds only the forced token to the parent's cache (core/record/path.py).
    forced_stats: tuple[TokenStats | None, ...] = ()


@dataclass
class Branch:
    number: int
    parent: int | None
    position: int  # tokens kept from the parent
    forced_text: str
    trace: list[tuple[float, Event]] = field(default_factory=list)  # its events as the app saw them, timed

    @property
    def finished(self) -> Finished | None:
        last = self.trace[-1][1] if self.trace else None
        return last if isinstance(last, Finished) else None

    @property
    def tokens(self) -> list[TokenEmitted]:
        return [e for _, e in self.trace if isinstance(e, TokenEmitted)]

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)

    @property
    def forced(self) -> list[TokenEmitted]:
        return [t for t in self.tokens if t.source == "forced"]

    def summary(self, state: str = "stopped") -> str:
        """One line for the tree: where it forks, what was forced and how likely it was, its length and figures.
        ``state``: what an unfinished branch's run is doing (running, paused, stopped)."""
        done = self.finished
        length = done.new_tokens if done else len(self.tokens)
        parts = [f"#{self.number}"]
        if self.parent is not None:
            forced = self.forced
            p = math.exp(sum(t.logprob for t in forced if t.logprob is not None)) if forced else None
            rank = f", #{forced[0].rank}" if forced and forced[0].rank is not None else ""
            parts.append(f"token {nth(self.position)}: {self.forced_text!r}"
                         + (f" (p {p:.1%}{rank})" if p is not None else ""))
        else:
            parts.append("the first run")
        parts.append(f"{length} tok")
        # Short enough for a tree row in an 80-column dialog (a row is cut, never wrapped): the sum log-prob is in
        # the comparison (c), the perplexity says the same here.
        if done is not None and done.perplexity is not None:
            parts.append(f"ppl {done.perplexity:.2f}")
        parts.append(done.finish_reason if done else state)
        return " · ".join(parts)


class BranchTree:
    """Every branch of this prompt and model; ``current`` is the one shown."""

    def __init__(self) -> None:
        self.branches: list[Branch] = [Branch(0, None, 0, "")]
        self.current = 0

    def fork(self, parent: int, position: int, forced_text: str) -> Branch:
        branch = Branch(len(self.branches), parent, position, forced_text)
        self.branches.append(branch)
        self.current = branch.number
        return branch

    def load(self, recorded: dict[int, list[tuple[float, Event]]]) -> None:
        """The branches of a recording (tui/sources.py), each from its own events; numbered as they were."""
        for number in sorted(recorded):
            trace = recorded[number]
            branched = branched_of(trace)
            parent = branched.parent if branched is not None and branched.parent is not None else 0
            self.branches.append(Branch(len(self.branches), parent, branched.position if branched else 0,
                                        branched.forced_text if branched else "", trace))

    def others(self) -> list[tuple[int, list[tuple[float, Event]]]]:
        """Every branch but the one on screen, with its events (what a recording writes beside the run)."""
        return [(b.number, b.trace) for b in self.branches if b.number != self.current and b.trace]

    def drop(self, number: int) -> None:
        """Forget a branch that never ran (its run failed), showing its parent again."""
        branch = self.branches[number]
        if number == len(self.branches) - 1 and branch.parent is not None:
            self.branches.pop()
            self.current = branch.parent

    def rows(self) -> list[tuple[int, Branch]]:
        """(depth, branch) in tree order: each branch followed by its children."""
        out: list[tuple[int, Branch]] = []

        def walk(number: int, depth: int) -> None:
            out.append((depth, self.branches[number]))
            for child in self.branches:
                if child.parent == number:
                    walk(child.number, depth + 1)

        walk(0, 0)
        return out

    def fork_point(self, a: int, b: int) -> int:
        """How many leading tokens branches ``a`` and ``b`` share: where their texts part."""
        ta, tb = self.branches[a].tokens, self.branches[b].tokens
        n = 0
        while n < min(len(ta), len(tb)) and ta[n].token_id == tb[n].token_id:
            n += 1
        return n


def branched_of(trace: list[tuple[float, Event]]) -> Branched | None:
    return next((e for _, e in trace if isinstance(e, Branched)), None)
