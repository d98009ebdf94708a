"""Settings changed mid-run (the TUI's keys) take effect at the next step, never half-applied, never lossy."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import torch

from decode_tui.core.drafting.model_drafter import ModelDrafter
from decode_tui.core.drafting.prompt_lookup import PromptLookup
from decode_tui.core.live import LiveParams
from decode_tui.core.params import DraftParams, SamplingParams
from decode_tui.core.record.detokenize import Detokenizer
from decode_tui.core.record.events import DraftProposed, Event, Finished, TokenSampled
from decode_tui.core.record.transcript import Transcript
from decode_tui.core.strategies.autoregressive import autoregressive
from decode_tui.core.strategies.speculative import speculative

from .conftest import tiny_model

V = 420


def transcript(tokenizer: Any, prompt: list[int], max_new: int) -> Transcript:
    return Transcript("greedy", prompt, Detokenizer(tokenizer), frozenset({V - 1}), max_new)


def drive(stream: Generator[Event, None, None], live: LiveParams, at: int, **change: Any) -> list[Event]:
    """Consume ``stream``; after the ``at``-th step-closing event, apply ``change`` (as the UI thread would)."""
    events: list[Event] = []
    steps = 0
    for event in stream:
        events.append(event)
        if isinstance(event, TokenSampled | DraftProposed):
            steps += 1
            if steps == at:
                snap = live.snapshot()
                live.update(sampling=change.get("sampling", snap.sampling), draft=change.get("draft", snap.draft))
    return events


def test_a_sampling_change_applies_from_the_next_step(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=3)
    live = LiveParams(SamplingParams(temperature=1.0, top_k=0))
    stream = autoregressive(model, transcript(byte_bpe, [5, 6, 7], 8), live.snapshot().sampling, greedy=False,
                            generator=torch.Generator().manual_seed(0), live=live)
    events = drive(stream, live, at=3, sampling=SamplingParams(temperature=0.5, top_k=5))
    steps = [e for e in events if isinstance(e, TokenSampled)]
    assert [tuple(s.stage for s in e.stages) for e in steps[:3]] == [("raw",)] * 3
    assert all(tuple(s.stage for s in e.stages) == ("raw", "temperature", "top_k") for e in steps[3:])
    assert len(steps) == 8


def test_temperature_zero_mid_run_turns_sampling_into_greedy(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=4)
    live = LiveParams(SamplingParams(temperature=1.5))
    stream = autoregressive(model, transcript(byte_bpe, [5, 6, 7], 10), live.snapshot().sampling, greedy=False,
                            generator=torch.Generator().manual_seed(0), live=live)
    events = drive(stream, live, at=2, sampling=SamplingParams(temperature=0.0))
    steps = [e for e in events if isinstance(e, TokenSampled)]
    assert [e.greedy for e in steps] == [False, False] + [True] * 8
    for e in steps[2:]:
        assert e.token_id == e.stages[0].candidates[0].token_id  # the argmax


def test_draft_length_changes_between_rounds_and_stays_lossless(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=5)
    prompt = [11, 12, 13, 14, 15]
    plain = list(autoregressive(model, transcript(byte_bpe, prompt, 24), SamplingParams(), greedy=True))[-1]
    # A confidence cut-off of 0: the drafter always drafts the full length (the live settings carry it too).
    live = LiveParams(SamplingParams(), DraftParams(num_draft_tokens=6, confidence_threshold=0.0))
    drafter = ModelDrafter(model, V, confidence_threshold=0.0)
    stream = speculative(model, transcript(byte_bpe, prompt, 24), drafter, SamplingParams(), greedy=True,
                         num_draft_tokens=6, live=live)
    events = drive(stream, live, at=1, draft=DraftParams(num_draft_tokens=2, confidence_threshold=0.0))
    drafts = [len(e.token_ids) for e in events if isinstance(e, DraftProposed)]
    assert drafts[0] == 6 and len(drafts) > 3 and set(drafts[1:]) <= {1, 2} and drafts[1] == 2
    last = events[-1]
    assert isinstance(last, Finished) and isinstance(plain, Finished) and last.token_ids == plain.token_ids


def test_the_ngram_size_reaches_the_lookup_drafter_and_stays_lossless(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=10)  # its greedy output repeats itself: lookups match
    prompt = ([11, 12, 13, 14, 15] * 6)[:28]
    plain = list(autoregressive(model, transcript(byte_bpe, prompt, 24), SamplingParams(), greedy=True))[-1]
    live = LiveParams(SamplingParams(), DraftParams(max_ngram_size=3))
    drafter = PromptLookup(3, 10, frozenset({V - 1}))
    stream = speculative(model, transcript(byte_bpe, prompt, 24), drafter, SamplingParams(), greedy=True,
                         num_draft_tokens=6, live=live)
    events = drive(stream, live, at=1, draft=DraftParams(max_ngram_size=1, num_pred_tokens=4))
    drafts = [e for e in events if isinstance(e, DraftProposed)]
    assert len(drafts) > 2 and (drafter.max_ngram_size, drafter.num_pred_tokens) == (1, 4)
    assert all(d.match_end - d.match_start == 1 for d in drafts[1:])  # type: ignore[operator]
    last = events[-1]
    assert isinstance(last, Finished) and isinstance(plain, Finished) and last.token_ids == plain.token_ids


def test_updates_are_whole_snapshots_with_rising_versions() -> None:
    live = LiveParams(SamplingParams())
    first = live.update(sampling=SamplingParams(temperature=0.7))
    second = live.update(draft=DraftParams(num_draft_tokens=3))
    assert (first.version, second.version) == (1, 2)
    assert second.sampling.temperature == 0.7 and second.draft.num_draft_tokens == 3


def test_prompt_lookups_draft_length_is_its_copy_length(byte_bpe: Any) -> None:
    """PLD drafts up to num_pred_tokens (transformers' prompt_lookup_num_tokens), not a draft model's length."""
    from decode_tui.core.params import DecodeConfig
    from decode_tui.core.run import Run

    from .test_autoregressive import loaded

    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=10), byte_bpe, 2)
    text = "abcdefghijklmnop " * 6
    for pred, speculative_k in ((7, 2), (3, 9)):
        config = DecodeConfig(mode="pld", max_new_tokens=40, seed=1,
                              draft=DraftParams(num_draft_tokens=speculative_k, num_pred_tokens=pred))
        events = list(Run(lm, text, config, draft=None).events())
        lengths = [len(e.token_ids) for e in events if isinstance(e, DraftProposed)]
        assert lengths and max(lengths) == pred, (pred, lengths)


def test_the_draft_confidence_cut_off_reaches_the_draft_model_between_rounds(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=5)
    live = LiveParams(SamplingParams(), DraftParams(num_draft_tokens=6, confidence_threshold=0.0))
    drafter = ModelDrafter(model, V, confidence_threshold=0.0)
    stream = speculative(model, transcript(byte_bpe, [11, 12, 13, 14, 15], 24), drafter, SamplingParams(),
                         greedy=True, num_draft_tokens=6, live=live)
    events = drive(stream, live, at=1, draft=DraftParams(num_draft_tokens=6, confidence_threshold=1.0))
    drafts = [e for e in events if isinstance(e, DraftProposed)]
    assert len(drafts[0].token_ids) == 6 and drafter.confidence_threshold == 1.0
    assert all(len(d.token_ids) == 1 for d in drafts[1:]), "a cut-off of 1 stops every draft after one token"


def test_bad_words_set_mid_run_are_banned_from_the_next_step(byte_bpe: Any) -> None:
    """The stage editor's bad words go through the live parameters as its other stages do."""
    from decode_tui.core.choosing.bad_words import token_bytes
    from decode_tui.core.choosing.sampling import StageContext

    model = tiny_model("llama", vocab_size=V, seed=6)
    prompt = [21, 22, 23, 24]
    context = StageContext(eos_token_ids=(V - 1,), prompt_length=len(prompt),
                           token_bytes=lambda: token_bytes(byte_bpe))
    plain = list(autoregressive(model, transcript(byte_bpe, prompt, 12), SamplingParams(), greedy=True,
                                stages=context))
    written = [e.token_id for e in plain if isinstance(e, TokenSampled)]
    # A word greedy writes after the third step, which the tokenizer writes as that one token.
    word, token = next((text, t) for t in written[3:] if (text := byte_bpe.decode([t]).strip())
                       and byte_bpe.encode(text, add_special_tokens=False) == [t])
    live = LiveParams(SamplingParams())
    stream = autoregressive(model, transcript(byte_bpe, prompt, 12), live.snapshot().sampling, greedy=True,
                            live=live, stages=context)
    events = drive(stream, live, at=3, sampling=SamplingParams(bad_words=(word,)))
    steps = [e for e in events if isinstance(e, TokenSampled)]
    assert [e.token_id for e in steps[:3]] == written[:3]
    assert token not in [e.token_id for e in steps[3:]], word
    assert any(s.stage == "bad_words" for e in steps[3:] for s in e.stages)
    assert not any(s.stage == "bad_words" for e in steps[:3] for s in e.stages)
