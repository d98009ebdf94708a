"""One-line captions that say what a step just did, and which events are worth pausing on.

A caption turns the last step's event into a sentence a student can read in
step mode ("drafted 5; target accepted 3; 4th rejected: p=0.12 < u·q=0.31;
resampled 'nikkei' from max(0, p-q)"). :class:`AutoPause` decides when the
decoder should stop by itself on a notable event: the first rejected draft, a
prompt-lookup miss, a beam finishing, the end of the text. Each kind pauses
once per run, so a long run is not stopped every few tokens.

Pure functions of the core's events: no widgets, no threads.
"""

from __future__ import annotations

from ..core.modes import copied
from ..core.record.events import BeamStepped, DraftProposed, DraftVerified, Event, Finished, TokenSampled
from .numbers import count, decoded_tokens, nth, prob


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# The events caption() describes on their own; a DraftVerified also needs its round's proposal and extra token.
CAPTIONED_ALONE = (TokenSampled, BeamStepped, Finished)


# The text the panels and captions give an end-of-text token, which the text itself never shows (it decodes
# to nothing): without it a round that ended the run read "→" followed by nothing.
EOS_MARK = "⟨EOS⟩"


def quoted(piece: str) -> str:
    """A token's text as the captions quote it: ``' the'``; the end-of-text mark as it is."""
    return piece if piece == EOS_MARK else repr(piece)


def _tree_caption(event: DraftVerified, proposed: DraftProposed, extra_text: str | None) -> str:
    """A tree round in one line: its size, the path the target followed, the candidates it went past (the nodes it
    tested and refused), its extra token."""
    left = sum(v.verdict == "rejected" for v in event.verdicts)
    kept = " ".join(quoted(proposed.texts[i]) for i in event.path or ())
    tree = proposed.tree
    shape = f" ({tree.depth} deep)" if tree is not None else ""
    parts = [f"round {event.round}: drafted a tree of {len(event.verdicts)} nodes{shape} in one forward; the "
             f"target kept a path of {event.accepted}" + (f" ({kept})" if kept else "")]
    if left:
        parts.append(f"went past {left} other {'candidate' if left == 1 else 'candidates'}")
    extra = extra_text if extra_text is not None else f"#{event.extra_token_id}"
    if event.extra_kind == "bonus":
        parts.append(f"bonus token {quoted(extra)} after the branch's end")
    elif event.extra_kind in ("target", "resampled"):
        parts.append(f"then {quoted(extra)}, which no branch held")
    return "; ".join(parts)


def caption(event: Event, proposed: DraftProposed | None = None, extra_text: str | None = None) -> str | None:
    """What ``event`` did, in one line; None for events that close no step.

    For a ``DraftVerified``, ``extra_text`` is the text of the token the target added (known once it is
    emitted); without it the token id is shown.
    """
    if isinstance(event, TokenSampled):
        final = event.stages[-1]
        alternatives = [c for c in final.kept if c.token_id != event.token_id][:1]  # a runner-up was kept
        runner_up = f"; runner-up {alternatives[0].text!r} {alternatives[0].prob:.0%}" if alternatives else ""
        if event.greedy:
            return f"step {nth(event.step)}: took the argmax {event.text!r} (p={prob(event.prob)}){runner_up}"
        stages = " → ".join(s.stage.replace("_", " ") for s in event.stages)
        return f"step {nth(event.step)}: {stages}; drew {event.text!r} with p={prob(event.prob)}{runner_up}"
    if isinstance(event, DraftVerified) and event.path is not None and proposed is not None:
        return _tree_caption(event, proposed, extra_text)
    if isinstance(event, DraftVerified):
        k = len(event.verdicts)
        drafted = "copied" if proposed is not None and copied(proposed.drafter) else "drafted"
        parts = [f"round {event.round}: {drafted} {k}; target kept {event.accepted}"]
        rejected = next((v for v in event.verdicts if v.verdict == "rejected"), None)
        if rejected is not None:
            which = ordinal(nth(rejected.position))
            if rejected.u is None:
                parts.append(f"{which} rejected: the target's argmax differs (p={prob(rejected.p)})")
            else:
                parts.append(f"{which} rejected: p={prob(rejected.p)} < u·q={prob(rejected.u * rejected.q)}")
        extra = extra_text if extra_text is not None else f"#{event.extra_token_id}"
        if event.extra_kind == "resampled":
            parts.append(f"resampled {quoted(extra)} from max(0, p-q)")
        elif event.extra_kind == "bonus":
            parts.append(f"all accepted: bonus token {quoted(extra)} from p")
        elif event.extra_kind == "target":
            parts.append(f"target's own token {quoted(extra)}")
        return "; ".join(parts)
    if isinstance(event, BeamStepped):
        best = event.beams[0] if event.beams else None
        pruned = sum(c.verdict == "pruned" for c in event.candidates)
        ended = sum(c.verdict == "finished" for c in event.candidates)
        text = (f"beam step {nth(event.step)}: {len(event.candidates)} candidates, {len(event.beams)} kept, "
                f"{pruned} pruned")
        if ended:
            text += f", {ended} finished"
        if best is not None:
            text += f"; best open beam score {best.score:.3f}"
        else:
            text += "; no beam left open (each candidate finished)"
        check = event.early_stop
        if check.done:
            text += "; search done"
        elif check.best_attainable_score is not None and check.worst_finished_score is not None:
            text += (f"; early stop? best possible {check.best_attainable_score:.3f} vs worst finished "
                     f"{check.worst_finished_score:.3f}")
        return text
    if isinstance(event, Finished):
        why = {"eos": "the model ended the text (EOS)", "length": "max new tokens reached",
               "cancelled": "stopped", "error": f"an error: {event.error}"}[event.finish_reason]
        return (f"finished: {why}; {decoded_tokens(*event.token_counts)} in "
                f"{count(event.target_forwards, 'target forward')}")
    return None


class AutoPause:
    """Which notable events pause the run (each kind once per run)."""

    KINDS = ("first rejection", "lookup miss", "beam finished", "end of text")

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.drafter: str | None = None

    def check(self, event: Event) -> str | None:
        """The kind of notable event ``event`` is, the first time that kind is seen in the run; else None."""
        kind = self._kind(event)
        if kind is None or kind in self.seen:
            return None
        self.seen.add(kind)
        return kind

    def _kind(self, event: Event) -> str | None:
        if isinstance(event, DraftProposed):
            self.drafter = event.drafter
        elif isinstance(event, DraftVerified):
            if self.drafter == "lookup" and event.accepted == 0:
                return "lookup miss"
            if event.accepted < len(event.verdicts):
                return "first rejection"
        elif isinstance(event, BeamStepped) and any(c.verdict == "finished" for c in event.candidates):
            return "beam finished"
        elif isinstance(event, Finished) and event.finish_reason == "eos":
            return "end of text"
        return None
