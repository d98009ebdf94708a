"""The run view without an app: real runs' events in, the counters and rounds a viewer shows out."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from decode_tui.core.drafting.model_drafter import ModelDrafter
from decode_tui.core.drafting.prompt_lookup import PromptLookup
from decode_tui.core.params import BeamParams, SamplingParams
from decode_tui.core.record.detokenize import Detokenizer
from decode_tui.core.record.events import (
    BeamStepped,
    DraftProposed,
    DraftVerified,
    EarlyStopCheck,
    Event,
    Finished,
    PositionVerdict,
    Started,
    TokenEmitted,
    TokenSampled,
)
from decode_tui.core.record.transcript import Transcript
from decode_tui.core.strategies.autoregressive import autoregressive
from decode_tui.core.strategies.beam import beam_search
from decode_tui.core.strategies.speculative import speculative
from decode_tui.tui.pump import Failed, Notice
from decode_tui.tui.run_view import RunView

from .conftest import tiny_model
from .test_speculative import V, repetitive_prompt

STARTED = Started(mode="pld", model="tiny", prompt_token_ids=(1, 2), prompt_text="x", params={})


def view_of(events: list[Event], batch: int) -> RunView:
    """A view fed ``events`` in batches of ``batch``, as a drain tick would hand them over."""
    view = RunView(paused=False, now=0.0)
    for i in range(0, len(events), batch):
        view.apply(events[i : i + batch], now=float(i), paused=False)
    return view


def speculative_events(tokenizer: Any, drafter: Any, seed: int, sample: bool) -> list[Event]:
    model = tiny_model("llama", vocab_size=V, seed=seed)
    transcript = Transcript("pld", repetitive_prompt(seed, 12), Detokenizer(tokenizer), frozenset({V - 1}), 40)
    events = speculative(model, transcript, drafter(model), SamplingParams(temperature=0.8) if sample else
                         SamplingParams(), greedy=not sample, num_draft_tokens=4,
                         generator=torch.Generator().manual_seed(seed))
    return [STARTED, *events]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("batch", [1, 3, 1000])
@pytest.mark.parametrize("kind", ["lookup", "model"])
def test_counters_and_rounds_equal_the_cores_figures(byte_bpe: Any, seed: int, batch: int, kind: str) -> None:
    drafter = (lambda m: PromptLookup(2, 4)) if kind == "lookup" else (lambda m: ModelDrafter(m, V))
    events = speculative_events(byte_bpe, drafter, seed, sample=seed % 2 == 1)
    finished = events[-1]
    assert isinstance(finished, Finished)
    view = view_of(events, batch)
    rounds = view.take().rounds
    verified = [e for e in events if isinstance(e, DraftVerified)]
    assert [r.verified for r in rounds] == verified, "every round shown once, in order, whatever the batching"
    # The counters a viewer shows while the run goes end where the core's Finished says.
    assert view.counters.forwards == finished.target_forwards
    assert view.counters.tokens == finished.new_tokens
    assert (view.counters.drafted, view.counters.accepted) == (finished.drafted, finished.accepted)
    assert view.draft_stats.by_position() == finished.acceptance_by_position
    assert view.counters.state == "finished" and view.finished == finished
    for r in rounds:  # the extra token's text, once its token was in
        after = events[events.index(r.verified) + 1 :]
        emitted = [e for e in after if isinstance(e, TokenEmitted)][: r.verified.accepted + 1]
        extra = emitted[-1] if len(emitted) == r.verified.accepted + 1 else None  # none: the run ended first
        assert r.extra_text == (extra.text if extra is not None else "")
    accepted = [e for e in events if isinstance(e, TokenEmitted) and e.source in ("draft", "lookup")]
    assert sorted(view.verdict_at) == [e.index for e in accepted], "each accepted token keeps its verdict"


def test_forwards_follow_the_events_step_by_step(byte_bpe: Any) -> None:
    model = tiny_model("qwen2", vocab_size=V, seed=3)
    transcript = Transcript("greedy", [5, 6, 7], Detokenizer(byte_bpe), frozenset({V - 1}), 12)
    events: list[Event] = [STARTED, *autoregressive(model, transcript, SamplingParams(), greedy=True)]
    view = RunView(paused=False, now=0.0)
    for event in events:
        view.apply([event], now=1.0, paused=False)
        if isinstance(event, TokenSampled):  # step i's distribution came from forward i + 1 (the prefill: step 0)
            assert view.counters.forwards == event.step + 1
    assert view.counters.forwards == transcript.target_forwards == 12


@pytest.mark.parametrize("batch", [1, 1000])
def test_a_branchs_kept_and_forced_tokens_are_not_counted_as_decoded(byte_bpe: Any, batch: int) -> None:
    """A greedy branch showed 1.17 tokens a forward: its kept and forced tokens came in one prefill. The bar counts
    the decoded tokens, while the run goes and at its end alike, and says the others beside."""
    from decode_tui.core.record.events import Branched
    from decode_tui.core.record.path import Path as DecodePath
    from decode_tui.tui.widgets.stats_bar import StatsBar

    model = tiny_model("llama", vocab_size=V, seed=2)
    transcript = Transcript("greedy", [5, 6, 7], Detokenizer(byte_bpe), frozenset({V - 1}), 12)
    path = DecodePath(kept=(8, 9, 10), forced=(11, 12), forced_text="xy", branch=1, parent=0)
    branched = Branched(branch=1, parent=0, position=3, forced_token_ids=(11, 12), forced_text="xy")
    events: list[Event] = [STARTED, branched, *autoregressive(model, transcript, SamplingParams(), greedy=True,
                                                              path=path)]
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert (finished.kept_tokens, finished.forced_tokens, finished.decoded_tokens) == (3, 2, 7)
    assert finished.tokens_per_forward == 1.0  # greedy decodes one token a forward, the prefill included
    middle = RunView(paused=False, now=0.0)
    middle.apply(events[:-1], now=1.0, paused=False)
    assert middle.counters.decoded == 7 and middle.counters.given == "+3 kept, 2 forced"
    view = view_of(events, batch)
    assert view.counters.decoded == 7 and view.counters.given == "+3 kept, 2 forced"
    bar = StatsBar()
    bar.show(view.counters)
    line = " · ".join(full for full, _, _ in bar._parts)
    assert "7 tokens decoded (+3 kept, 2 forced)" in line and "1.00 tok/forward" in line, line


def test_beam_counters_come_from_the_steps(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=1)
    transcript = Transcript("beam", [5, 6, 7], Detokenizer(byte_bpe), frozenset({V - 1}), 8)
    events: list[Event] = [STARTED, *beam_search(model, transcript, BeamParams(num_beams=3), SamplingParams())]
    view = view_of(events, 2)
    pending = view.take()
    steps = [e for e in events if isinstance(e, BeamStepped)]
    assert pending.steps == steps
    assert view.counters.forwards == len(steps) == transcript.target_forwards


def test_a_round_cut_short_by_the_end_is_still_shown() -> None:
    events = speculative_events_cut()
    view = view_of(events, 1000)
    rounds = view.take().rounds
    assert len(rounds) == 1 and rounds[0].extra_text == "", "the round closes with the run, without its extra"


def test_a_round_whose_extra_token_ends_the_text_names_it() -> None:
    """The end-of-text token decodes to nothing: the round read "→" and its caption "target's own token ''"."""
    started = Started(mode="pld", model="tiny", prompt_token_ids=(1, 2), prompt_text="x",
                      params={"eos_token_ids": [2, 7]})
    verdicts = (PositionVerdict(0, 10, 0.9, 1.0, None, "accepted"), PositionVerdict(1, 11, 0.3, 1.0, None, "rejected"))
    events: list[Event] = [
        started,
        TokenEmitted(index=0, token_id=9, text="a", start=0, end=1, target_forwards=1),
        DraftProposed(round=0, drafter="lookup", token_ids=(10, 11), texts=("b", "\n")),
        DraftVerified(round=0, verdicts=verdicts, accepted=1, extra_token_id=7, extra_kind="target",
                      target_forwards=2),
        TokenEmitted(index=1, token_id=10, text="b", start=1, end=2, source="lookup", target_forwards=2),
        TokenEmitted(index=2, token_id=7, text="", start=2, end=2, target_forwards=2),
        Finished(mode="pld", prompt_token_ids=(1, 2), token_ids=(9, 10, 7), text="ab", finish_reason="eos",
                 new_tokens=3, target_forwards=2, elapsed_s=1.0, tokens_per_s=3.0)]
    view = view_of(events, 1000)
    pending = view.take()
    (round_,) = pending.rounds
    assert round_.extra_text == "⟨EOS⟩"
    from decode_tui.tui.teaching import caption
    from decode_tui.tui.widgets.draft_panel import visible

    said = caption(round_.verified, round_.proposed, round_.extra_text)
    assert said is not None and said.endswith("target's own token ⟨EOS⟩"), said

    assert visible(round_.proposed.texts[1]) == "↵", "a newline shows as a mark, not a broken row"
    assert [visible(piece) for piece in (" ", "", " x", "\n  if")] == ["␣", "∅", " x", "↵  if"]
    old = view_of([STARTED, *events[1:]], 1000).take().rounds  # a recording without the ids: no mark
    assert old[0].extra_text == ""


def speculative_events_cut() -> list[Event]:
    verdicts = tuple(PositionVerdict(i, 10 + i, 0.9, 1.0, None, "accepted") for i in range(3))
    return [STARTED,
            TokenEmitted(index=0, token_id=9, text="a", start=0, end=1, target_forwards=1),
            DraftProposed(round=0, drafter="lookup", token_ids=(10, 11, 12), texts=("b", "c", "d")),
            DraftVerified(round=0, verdicts=verdicts, accepted=3, extra_token_id=13, extra_kind="bonus",
                          target_forwards=2),
            TokenEmitted(index=1, token_id=10, text="b", start=1, end=2, source="lookup", target_forwards=2),
            Finished(mode="pld", prompt_token_ids=(1, 2), token_ids=(9, 10), text="ab", finish_reason="length",
                     new_tokens=2, target_forwards=2, elapsed_s=1.0, tokens_per_s=2.0)]


def test_notices_and_failures_are_told_and_change_the_state() -> None:
    view = RunView(paused=True, now=0.0)
    assert view.counters.state == "paused"
    applied = view.apply([Notice("loading", "loading tiny…")], now=0.1, paused=True)
    assert view.counters.state == "loading tiny…" and applied.urgent and applied.messages == ()
    applied = view.apply([STARTED], now=0.2, paused=True)
    assert view.counters.state == "paused" and view.started == STARTED
    view.set_paused(False)
    assert view.counters.state == "running"
    applied = view.apply([Notice("ended", "the recording ends", elapsed_s=4.5)], now=9.0, paused=False)
    assert view.counters.state == "recording ends here" and view.counters.elapsed_s == 4.5
    assert applied.messages == (("the recording ends", "information"),)
    applied = view.apply([Failed("Shorten the prompt")], now=9.5, paused=False)
    assert view.error == "Shorten the prompt" and view.counters.state == "error"
    assert applied.messages == (("Shorten the prompt", "error"),)
    view.set_paused(True)
    assert view.counters.state == "error", "pausing a failed run does not hide the failure"


def test_the_trace_keeps_core_events_with_their_times() -> None:
    view = RunView(paused=False, now=10.0)
    view.apply([Notice("note", "hello"), STARTED], now=12.0, paused=False)
    view.apply(speculative_events_cut()[1:3], now=12.5, paused=False)
    assert [e for _, e in view.trace] == [STARTED, *speculative_events_cut()[1:3]]
    # Times from the run's start, its started event (loading the model before it is not part of the run, as in a
    # live recording), notices left out.
    assert [t for t, _ in view.trace] == [0.0, 0.5, 0.5]


def test_the_clock_is_the_cores_decoding_time_whether_running_paused_or_stepping() -> None:
    """Ten seconds of pause between two tokens, and tokens let through one step at a time while paused: the
    stats bar's elapsed time (and so its tok/s) is the decoding time the tokens carry, not the wall clock."""
    view = RunView(paused=True, now=0.0)
    view.apply([STARTED], now=0.0, paused=True)
    token = TokenEmitted(index=0, token_id=5, text="a", start=0, end=1, elapsed_s=0.04)
    view.apply([token], now=0.5, paused=True)  # `n` from --paused: one step while paused
    assert view.counters.state == "paused" and view.counters.elapsed_s == pytest.approx(0.04)
    view.set_paused(False)
    second = TokenEmitted(index=1, token_id=6, text="b", start=1, end=2, elapsed_s=0.08)
    view.apply([second], now=10.5, paused=False)  # resumed after ten seconds
    assert view.counters.state == "running" and view.counters.elapsed_s == pytest.approx(0.08)
    view.apply([], now=11.0, paused=False)  # a drain tick with nothing new keeps the decoding time
    assert view.counters.elapsed_s == pytest.approx(0.08)


def test_a_recording_without_the_clock_replays_on_its_recorded_times() -> None:
    from decode_tui.tui.recording import replay

    old = [(0.0, STARTED), (0.25, TokenEmitted(index=0, token_id=5, text="a", start=0, end=1)),
           (0.5, BeamStepped(step=0, beams=(), candidates=(), finished=(),
                             early_stop=EarlyStopCheck(early_stopping=False, best_attainable_score=None,
                                                       worst_finished_score=None, done=False)))]
    played = list(replay(old, speed=0)())
    assert [getattr(e, "elapsed_s", None) for e in played] == [None, 0.25, 0.5, 0.5]  # and the "ended" notice


def test_the_adaptive_policys_decision_reaches_the_draft_panel() -> None:
    """A DraftLengthDecided is kept for the drafting panel to show, under its rounds or alone during plain steps."""
    from decode_tui.core.record.events import DraftLengthDecided

    view = RunView(paused=False, now=0.0)
    view.apply([STARTED, DraftLengthDecided(round=3, k=0, reason="plain steps: no draft length pays")], now=1.0,
               paused=False)
    assert view.take().adaptive == "adaptive: plain steps: no draft length pays"


def test_a_tree_round_counts_its_nodes_and_its_kept_path_and_a_chain_after_it_says_no_tree() -> None:
    """why-trees said "84 of 84 drafted tokens accepted (100%)" (by depth) where its round said "drafted 2 ... target
    accepted 1" (by nodes), and the stats bar kept "tree of 2 nodes" through later chains. One definition: nodes
    proposed, tokens kept, the kept path a round."""
    from decode_tui.tui.numbers import draft_counts

    tree = [DraftProposed(round=0, drafter="lookup", token_ids=(5, 6, 7), texts=("a", "b", "c"), parents=(-1, -1, 1)),
            DraftVerified(round=0, verdicts=(PositionVerdict(0, 5, 0.1, 1.0, None, "rejected"),
                                             PositionVerdict(1, 6, 0.8, 1.0, None, "accepted"),
                                             PositionVerdict(2, 7, 0.7, 1.0, None, "accepted")),
                          accepted=2, extra_token_id=8, extra_kind="bonus", target_forwards=2, path=(1, 2))]
    chain = [DraftProposed(round=1, drafter="lookup", token_ids=(9, 10, 11, 12), texts=("d", "e", "f", "g")),
             DraftVerified(round=1, verdicts=(PositionVerdict(0, 9, 0.8, 1.0, None, "accepted"),
                                              PositionVerdict(1, 10, 0.1, 1.0, None, "rejected"),
                                              PositionVerdict(2, 11, 0.1, 1.0, None, "untested"),
                                              PositionVerdict(3, 12, 0.1, 1.0, None, "untested")),
                           accepted=1, extra_token_id=13, extra_kind="target", target_forwards=3)]
    view = RunView(paused=False, now=0.0)
    view.apply([STARTED, *tree], 0.0, paused=False)
    c = view.counters
    assert (c.drafted, c.accepted, view.draft_stats.rounds, c.tree_nodes) == (3, 2, 1, 3)
    assert view.draft_stats.depth == 2 and view.draft_stats.by_position() == (1.0, 1.0), "by depth along the path"
    view.apply(chain, 0.1, paused=False)
    rounds = view.draft_stats.rounds
    assert (c.drafted, c.accepted, rounds, c.tree_nodes) == (7, 3, 2, 0), "the latest round was a chain"
    stats = view.draft_stats
    assert draft_counts(stats.drafted, stats.accepted, stats.rounds, stats.depth) == \
        "3 tokens kept of 7 nodes drafted (43%), a kept path of 1.5 a round"
    assert draft_counts(4, 1, 1, 4) == "1 token kept of 4 drafted (25%), a kept path of 1.0 a round"


def test_the_stats_bar_counts_a_one_node_tree_as_one() -> None:
    """A lookahead run in the app said "last round a tree of 1 nodes"."""
    from decode_tui.tui.run_view import Counters
    from decode_tui.tui.widgets.stats_bar import StatsBar

    bar = StatsBar()
    for nodes, said in ((1, "last round a tree of 1 node"), (3, "last round a tree of 3 nodes")):
        bar.show(Counters(tree_nodes=nodes))
        assert said in [full for full, _, _ in bar._parts]
