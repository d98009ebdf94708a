"""The app's branching: ``enter`` (branch here) on a selected token, ``B`` (the branches), switching and
comparing.

A branch rewinds the run to the selected position, forces the chosen token or text and decodes on in the current
mode and settings (the core starts from the path, core/record/path.py). Every branch is kept, with its own events
(tui/branches.py): showing one replays its events into a fresh view, nothing decoded again. A branch whose run
fails (a text the tokenizer cannot represent) is dropped with the message, and its parent shown again, so
nothing already made is lost. It knows the app only through :class:`BranchHost`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Protocol

from ..core.record.events import Event, TokenEmitted
from ..core.record.transcript import TokenStats
from .branches import BranchRequest, BranchTree
from .lesson_control import LessonControl
from .numbers import nth
from .pump import EventPump
from .run_view import RunView, Severity
from .screens.branch_here import BranchHere, Choice, Row
from .screens.branches import BranchesScreen, Picked
from .screens.compare_branches import CompareBranches
from .settings import Settings
from .settings_control import replay_advice


class BranchHost(Protocol):
    settings: Settings
    replaying: str | None
    from_list: bool
    view: RunView
    pump: EventPump | None
    retired: EventPump | None  # the last run's pump, finished or stopped
    lessons: LessonControl

    def say(self, message: str, severity: Severity = ...) -> None: ...
    def start_run(self) -> None: ...
    def show_events(self, trace: list[tuple[float, Event]], paused: bool) -> None: ...
    def repaint(self) -> None: ...
    def selected_token(self) -> TokenEmitted | None: ...
    def push_screen(self, screen: Any, callback: Callable[[Any], None] | None = ...) -> Any: ...


class BranchControl:
    def __init__(self, host: BranchHost) -> None:
        self.host = host
        self.tree = BranchTree()
        self.settings: dict[int, Settings] = {}  # each branch's settings, to show it in its own mode
        # A run still going when another branch was shown: paused, with its view and whether a lesson waited at one
        # of its moments, until its branch is shown again (it goes on where it was) or another run starts.
        self.parked: tuple[int, EventPump, RunView, bool] | None = None

    def new_tree(self) -> None:
        """A new prompt or model: the old branches belong to another text."""
        self.tree = BranchTree()
        self.settings = {}

    def run_started(self) -> None:
        """The run on screen is the current branch's: its events are recorded there as they come."""
        self.tree.branches[self.tree.current].trace = self.host.view.trace
        self.settings[self.tree.current] = self.host.settings

    def run_failed(self) -> bool:
        """A new branch's run failed before it decoded anything: drop it and show its parent. Whether it did."""
        branch = self.tree.branches[self.tree.current]
        if branch.parent is None or branch.tokens:
            return False
        self.tree.drop(branch.number)
        self.show(self.tree.current)
        return True

    # ------------------------------------------------------------------ branch here
    def branch_here(self) -> None:
        host = self.host
        if host.replaying is not None:
            host.say(f"This is a replay of {host.replaying}: a branch decodes on from the chosen token, which needs "
                     "the model; B still shows the recorded branches. "
                     + replay_advice(host.from_list, "Run it live (`decode-tui run`) to branch."), "warning")
            return
        piece = host.selected_token()
        if piece is None:
            host.say("Select a token with ← and → first: enter branches at the selected one.", "warning")
            return
        sampled = host.view.sampled_at.get(piece.index)
        rows: list[Row] = []
        stages = ""
        if sampled is not None:
            final, raw = sampled.stages[-1], {c.token_id: (c.prob, rank) for rank, c in
                                              enumerate(sampled.stages[0].kept, start=1)}
            rows = [Row(c.token_id, c.text, c.prob, raw[c.token_id][0] if c.token_id in raw else None,
                        c.token_id == piece.token_id, _figures(raw.get(c.token_id), piece.entropy))
                    for c in final.kept]
            active = [s.stage for s in sampled.stages[1:]]
            stages = "after " + ", ".join(active) if active else "(no stage changes the raw distribution)"

        def chosen(choice: Choice | None) -> None:
            if choice is not None:
                self.fork(piece.index, choice)

        host.push_screen(BranchHere(piece.index, piece.text, rows, stages), chosen)

    def fork(self, position: int, choice: Choice) -> None:
        """Rewind the branch on screen to ``position``, force ``choice`` and decode on."""
        host, tree = self.host, self.tree
        parent = tree.current
        kept = tree.branches[parent].tokens[:position]
        branch = tree.fork(parent, position, choice.text)
        request = BranchRequest(
            branch=branch.number, parent=parent, kept=tuple(t.token_id for t in kept),
            kept_sources=tuple(t.source for t in kept),
            kept_stats=tuple(TokenStats.of(t) for t in kept),
            forced_ids=(choice.token_id,) if choice.token_id is not None else (), forced_text=choice.text,
            forced_stats=(choice.stats,) if choice.stats is not None else ())
        host.settings = dataclasses.replace(host.settings, branch=request)
        host.say(f"branch #{branch.number}: token {nth(position)} forced to {choice.text!r}; decoding on (B lists the "
                 "branches)")
        host.start_run()

    # ------------------------------------------------------------------ the tree
    def branches(self) -> None:
        def picked(result: Picked | None) -> None:
            if result is None:
                return
            what, number = result
            if what == "show":
                self.show(number)
            elif number == self.tree.current:
                self.host.say("Highlight another branch than the one on screen to compare them.", "warning")
            else:
                self.host.push_screen(CompareBranches(self.tree, self.tree.current, number))

        states = {self.tree.current: self.host.view.counters.state}  # the run on screen: running or paused
        if self.parked is not None:
            states[self.parked[0]] = "paused"
        self.host.push_screen(BranchesScreen(self.tree, states), picked)

    def show(self, number: int) -> None:
        """Show a stored branch from its own events, in its own settings."""
        host = self.host
        leaving, self.tree.current = self.tree.current, number
        if leaving == number and host.pump is not None and not host.pump.finished.is_set():
            return  # the branch on screen, still going: nothing to show anew
        settings = self.settings.get(number)
        if settings is not None:
            host.settings = settings
        # A run still going is paused and parked, not stopped: looking at another branch loses nothing, and showing
        # this one again brings it back where it was (a lesson at its moment, n and space working).
        if host.pump is not None:
            if host.pump.finished.is_set():
                host.retired = host.pump
            else:
                host.pump.pause()
                self.parked = (leaving, host.pump, host.view, host.lessons.waiting)
            host.pump = None
        back = self.parked if self.parked is not None and self.parked[0] == number else None
        host.show_events(self.tree.branches[number].trace, paused=back is not None)
        if back is not None:
            self.parked, (_, host.pump, parked_view, waiting) = None, back
            host.view.narration, host.view.narration_final = parked_view.narration, parked_view.narration_final
            host.lessons.shown_again(waiting)
            host.lessons.narrate(host.view)
        host.repaint()

    def unpark(self) -> EventPump | None:
        """The parked run's pump, given up (a new run starts, or the app ends): the caller stops it."""
        pump = self.parked[1] if self.parked is not None else None
        self.parked = None
        return pump

    def nothing_to_go_on(self) -> None:
        """space or n on a stored branch, whose run is not going: say why, and what does work."""
        ended = "finished" if self.host.view.finished is not None else "was stopped when another run started"
        self.host.say(f"Branch #{self.tree.current}'s run {ended}; it is shown from its events, so nothing steps or "
                      "resumes. r decodes it again; B shows another branch.", "warning")


def _figures(raw: tuple[float, int] | None, entropy: float | None) -> TokenStats | None:
    """A candidate's raw log-prob, entropy and rank, from the raw stage of the step that chose the token there
    (its distribution's entropy is the chosen token's own)."""
    if raw is None or entropy is None or raw[0] <= 0.0:
        return None
    return TokenStats(math.log(raw[0]), entropy, raw[1])
