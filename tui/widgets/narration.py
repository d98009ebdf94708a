"""The lesson's narration: what to look at now, what just happened, what to try, and the closing summary.

A lesson (decode_tui.lessons) pauses the run at the moments that matter; this
panel shows the text written for that moment, and what ``n`` does next. It
shows text it is given; which pause a run has reached is decided by
``lessons.PauseTracker`` in the decoder thread.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...core.record.events import Finished
from ...lessons import Lesson, Pause
from ..numbers import count, decoded_tokens, draft_counts


def pause_text(pause: Pause, live: bool, name: str) -> str:
    """A pause's narration. Its ``try`` line needs a live run (a recording plays as it was recorded), unless the
    lesson says it works in a replay too."""
    if not pause.try_:
        return pause.text
    if live or pause.try_in_replay:
        return f"{pause.text}\nTry: {pause.try_}"
    return f"{pause.text}\nLive, you could try this (decode-tui lesson {name} --live): {pause.try_}"


def figures(result: Finished) -> str:
    """The run's own figures, for the summary."""
    parts = [f"{decoded_tokens(*result.token_counts)} in "
             f"{count(result.target_forwards, 'target forward')} ({result.tokens_per_forward:.2f} per forward)"]
    if result.drafted:
        parts.append(draft_counts(result.drafted, result.accepted or 0, result.draft_rounds, result.draft_depth))
    if result.acceptance_by_position:
        parts.append("acceptance by draft position " +
                     ", ".join(f"{rate:.0%}" for rate in result.acceptance_by_position))
    parts.append(f"{result.tokens_per_s:.1f} tok/s")
    if result.perplexity is not None:
        parts.append(f"perplexity {result.perplexity:.2f}")
    return "; ".join(parts)


class Narration(VerticalScroll):
    """A bordered panel titled with the lesson; its text changes a few times a lesson, not per token. A text taller
    than the panel scrolls (a Static alone only cuts it): PgDn and PgUp, with a sign on the border while more
    is below."""

    # Never focused: a focused scroll view takes the arrows and enter, which select tokens and branch.
    can_focus = False

    def __init__(self, lesson: Lesson, live: bool, quits: str = "Quit", **kwargs: object) -> None:
        """``quits``: what q does, in the footer's words (Quit, or Back to the list)."""
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.body = Static(id="narration-body")
        self.lesson = lesson
        self.live = live
        self.quits = quits
        self.border_title = f"lesson: {lesson.title}"
        self.text = ""
        self.hint = ""
        self.said = ""  # the last pause's text, while the run goes on past it

    def compose(self) -> ComposeResult:
        yield self.body

    def on_mount(self) -> None:
        self.intro()

    def _show(self, body: str, hint: str) -> None:
        """``body`` inside; the keys to press on the bottom border, where a long text (the summary in an
        80x24 terminal) cannot push them out of view as it did when they were its last line."""
        self.text = body
        self.hint = hint
        self.border_subtitle = hint
        self.body.update(Text(body))
        self.scroll_home(animate=False)
        self.call_after_refresh(self._sign_more)

    def _sign_more(self) -> None:
        """A text taller than the panel says so on the border, with the keys that scroll it: a summary cut
        mid-sentence with no sign of more read as finished."""
        self.border_subtitle = (f"▼ more: PgDn · {self.hint}" if self.max_scroll_y > 0 and self.scroll_y <
                                self.max_scroll_y else self.hint)

    def on_resize(self) -> None:
        self.call_after_refresh(self._sign_more)

    def page(self, pages: int) -> None:
        """Scroll the text by ``pages`` panels (PgDn: 1, PgUp: -1)."""
        self.scroll_to(y=self.scroll_y + pages * max(1, self.content_size.height - 1), animate=False)
        self.call_after_refresh(self._sign_more)

    def intro(self) -> None:
        self.said = ""
        self._show(self.lesson.intro, "n: start · space: pause or resume · ?: every key")

    def paused(self, text: str) -> None:
        self.said = text
        self._show(text, "n: go on to the next moment · space: resume")

    def going(self) -> None:
        """The run goes on: the last pause's text stays, said to be of that moment (the screen moves on past it,
        and later rounds may do otherwise); the hint says how to stop it."""
        body = f"Said at the last pause; the run has moved on since.\n{self.said}" if self.said else self.text
        self._show(body, "running · space: pause · n at a pause: go on")

    def summary(self, result: Finished, last: str | None) -> None:
        """The end: the run's figures first (a short panel, in 80x24, keeps them), the last pause's text when the
        end was one, and the lesson's summary, which may speak of the figures above it."""
        body = f"This run: {figures(result)}.\n\n"
        body += f"{last}\n\n" if last else ""
        body += self.lesson.summary
        self._show(body, f"r: run it again · q: {self.quits[:1].lower()}{self.quits[1:]}")
