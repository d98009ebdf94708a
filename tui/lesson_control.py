"""A lesson's part of the app: its pauses, checked in the decoder thread, and what the narration panel says.

A lesson (decode_tui.lessons) stops the run at its moments and shows a text for each; at the end it shows its
summary with the run's figures. ``n`` at one of its moments goes on to the next moment rather than one step.
This module keeps that state (is the run stopped at a moment, what the panel shows now) so the app only asks
it; it knows the narration widget and the run's view, not the rest of the app.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.record.events import BeamStepped, DraftProposed, DraftVerified, Event, Finished, TokenEmitted
from ..lessons import Lesson, PauseTracker
from .numbers import nth
from .run_view import RunView
from .widgets.narration import Narration, pause_text


def moment(event: Event) -> str:
    """Where in the run ``event`` is, in the words the panels use: ``round 3``, ``beam step 4``, ``token 12``."""
    if isinstance(event, DraftVerified | DraftProposed):
        return f"round {event.round}"
    if isinstance(event, BeamStepped):
        return f"beam step {nth(event.step)}"
    if isinstance(event, TokenEmitted):
        return f"token {nth(event.index)}"
    return "this moment"


class LessonControl:
    def __init__(self, lesson: Lesson | None, live: bool, narration: Callable[[], Narration]) -> None:
        self.lesson = lesson
        self.live = live  # a live model run (its texts may differ from the recording's), not a replay
        self.narration = narration
        self.waiting = lesson is not None  # stopped at a lesson's moment: n goes on to the next one
        self._narrated: tuple[str | None, bool] = (None, False)  # what the narration panel shows now

    def pauses(self) -> Callable[[Event], str | None] | None:
        """The lesson's pauses for the decoder thread: the narration text of each pause an event reaches."""
        lesson = self.lesson
        if lesson is None:
            return None
        tracker, live = PauseTracker(lesson.pauses), self.live

        def check(event: Event) -> str | None:
            pause = tracker.check(event)
            if pause is None:
                return None
            # Said with the moment it speaks of: once the run moves on, later rounds may do otherwise. (The end
            # needs no saying: nothing comes after it.)
            said = pause_text(pause, live, lesson.name)
            return said if isinstance(event, Finished) else f"At {moment(event)}: {said}"

        return check

    def started(self, paused: bool) -> None:
        """A new run: its intro when it starts paused, else the lesson is under way."""
        if self.lesson is None:
            return
        self.waiting, self._narrated = paused, (None, False)
        self.narration().intro() if paused else self.narration().going()

    def shown_again(self, waiting: bool) -> None:
        """The run was parked while another branch was shown and is on screen again: the lesson waits where it
        did, and the narration panel is written anew."""
        if self.lesson is not None:
            self.waiting, self._narrated = waiting, (None, False)
            if waiting:
                self.narration().intro()

    def narrate(self, view: RunView) -> None:
        """Show the lesson's text for where the run is: a pause's, or at the end the summary with the figures."""
        now = (view.narration, view.finished is not None)
        if self.lesson is None or now == self._narrated:
            return
        self._narrated = now
        if view.finished is not None:
            self.narration().summary(view.finished, view.narration if view.narration_final else None)
        elif view.narration is not None:
            self.narration().paused(view.narration)
            self.waiting = True

    def goes_on(self, view: RunView) -> None:
        """The run resumes from one of the lesson's moments."""
        if self.lesson is not None and self.waiting:
            self.waiting = False
            if view.finished is None:
                self.narration().going()

    def page(self, pages: int) -> None:
        """PgDn / PgUp: scroll the narration a panel at a time (a summary taller than an 80x24 panel)."""
        if self.lesson is not None:
            self.narration().page(pages)
