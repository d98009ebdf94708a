"""A deterministic fake decoder for the app's tests: the real event types, scripted per mode, no model.

What it scripts for a mode comes from the mode's entry in core/modes.py (its view, whether and how it drafts), so a
mode added there runs here too; a mode it has no script for fails naming the mode and what its entry says.

It reads the live parameters at every step like a real strategy does, so
tests can see a mid-run change land at the next step, and it can be slowed
down (``delay``) so a test can act while a run is in flight.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator

from decode_tui.core.errors import UsageError
from decode_tui.core.live import LiveParams
from decode_tui.core.modes import MODE_SPECS
from decode_tui.core.record.events import (
    Beam,
    BeamCandidate,
    BeamStepped,
    Branched,
    Candidate,
    DraftProposed,
    DraftVerified,
    EarlyStopCheck,
    Event,
    Finished,
    Hypothesis,
    PositionVerdict,
    StageCandidates,
    Started,
    TokenEmitted,
    TokenSampled,
    TokenSource,
)
from decode_tui.tui.pump import EventSource, Notice
from decode_tui.tui.settings import Settings

WORDS = ["The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."]
PROMPT_PIECES = ("Copy", ":", " the", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog")


class FakeDecoder:
    """``FakeDecoder(words, delay).source`` is a ``make_source`` for :class:`DecodeApp`."""

    def __init__(self, words: list[str] | None = None, delay: float = 0.0, fail_with: Exception | None = None,
                 loading: threading.Event | None = None, probs: list[float] | None = None, held: bool = False,
                 ) -> None:
        """``probs``: the raw probability of each sampled word in turn (0.6 each by default). ``held``: each step,
        after its ``delay``, lasts until the test releases it (:meth:`release`: a test that must see a step's busy label
        sees it however loaded the machine, instead of racing the step's end)."""
        self.words = words or WORDS
        self.probs = probs
        self.delay = delay
        self.fail_with = fail_with
        self.loading = loading  # if given, every run "loads a model" (announces it, then waits) until it is set
        self.runs: list[Settings] = []  # the settings of every run started, in order
        self.held = threading.Event() if held else None  # set: the step in flight may end
        self.free = False  # released for good: no step is held any more

    def source(self, settings: Settings, live: LiveParams) -> EventSource:
        self.runs.append(settings)
        return lambda: self._events(settings, live)

    def _events(self, settings: Settings, live: LiveParams) -> Iterator[Event]:
        mode = settings.mode
        # A text the tokenizer cannot represent fails as the real source fails: before any event.
        if settings.branch is not None and settings.branch.forced_text == "fail":
            raise UsageError("the fake tokenizer cannot represent 'fail' exactly. Force text made of characters it "
                             "knows.")
        if self.loading is not None:
            yield Notice("loading", "loading fake…")
            self.loading.wait(timeout=10)
        yield Started(mode=mode, model="fake", prompt_token_ids=tuple(range(len(PROMPT_PIECES))),
                      prompt_text=settings.prompt, params={"device": "cpu", "dtype": "float32", "max_new_tokens": 64,
                                                           "eos_token_ids": [999]},
                      prompt_pieces=PROMPT_PIECES)
        emitted = _Emitter()
        branch = settings.branch
        if branch is not None:  # a branch: the kept tokens, the forced one, then the words after it
            yield Branched(branch=branch.branch, parent=branch.parent, position=len(branch.kept),
                           forced_token_ids=branch.forced_ids, forced_text=branch.forced_text)
            for token, source in zip(branch.kept, branch.kept_sources, strict=True):
                yield emitted.emit(token, self.words[token] if token < len(self.words) else "?", source)
            yield emitted.emit(branch.forced_ids[0] if branch.forced_ids else 99, branch.forced_text, "forced",
                               logprob=math.log(0.3), rank=2)
            yield from self._sampling(mode == "greedy", live, emitted, start=len(branch.kept) + 1)
        else:
            yield from self._scripted(settings, live, emitted)
        if self.fail_with is not None:
            raise self.fail_with
        spec = MODE_SPECS[mode]
        extras: dict[str, object] = {}
        if spec.drafter is not None:
            extras = dict(drafted=7, accepted=5, draft_forwards=0 if spec.drafter.copies else 7, acceptance_rate=5 / 7,
                          acceptance_by_position=(1.0, 1.0, 0.5), draft_time_s=0.01, verify_time_s=0.05)
        if spec.view == "beam":
            extras = dict(hypotheses=(Hypothesis(tuple(range(3)), "".join(self.words[:3]), -1.2, -0.4),))
        # one forward a token where each token is a step; the scripted rounds or beam steps' three otherwise
        forwards = len(emitted.ids) if spec.view == "candidates" else 3
        yield Finished(mode=mode, prompt_token_ids=tuple(range(len(PROMPT_PIECES))), token_ids=tuple(emitted.ids),
                       text=emitted.text, finish_reason="length", new_tokens=len(emitted.ids),
                       target_forwards=forwards, elapsed_s=0.5, tokens_per_s=len(emitted.ids) / 0.5,
                       sum_logprob=sum(emitted.logprobs), mean_logprob=sum(emitted.logprobs) / len(emitted.ids),
                       perplexity=math.exp(-sum(emitted.logprobs) / len(emitted.ids)),
                       **extras)  # type: ignore[arg-type]

    def _scripted(self, settings: Settings, live: LiveParams, emitted: _Emitter) -> Iterator[Event]:
        """The events of ``mode``'s kind: steps of candidates, beam steps, or draft rounds (trees for a drafter that
        drafts trees by default, chains otherwise), as its entry in core/modes.py says."""
        mode = settings.mode
        spec = MODE_SPECS.get(mode)
        if spec is None:
            raise KeyError(f"tests/fake_decoder.py: mode {mode!r} has no entry in core/modes.py's MODE_SPECS")
        drafter = spec.drafter
        if drafter is not None and drafter.trees == "measured":
            yield from self._tree(emitted, drafter.kind)
        elif drafter is not None:
            yield from self._drafting(drafter.copies, drafter.kind, emitted)
        elif spec.view == "beam":
            yield from self._beam(settings.config.beam.num_beams, emitted)
        elif spec.view == "candidates":
            yield from self._sampling(not spec.samples, live, emitted)
        else:
            raise KeyError(f"tests/fake_decoder.py has no script for mode {mode!r}: its entry in core/modes.py has "
                           f"view {spec.view!r} and no drafter")

    def _wait(self) -> None:
        if self.delay:
            time.sleep(self.delay)
        if self.held is not None:
            self.held.wait(30)
            if not self.free:
                self.held.clear()

    def hold_next(self) -> None:
        """Hold steps again, from the next wait on (after :meth:`release` for good)."""
        assert self.held is not None, "FakeDecoder(held=True) holds its steps"
        self.free = False
        self.held.clear()

    def release(self, for_good: bool = False) -> None:
        """Let the held step in flight end (``for_good``: and every later one)."""
        assert self.held is not None, "FakeDecoder(held=True) holds its steps"
        self.free = self.free or for_good
        self.held.set()

    def _sampling(self, greedy: bool, live: LiveParams, emitted: _Emitter, start: int = 0) -> Iterator[Event]:
        for i, word in enumerate(self.words[start:], start=start):
            self._wait()
            params = live.snapshot().sampling
            stages = [StageCandidates("raw", (Candidate(i, word, 0.6), Candidate(99, " cat", 0.3)))]
            if not greedy and params.temperature != 1.0:
                stages.append(StageCandidates("temperature", (Candidate(i, word, 0.7), Candidate(99, " cat", 0.2))))
            if not greedy and params.top_k != 0:
                stages.append(StageCandidates("top_k", (Candidate(i, word, 0.75), Candidate(99, " cat", 0.25))))
            emitted.forwards = i + 1  # the prefill gave step 0's distribution
            yield TokenSampled(step=i, token_id=i, text=word, prob=stages[-1].candidates[0].prob, greedy=greedy,
                               stages=tuple(stages), target_forwards=emitted.forwards)
            yield emitted.emit(i, word, logprob=math.log(self.probs[i % len(self.probs)] if self.probs else 0.6))

    def _beam(self, n: int, emitted: _Emitter) -> Iterator[Event]:
        finished: tuple[Hypothesis, ...] = ()
        for step in range(3):
            self._wait()
            ids = tuple(range(step + 1))
            beams = tuple(Beam(beam=b, parent=0 if step == 0 else b, token_ids=(*ids[:-1], 10 * b + step),
                               text_tail="".join(self.words[: step + 1]) + f"#{b}", sum_logprobs=-0.5 * (step + 1) - b,
                               score=(-0.5 * (step + 1) - b) / (step + 1)) for b in range(n))
            candidates = tuple(BeamCandidate(parent=b.parent, token_id=b.token_ids[-1], text=self.words[step],
                                             sum_logprobs=b.sum_logprobs, verdict="kept") for b in beams)
            candidates += (BeamCandidate(parent=0, token_id=77, text=" cat", sum_logprobs=-9.0, verdict="pruned"),)
            if step == 1:
                candidates += (BeamCandidate(parent=0, token_id=2, text="<eos>", sum_logprobs=-1.5,
                                             verdict="finished"),)
                finished = (Hypothesis((0, 2), self.words[0] + "<eos>", -1.5, -0.75),
                            Hypothesis((0, 1, 2), "".join(self.words[:3]), -2.4, -0.8))
            check = EarlyStopCheck(False, -0.6 if finished else None, -0.8 if finished else None, step == 2)
            emitted.forwards = step + 1
            yield BeamStepped(step=step, beams=beams, candidates=candidates, finished=finished, early_stop=check,
                              target_forwards=emitted.forwards)
        for i, word in enumerate(self.words[:3]):
            yield emitted.emit(i, word)

    def _tree(self, emitted: _Emitter, kind: str) -> Iterator[Event]:
        """Suffix drafting's two rounds of trees: one whose deepest branch the target follows to its leaf (a bonus
        token after it), one where it takes the second child at the root and then leaves the tree."""
        w = self.words
        emitted.forwards = 1
        yield emitted.emit(0, w[0])
        self._wait()
        # " quick" -> " brown" -> " fox" is the path; " cat" at the root and " dog" after " quick" are left.
        yield DraftProposed(round=0, drafter=kind, token_ids=(1, 50, 2, 51, 3),
                            texts=(w[1], " cat", w[2], " dog", w[3]), parents=(-1, -1, 0, 0, 2),
                            sources=("earlier runs",) * 5, match_start=0, match_end=1, max_tokens=10)
        verdicts = (PositionVerdict(0, 1, 0.9, 1.0, None, "accepted"),
                    PositionVerdict(1, 50, 0.05, 1.0, None, "rejected"),
                    PositionVerdict(2, 2, 0.8, 1.0, None, "accepted"),
                    PositionVerdict(3, 51, 0.1, 1.0, None, "rejected"),
                    PositionVerdict(4, 3, 0.7, 1.0, None, "accepted"))
        emitted.forwards = 2
        yield DraftVerified(round=0, verdicts=verdicts, accepted=3, extra_token_id=4, extra_kind="bonus",
                            target_forwards=emitted.forwards, draft_s=0.001, verify_s=0.03, path=(0, 2, 4))
        for i in (1, 2, 3):
            yield emitted.emit(i, w[i], "lookup")
        yield emitted.emit(4, w[4], "bonus")
        self._wait()
        yield DraftProposed(round=1, drafter=kind, token_ids=(52, 5, 53, 54),
                            texts=(" under", w[5], " a", " an"), parents=(-1, -1, 1, 1),
                            sources=("this run", "earlier runs", "earlier runs", "earlier runs"), max_tokens=10)
        verdicts_1 = (PositionVerdict(0, 52, 0.1, 1.0, None, "rejected"),
                      PositionVerdict(1, 5, 0.8, 1.0, None, "accepted"),
                      PositionVerdict(2, 53, 0.2, 1.0, None, "rejected"),
                      PositionVerdict(3, 54, 0.1, 1.0, None, "rejected"))
        emitted.forwards = 3
        yield DraftVerified(round=1, verdicts=verdicts_1, accepted=1, extra_token_id=6, extra_kind="target",
                            target_forwards=emitted.forwards, draft_s=0.001, verify_s=0.03, path=(1,))
        yield emitted.emit(5, w[5], "lookup")
        yield emitted.emit(6, w[6], "target")

    def _drafting(self, lookup: bool, drafter: str, emitted: _Emitter) -> Iterator[Event]:
        kind: TokenSource = "lookup" if lookup else "draft"
        w = self.words
        emitted.forwards = 1
        yield emitted.emit(0, w[0])  # from the prefill
        # round 0: all 3 accepted, then a bonus token
        self._wait()
        yield DraftProposed(round=0, drafter=drafter, token_ids=(1, 2, 3), texts=tuple(w[1:4]),
                            q_probs=None if lookup else (0.9, 0.8, 0.7),
                            match_start=2 if lookup else None, match_end=3 if lookup else None,
                            copy_start=3 if lookup else None, copy_end=6 if lookup else None, max_tokens=3)
        verdicts = tuple(PositionVerdict(i, i + 1, 0.9, 1.0 if lookup else 0.8, None if lookup else 0.1, "accepted")
                         for i in range(3))
        emitted.forwards = 2
        yield DraftVerified(round=0, verdicts=verdicts, accepted=3, extra_token_id=4, extra_kind="bonus",
                            target_forwards=emitted.forwards, draft_s=0.002, verify_s=0.03)
        for i in (1, 2, 3):
            yield emitted.emit(i, w[i], kind)
        yield emitted.emit(4, w[4], "bonus")
        # round 1: first accepted, second rejected, a resampled (or the target's own) token instead
        self._wait()
        yield DraftProposed(round=1, drafter=drafter, token_ids=(5, 50, 51), texts=(w[5], " cat", " sat"),
                            q_probs=None if lookup else (0.9, 0.6, 0.5),
                            match_start=7 if lookup else None, match_end=8 if lookup else None,
                            copy_start=8 if lookup else None, copy_end=11 if lookup else None, max_tokens=5,
                            stopped="the copy reached the end of the text" if lookup else "draft q 0.31 < 0.4")
        u = None if lookup else 0.55
        verdicts = (PositionVerdict(0, 5, 0.8, 1.0 if lookup else 0.9, None if lookup else 0.2, "accepted"),
                    PositionVerdict(1, 50, 0.12, 1.0 if lookup else 0.6, u, "rejected"),
                    PositionVerdict(2, 51, 0.3, 1.0 if lookup else 0.5, None, "untested"))
        emitted.forwards = 3
        yield DraftVerified(round=1, verdicts=verdicts, accepted=1, extra_token_id=6,
                            extra_kind="target" if lookup else "resampled", target_forwards=emitted.forwards,
                            draft_s=0.002, verify_s=0.03)
        yield emitted.emit(5, w[5], kind)
        yield emitted.emit(6, w[6], "target" if lookup else "resampled")


class _Emitter:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.text = ""
        self.forwards = 0  # target forwards so far, as a real strategy counts them

    def emit(self, token_id: int, text: str, source: TokenSource = "target", logprob: float = math.log(0.6),
             rank: int = 1) -> TokenEmitted:
        start = len(self.text)
        self.text += text
        self.ids.append(token_id)
        self.logprobs.append(logprob)
        return TokenEmitted(index=len(self.ids) - 1, token_id=token_id, text=text, start=start, end=len(self.text),
                            source=source, target_forwards=self.forwards, logprob=logprob, entropy=1.0, rank=rank)
