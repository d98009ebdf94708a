"""The candidate distribution of the current step, stage by stage, with the drawn token marked.

The drawn token shows at every stage: where it is not among the top candidates (a sampled surprise), a row
below them gives its probability there and its rank (``#12``).

The rows are laid out by hand into one ``Text`` rather than a ``rich.table.Table``:
a table measures every cell on every render, and this panel is redrawn at
every paint while a run streams; as a table it was 70% of the app's paint
time and the largest cost the UI put on the decoder (BENCHMARKS.md).
"""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.text import Text

from ...core.record.events import StageCandidates, TokenSampled
from ..numbers import bar, cut_at, nth, percent, prob
from .live_panel import LivePanel

BAR_WIDTH = 20
LABEL_MAX = 24  # a longer token label is cut, so the bars stay in one column
PERCENT_W = len("100.0%")
STAGE_NAMES = {"raw": "raw logits", "repetition_penalty": "repetition penalty",
               "no_repeat_ngram_size": "no-repeat n-gram", "bad_words": "bad words",
               "min_new_tokens": "min new tokens", "grammar": "grammar", "temperature": "temperature",
               "top_h": "top-h", "top_k": "top-k", "top_p": "top-p", "min_p": "min-p", "typical_p": "typical-p",
               "epsilon_cutoff": "epsilon cutoff", "eta_cutoff": "eta cutoff"}
# Stages that ban tokens outright rather than cut a tail: the best raw candidates they removed are shown, struck.
BANS = frozenset({"no_repeat_ngram_size", "bad_words", "min_new_tokens", "grammar"})
STRUCK = 3  # removed candidates shown per banning stage


def stage_note(stage: StageCandidates) -> str | None:
    """What a stage cut and why, in its method's words; None where it cut nothing worth a line (or the recording
    predates the figures)."""
    if stage.removed is None or stage.possible is None:
        return None
    left = f"{stage.removed:,} removed, {stage.possible:,} left"
    thr, h = stage.threshold, stage.entropy
    if stage.stage == "grammar":
        return stage.detail
    if stage.stage == "min_p" and thr is not None:
        return f"cut p < min_p × p_max = {cut_at(thr)}: {left}"
    if stage.stage == "epsilon_cutoff" and thr is not None:
        return f"cut p < ε = {cut_at(thr)}: {left}"
    if stage.stage == "eta_cutoff" and thr is not None and h is not None:
        return f"cut p < min(η, √η·e^-H) = {cut_at(thr)}, H = {h:.2f} nats: {left}"
    if stage.stage == "typical_p" and thr is not None and h is not None:
        return f"kept |-log p - H| ≤ {thr:.2f} around H = {h:.2f} nats: {left}"
    if stage.stage == "top_h" and thr is not None:
        return f"kept the top while their entropy ≤ top_h × H = {thr:.2f} nats: {left}"
    if stage.stage == "no_repeat_ngram_size":
        return f"{stage.removed:,} removed: each would repeat an n-gram" if stage.removed else None
    if stage.stage == "bad_words":
        # Banned as text, however spelt (core/choosing/bad_words.py): say so, since HF's stage of that name bans token
        # runs.
        return (f"{stage.removed:,} removed: each would write a bad word into the text" if stage.removed else
                "none removed: no token here would write a bad word into the text")
    if stage.stage == "min_new_tokens":
        return "the end of text removed: too few new tokens yet" if stage.removed else None
    if stage.stage in ("top_k", "top_p"):
        return left
    return None


class CandidatesPanel(LivePanel):
    """Top candidates after each sampling stage (raw, penalty, temperature, top-k, top-p) as bars."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"candidates--bar", "candidates--chosen", "candidates--stage"}

    def __init__(self, top: int = 5, **kwargs: object) -> None:
        super().__init__("waiting for the first step", **kwargs)
        self.top = top  # candidates a stage shows at least, where the panel is tall enough
        # Candidates a stage shows: more than `top` where the panel has room for them (a tall terminal, one
        # stage: greedy showed 5 of the 10 a step carries above twenty empty lines). Learned from the panel's
        # height by fit, so that a paint builds the text once.
        self.room_top = top
        self.last: TokenSampled | None = None
        self.glyphs: dict[str, str] = {}
        self._row_width = 0  # the widest candidate row of the last text built, in cells
        self._room: int | None = None  # the panel's width at its last paint: the next text's bars fit it

    def show(self, step: TokenSampled) -> None:
        self.last = step
        self.redraw()

    def reset(self) -> None:
        """A new run: the last run's step goes (a restart showed it until the new run's first step)."""
        self.last = None
        self.update("waiting for the first step")

    def redraw(self) -> None:
        if self.last is not None:
            text, self._row_width = self._text(self.last, self.room_top, self._room)
            self.update(text)

    def _text(self, step: TokenSampled, top: int, room: int | None = None, compact: bool = False,
              ) -> tuple[Text, int]:
        """The step's stages, ``top`` candidates each, with bars short enough for rows ``room`` cells wide (at
        least 4 cells); and the width its rows take. ``compact``: the stages between the raw
        one and the last show their line (what they cut) without candidates."""
        bar_style = self.style_of("candidates--bar")
        chosen_style = self.style_of("candidates--chosen")
        stage_style = self.style_of("candidates--stage")
        how = "argmax" if step.greedy else "drawn"
        text = Text(f"step {nth(step.step)}: {how} {step.text!r}  p={prob(step.prob)}", style=chosen_style)
        mark = self.glyphs.get("chosen", ">")
        # (probability, label, is the drawn token, its rank where shown below the top candidates)
        rows: list[tuple[StageCandidates, list[tuple[float, str, bool, int | None]]]] = []
        for stage in step.stages:
            shown: list[tuple[float, str, bool, int | None]] = []
            for c in stage.kept[:top]:
                drawn = c.token_id == step.token_id
                shown.append((c.prob, f"{mark if drawn else ' '} {c.text!r}", drawn, None))
            if stage.chosen_prob is not None and not any(chosen for _, _, chosen, _ in shown):
                # Drawn from below the shown candidates: the surprise sampling is about, so shown, with its rank.
                shown.append((stage.chosen_prob, f"{mark} {step.text!r}", True, stage.chosen_rank))
            rows.append((stage, shown))
        width = min(LABEL_MAX, max((cell_len(label) for _, shown in rows for _, label, _, _ in shown), default=1))
        ranked = max((len(f" #{rank}") for _, shown in rows for _, _, _, rank in shown if rank is not None), default=0)
        full = width + 1 + BAR_WIDTH + 1 + PERCENT_W + ranked
        bar_width = BAR_WIDTH if room is None else max(4, BAR_WIDTH - max(0, full - room))
        for i, (stage, shown) in enumerate(rows):
            text.append("\n")
            text.append(STAGE_NAMES.get(stage.stage, stage.stage), style=stage_style)
            note = stage_note(stage)
            if note:
                text.append(f": {note}", style="dim")
            if compact and 0 < i < len(rows) - 1:
                continue
            for p, label, chosen, rank in shown:
                text.append("\n")
                text.append(set_cell_size(label, width), style=chosen_style if chosen else "")
                text.append(" ")
                text.append(bar(p, bar_width).ljust(bar_width), style=bar_style)
                text.append(f" {percent(p)}")
                if rank is not None:
                    text.append(f" #{rank}", style=chosen_style)
            if stage.stage in BANS and stage.removed_candidates:
                # What the ban took away, struck through, at its probability before it: another scale than the rows
                # above (after the ban), so it gets its own label ('white' 43 % above 'G' 17 % read as a ranking).
                text.append("\n")
                text.append("  removed, p before this stage:", style="dim italic")
                for c in stage.removed_candidates[:STRUCK]:
                    text.append("\n")
                    text.append(set_cell_size(f"✗ {c.text!r}", width), style="strike dim")
                    text.append(" ")
                    text.append(bar(c.prob, bar_width).ljust(bar_width), style="dim")
                    text.append(f" {percent(c.prob)}", style="strike dim")
        return text, full - (BAR_WIDTH - bar_width)

    def _keep(self, step: TokenSampled, top: int, width: int) -> list[list[Segment]]:
        """The step with ``top`` candidates a stage, bars fitting ``width``, kept as the panel's content (the next
        render of a finished run, which redraws no more, shows it too); its lines."""
        text, self._row_width = self._text(step, top, width)
        self._content = text
        return self.lines_of(text, width)

    def _grown(self, step: TokenSampled, lines: list[list[Segment]], width: int, height: int,
               ) -> list[list[Segment]]:
        """``lines`` with more candidates a stage where the panel has room below them, up to all a step carries;
        one line kept spare, so that a step whose drawn token needs a row of its own does not shrink it back."""
        stages = sum(1 for stage in step.stages if len(stage.kept) > self.room_top)  # those a larger top grows
        most = max((len(stage.kept) for stage in step.stages), default=0)
        top = min(most, self.room_top + (height - len(lines) - 1) // max(1, stages))
        if top <= self.room_top:
            return lines
        text, row_width = self._text(step, top, width)
        grown = self.lines_of(text, width)
        if len(grown) > height:
            return lines
        self.room_top, self._content, self._row_width = top, text, row_width
        return grown

    def fit(self, width: int, height: int) -> list[list[Segment]]:
        """Every stage, with shorter bars where the panel is narrow, fewer candidates where it is short and more
        where it is tall.

        Cut at the bottom, a short panel (an 80x24 terminal) hid the last stages, top-k and top-p: the
        distribution the token is drawn from. Each stage keeps at least its first candidate; where even that is
        too tall (a lesson's narration below), the stages between the raw one and the last keep only their line,
        which says what each cut (min-p's threshold, say), and the raw and last stages their candidates. What
        fits is learned (the bars' width, the candidates a stage), so that a paint builds the text once.
        """
        step = self.last
        if step is None:
            return super().fit(width, height)
        if width != self._room:  # the first render at this width (a resize): bars built to fit it
            self._room = width
            lines = self._keep(step, self.room_top, width)
        else:
            lines = super().fit(width, height)
        if len(lines) < height and self._row_width <= width:
            return self._grown(step, lines, width, height)
        if len(lines) > height or self._row_width > width:  # fewer rows
            for top in range(self.room_top, 0, -1):
                lines = self._keep(step, top, width)
                if len(lines) <= height:
                    self.room_top = max(self.top, top)  # the next paint builds what fits (not below the default,
                    break                               # where a short panel rebuilds as it always did)
            else:  # one candidate a stage is still too tall: the stages between keep their line, not their rows
                for top in range(self.top, 0, -1):
                    lines = self.lines_of(self._text(step, top, width, compact=True)[0], width)
                    if len(lines) <= height:
                        break
        return lines
