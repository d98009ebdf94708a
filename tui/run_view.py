"""What one run has shown so far, as plain state: the trace, the draft rounds, the counters and the captions.

The app's drain loop hands each batch of events to :meth:`RunView.apply` and
paints what :meth:`RunView.take` hands back; everything in between (assembling
a draft round from its proposal, its verdicts and the tokens it emitted, the
token inspector's lookups, the stats bar's counters, the caption of the last
step) happens here, with no Textual in it, so it is tested without an app.

Counters come from the core's events: ``target_forwards`` travels on every
event that changes it and the draft counts are recorded with the core's own
:class:`~decode_tui.core.record.draft_stats.DraftStats`, so the stats bar can never
disagree with the run's ``Finished`` figures. It knows events; it knows
nothing about widgets, threads or the clock (the caller passes ``now``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from ..core.modes import MODE_SPECS
from ..core.record.draft_stats import DraftStats
from ..core.record.events import (
    BeamStepped,
    Branched,
    DraftLengthDecided,
    DraftProposed,
    DraftVerified,
    Event,
    Finished,
    Mode,
    PositionVerdict,
    Started,
    TokenEmitted,
    TokenSampled,
)
from .numbers import given_tokens
from .pump import Failed, Notice, StepTracker
from .teaching import CAPTIONED_ALONE, EOS_MARK, caption

Severity = Literal["information", "warning", "error"]


def toast_seconds(message: str, severity: Severity) -> float:
    """How long a toast stays: an error 30 s; anything else 6 s, or longer for a long message, at about 15
    characters a second, a slow reading pace, since a note such as a draft's (what it kept, what it costs)
    runs to a few hundred characters and would be gone before it was read."""
    return 30.0 if severity == "error" else max(6.0, len(message) / 15)


BUSY_AFTER_S = 0.5  # a run that shows nothing new for this long says, on its panel, what it is doing


@dataclass(frozen=True)
class Round:
    """A draft round as the panels show it: what was proposed, the verdicts, the text of the extra token."""

    proposed: DraftProposed
    verified: DraftVerified
    extra_text: str


@dataclass
class Counters:
    """What the stats bar shows. While a run goes, from the events so far; once it ends, ``result``'s."""

    state: str = "loading"
    tokens: int = 0
    # Of ``tokens``, those a branch kept from its parent and those the user forced: emitted, not decoded, so no
    # speed figure counts them.
    kept: int = 0
    forced: int = 0
    forwards: int = 0
    drafted: int = 0  # nodes drafted; accepted: the draft tokens kept (core/record/draft_stats.py)
    accepted: int = 0
    elapsed_s: float = 0.0
    # Beam search writes its text only at the end: its progress is the steps so far and the tokens the open
    # beams decoded (one a beam a step).
    beam_steps: int = 0
    beam_tokens: int = 0
    # The emitted tokens' raw log-probabilities so far, for the perplexity (None once a token lacks one: an
    # older recording).
    sum_logprob: float | None = 0.0
    result: Finished | None = None
    tree_nodes: int = 0  # the latest draft tree's size (0: the drafts are chains)
    drafter_state: str = ""  # the drafter's own state after its latest draft (recycle: its matrix's fill)
    # On CUDA with a background compile: eager or compiled graphs (core/execution/background_compile.py).
    kernels: str = ""

    @property
    def token_counts(self) -> tuple[int, int, int]:
        """(decoded, kept, forced), as ``Finished.token_counts`` says them: the result's once the run ended."""
        if self.result is not None:
            return self.result.token_counts
        return max(0, self.tokens - self.kept - self.forced), self.kept, self.forced

    @property
    def decoded(self) -> int:
        """The tokens this run decoded itself."""
        return self.token_counts[0]

    @property
    def given(self) -> str:
        """The kept and forced tokens, said beside the decoded ones (``+3 kept, 2 forced``); empty where none."""
        return given_tokens(*self.token_counts[1:])

    @property
    def perplexity(self) -> float | None:
        """exp(-mean log-probability) of the tokens so far (the result's once the run ended)."""
        if self.result is not None:
            return self.result.perplexity
        if self.sum_logprob is None or not self.tokens:
            return None
        return math.exp(min(-self.sum_logprob / self.tokens, 700.0))


@dataclass
class Pending:
    """What arrived since the last paint, waiting for the next one."""

    pieces: list[TokenEmitted] = field(default_factory=list)
    steps: list[BeamStepped] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    sampled: TokenSampled | None = None
    started: Started | None = None  # a new run's prompt, for the lookup panel
    caption: str | None = None  # a draft round's caption, written when its tokens are in
    captioned: Event | None = None  # or the newest event with a caption, written only if it is shown
    lookup_changed: bool = False
    adaptive: str | None = None  # the adaptive policy's latest decision and why, when it changed

    def say(self, text: str | None) -> None:
        self.caption, self.captioned = text, None

    def caption_later(self, event: Event) -> None:
        # A batch holds a step's event per token; only the newest one's caption is ever seen.
        self.caption, self.captioned = None, event

    def caption_text(self) -> str | None:
        return caption(self.captioned) if self.captioned is not None else self.caption

    @property
    def news(self) -> bool:
        return bool(self.pieces or self.steps or self.rounds or self.caption or self.captioned)


@dataclass(frozen=True)
class Applied:
    """What a batch asks of the app: paint at once (a change of state), and messages to tell the user."""

    urgent: bool
    messages: tuple[tuple[str, Severity], ...]


class RunView:
    """One run's state, built from its events. A restart makes a new one."""

    def __init__(self, *, paused: bool, now: float) -> None:
        self.trace: list[tuple[float, Event]] = []  # what an export or a recording writes
        self.started: Started | None = None
        self.finished: Finished | None = None
        self.error: str | None = None
        self.failed: Failed | None = None  # how the run failed, with the status it ends the command with
        self.counters = Counters(state="paused" if paused else "starting")
        self.draft_stats = DraftStats()  # the rounds' figures, counted as the core counts them
        self.sampled_at: dict[int, TokenSampled] = {}  # by step: what the token inspector shows
        self.verdict_at: dict[int, PositionVerdict] = {}  # by token index
        self.pending = Pending()
        self.t0 = now
        self._steps = StepTracker()  # the pump's own rule for where a step (a draft round) ends
        self._proposed: DraftProposed | None = None
        self._verdicts: list[PositionVerdict] = []  # accepted verdicts waiting for their tokens
        self._open: tuple[DraftProposed, DraftVerified] | None = None  # a round whose tokens are arriving
        self._last_event_at = now  # for the busy label
        self._clocked = False  # the run's events carry the core's decoding clock (elapsed_s)
        self.narration: str | None = None  # the text of the lesson pause the run stopped at last
        self.narration_final = False

    def apply(self, batch: list[Event], now: float, *, paused: bool) -> Applied:
        """Take in one drained batch; say whether it must be painted at once and what to tell the user."""
        urgent = False
        messages: list[tuple[str, Severity]] = []
        c, pending = self.counters, self.pending
        for event in batch:
            if isinstance(event, Started):
                self.t0 = now  # the run's clock starts here: loading the model is not part of it
            if not isinstance(event, Notice | Failed):
                self.trace.append((now - self.t0, event))
            forwards = getattr(event, "target_forwards", None)
            if isinstance(forwards, int) and not isinstance(event, Finished):
                c.forwards = max(c.forwards, forwards)
            clock = getattr(event, "elapsed_s", None)
            if isinstance(clock, float) and isinstance(event, TokenEmitted | BeamStepped):
                # The core's decoding clock: time paused, stepped or held at a lesson's pause left out.
                c.elapsed_s, self._clocked = clock, True
            in_round = self._steps.pending > 0  # a draft round's tokens are still arriving
            closes_step = self._steps.closes_step(event)
            if isinstance(event, TokenEmitted):
                c.tokens += 1
                if c.sum_logprob is not None:
                    c.sum_logprob = None if event.logprob is None else c.sum_logprob + event.logprob
                pending.pieces.append(event)
                if in_round:
                    self._round_token(event, closes_step)
            elif isinstance(event, TokenSampled):
                pending.sampled = event
                self.sampled_at[event.step] = event
            elif isinstance(event, BeamStepped):
                pending.steps.append(event)
                c.beam_steps = event.step + 1
                c.beam_tokens += len(event.beams)
            elif isinstance(event, Branched):
                c.kept, c.forced = event.position, len(event.forced_token_ids)
            elif isinstance(event, DraftLengthDecided):
                pending.adaptive = f"adaptive: {event.reason}"
            elif isinstance(event, DraftProposed):
                self._proposed = event
                c.drafter_state = event.state or c.drafter_state
            elif isinstance(event, DraftVerified):
                # Positions the grammar cut (and those after them) were never verified, so never count as drafted.
                cut = next((v.position for v in event.verdicts if v.verdict == "cut"), len(event.verdicts))
                tree = self._proposed.tree if self._proposed is not None else None  # the round being verified
                nodes = None
                if tree is not None:  # a tree is counted as the core counts it: its nodes, and its depth
                    cut, nodes = tree.depth, len(tree)
                c.tree_nodes = nodes or 0  # the latest round's shape: a chain after a tree says no tree
                emitted = event.accepted + (event.extra_token_id is not None)
                self.draft_stats.record(cut, event.accepted, event.draft_s, event.verify_s, emitted, event.draft_fed,
                                        nodes)
                if event.step_s is not None:  # the plain step the run timed: what its cost figures divide by
                    self.draft_stats.plain_step_s = event.step_s
                c.drafted, c.accepted = self.draft_stats.drafted, self.draft_stats.accepted
                self._verdicts = list(event.accepted_verdicts)
                if self._proposed is not None:
                    # The round is shown once its tokens are in, so the extra token has its text.
                    self._open = (self._proposed, event)
                    pending.lookup_changed = True  # the lookup view shows every round's draft, copied or not
            elif isinstance(event, Started):
                urgent = True
                self.started = pending.started = event
                self.t0 = now
                c.state = "paused" if paused else "running"
            elif isinstance(event, Finished):
                urgent = True
                c.state, c.result = "finished", event
                if self._open is not None:  # an EOS or the length limit cut the round short
                    pending.rounds.append(Round(*self._open, ""))
                    self._open = None
                self.finished = event
            elif isinstance(event, Notice):
                urgent = True
                messages.extend(self._notice(event))
            elif isinstance(event, Failed):
                urgent = True
                self.error, self.failed, c.state = event.message, event, "error"
                messages.append((event.message, "error"))
            if isinstance(event, CAPTIONED_ALONE):  # a round's caption is written when its tokens are in
                pending.caption_later(event)
        if c.state == "running" and not self._clocked:  # a recording made before events carried the clock
            c.elapsed_s = now - self.t0
        return Applied(urgent, tuple(messages))

    def _round_token(self, event: TokenEmitted, closes_step: bool) -> None:
        if self._verdicts and event.source in ("draft", "lookup"):
            self.verdict_at[event.index] = self._verdicts.pop(0)
        if closes_step and self._open is not None:
            proposed, verified = self._open
            extra = event.text if event.token_id == verified.extra_token_id else ""
            if not extra and event.token_id == verified.extra_token_id and event.token_id in self._eos_ids():
                extra = EOS_MARK
            self.pending.rounds.append(Round(proposed, verified, extra))
            self.pending.say(caption(verified, proposed, extra))
            self._open = None

    def _eos_ids(self) -> set[int]:
        """The model's end-of-text ids, as its ``Started`` says (none in a recording made before it did)."""
        ids = self.started.params.get("eos_token_ids", ()) if self.started is not None else ()
        return set(ids) if isinstance(ids, list | tuple) else set()

    def _notice(self, notice: Notice) -> list[tuple[str, Severity]]:
        c = self.counters
        if notice.kind == "loading":
            c.state = notice.message
            return []
        if notice.kind == "ended":  # a replay whose recording stops mid-run: its figures, frozen
            c.state = "recording ends here"
            if notice.elapsed_s is not None:
                c.elapsed_s = notice.elapsed_s
        elif notice.kind == "paused":
            c.state = "paused"
        elif notice.kind == "kernels":  # shown in the stats bar, not as a toast
            c.kernels = notice.message
            return []
        elif notice.kind == "lesson":  # shown in the narration panel, not as a toast
            if self.finished is None:  # a pause on the end of the text leaves a finished run finished
                c.state = "paused"
            self.narration = notice.message
            self.narration_final = self.finished is not None  # the pause on the end of the text
            return []
        return [(notice.message, "information")]

    def set_paused(self, paused: bool) -> None:
        """The user paused or resumed: a running (or paused) run says so; any other state stays."""
        c = self.counters
        if paused and c.state == "running":
            c.state = "paused"
        elif not paused and c.state == "paused":
            c.state = "running"

    def busy_label(self, now: float, news: bool, running: bool, mode: Mode) -> str:
        """After BUSY_AFTER_S of a running run without an event: what it is doing, and for how long; else ""."""
        if news:
            self._last_event_at = now
        waited = now - self._last_event_at
        if not running or waited <= BUSY_AFTER_S:
            return ""
        return f"busy {waited:.1f} s: {self._working_on(mode)}"

    def _working_on(self, mode: Mode) -> str:
        c = self.counters
        if c.tokens == 0 and c.beam_steps == 0 and self.started is not None:
            # No token yet: the run is reading its prompt, one forward over all of it (the first token comes with it).
            return f"the prefill (one forward over the prompt's {len(self.started.prompt_token_ids)} tokens)"
        return MODE_SPECS[mode].working_on  # what a step of the mode does (core/modes.py)

    def take(self) -> Pending:
        """What to paint now; the view starts collecting the next paint's."""
        pending, self.pending = self.pending, Pending()
        return pending
