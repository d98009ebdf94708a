"""The sampling stages equal what transformers' generate builds, stage by stage, and never edit their input."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import GenerationConfig

from decode_tui.core.choosing.sampling import draw, stage_processors, staged_scores
from decode_tui.core.errors import UsageError
from decode_tui.core.params import SamplingParams

from .conftest import tiny_model

V = 97


@pytest.fixture(scope="module")
def hf_model() -> Any:
    return tiny_model("llama", vocab_size=V)


def hf_processors(model: Any, params: SamplingParams, do_sample: bool) -> Any:
    """The processor list ``generate`` itself would use for these parameters."""
    config = GenerationConfig(do_sample=do_sample, temperature=params.temperature, top_k=params.top_k,
                              top_p=params.top_p, repetition_penalty=params.repetition_penalty)
    return model._get_logits_processor(generation_config=config, input_ids_seq_length=5, device="cpu")


PARAMS = st.builds(
    SamplingParams,
    temperature=st.floats(0.05, 4.0),
    top_k=st.sampled_from([0, 1, 2, 5, 20, V + 10]),
    top_p=st.sampled_from([1.0, 0.99, 0.9, 0.5, 0.1, 1e-6]),
    repetition_penalty=st.sampled_from([1.0, 0.7, 1.2, 2.0]),
)


@settings(max_examples=200, deadline=None)
@given(params=PARAMS, seed=st.integers(0, 2**16), do_sample=st.booleans())
def test_each_stage_matches_the_processors_generate_builds(hf_model: Any, params: SamplingParams, seed: int,
                                                           do_sample: bool) -> None:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, V, generator=g) * 3
    input_ids = torch.randint(0, V, (1, 12), generator=g)
    processors = stage_processors(params, greedy=not do_sample)
    ours = staged_scores(processors, input_ids, logits)
    theirs = hf_processors(hf_model, params, do_sample)
    assert [type(p).__name__ for p in theirs] == [type(p).__name__ for _, p in processors]
    scores = logits.clone()
    for (stage, our_scores), processor in zip(ours[1:], theirs, strict=True):
        scores = processor(input_ids, scores)
        torch.testing.assert_close(our_scores, scores, rtol=0, atol=0, msg=f"stage {stage}")
        probs_ours, probs_hf = torch.softmax(our_scores, -1), torch.softmax(scores, -1)
        torch.testing.assert_close(probs_ours, probs_hf)


def test_stage_names_follow_transformers_order() -> None:
    params = SamplingParams(temperature=0.7, top_k=10, top_p=0.9, repetition_penalty=1.3)
    assert [s for s, _ in stage_processors(params, greedy=False)] == [
        "repetition_penalty", "temperature", "top_k", "top_p"]
    assert [s for s, _ in stage_processors(params, greedy=True)] == ["repetition_penalty"]
    assert stage_processors(SamplingParams(top_k=0), greedy=False) == []


@settings(max_examples=100, deadline=None)
@given(params=PARAMS, seed=st.integers(0, 2**16))
def test_snapshots_are_the_top_candidates_of_each_stage(params: SamplingParams, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, V, generator=g) * 3
    input_ids = torch.randint(0, V, (1, 8), generator=g)
    staged = staged_scores(stage_processors(params, greedy=False), input_ids, logits)
    picked = draw(staged, greedy=False, generator=torch.Generator().manual_seed(seed), top_n=5)
    assert picked.stages == tuple(s for s, _ in staged)
    for (_, scores), ids, probs in zip(staged, picked.top_ids, picked.top_probs, strict=True):
        full = torch.softmax(scores[0], -1)
        kept = int(torch.isfinite(scores[0]).sum())  # a token the stage removed is no candidate, not one at 0 %
        expected = torch.topk(full, min(5, kept))
        torch.testing.assert_close(torch.tensor(probs), expected.values)
        torch.testing.assert_close(full[ids], expected.values)  # ids may differ only among exact ties
        assert all(torch.isfinite(scores[0, ids]))
    final = torch.softmax(staged[-1][1][0], -1)
    assert final[picked.token_id] > 0, "the drawn token survived every filter"
    assert picked.prob == pytest.approx(float(final[picked.token_id]))
    # Where the drawn token stood at every stage, for a viewer to show it outside the top candidates.
    for (_, scores), chosen, rank in zip(staged, picked.chosen_probs, picked.chosen_ranks, strict=True):
        full = torch.softmax(scores[0], -1)
        assert chosen == pytest.approx(float(full[picked.token_id]))
        assert rank == 1 + int((full > full[picked.token_id]).sum())
    assert picked.chosen_probs[-1] == picked.prob


def test_sampling_never_edits_the_logits_it_is_given() -> None:
    logits = torch.randn(1, V, generator=torch.Generator().manual_seed(5))
    before = logits.clone()
    input_ids = torch.arange(10).view(1, -1)
    params = SamplingParams(temperature=0.5, top_k=3, top_p=0.5, repetition_penalty=1.5)
    staged = staged_scores(stage_processors(params, greedy=False), input_ids, logits)
    draw(staged, greedy=False, generator=torch.Generator().manual_seed(0), top_n=3)
    assert torch.equal(logits, before)


def test_greedy_draw_is_the_argmax_after_the_penalty() -> None:
    logits = torch.tensor([[1.0, 5.0, 4.0, 0.0]])
    input_ids = torch.tensor([[1]])
    params = SamplingParams(repetition_penalty=2.0)  # 5.0 -> 2.5, so token 2 wins
    staged = staged_scores(stage_processors(params, greedy=True), input_ids, logits)
    assert draw(staged, greedy=True, generator=None, top_n=2).token_id == 2


def test_same_generator_seed_gives_the_same_draws() -> None:
    logits = torch.zeros(1, V)
    staged = staged_scores([], torch.zeros(1, 1, dtype=torch.long), logits)

    def draws(seed: int) -> list[int]:
        g = torch.Generator().manual_seed(seed)
        return [draw(staged, greedy=False, generator=g, top_n=1).token_id for _ in range(20)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"temperature": -0.1}, "temperature must be 0"),
        ({"temperature": float("nan")}, "temperature must be 0"),
        ({"top_k": -1}, "top_k must be"),
        ({"top_p": 0.0}, "top_p must be in (0, 1]"),
        ({"top_p": 1.5}, "top_p must be in (0, 1]"),
        ({"repetition_penalty": 0.0}, "repetition_penalty must be positive"),
    ],
)
def test_bad_parameters_say_what_to_do(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(UsageError) as err:
        SamplingParams(**kwargs)
    assert fragment in err.value.message and "Use" in err.value.message


def test_a_token_top_p_removed_is_no_runner_up_nor_a_candidate() -> None:
    """After top-p keeps one token, its caption names no runner-up, and a recording made when removed tokens
    were listed at 0 % shows them neither."""
    from decode_tui.core.record.events import Candidate, StageCandidates, TokenSampled
    from decode_tui.tui.teaching import caption

    logits = torch.tensor([[6.0, 1.0, 0.5, 0.2] + [0.0] * (V - 4)])
    staged = staged_scores(stage_processors(SamplingParams(top_p=0.5), greedy=False), torch.zeros(1, 0).long(),
                           logits)
    picked = draw(staged, greedy=False, generator=torch.Generator().manual_seed(0), top_n=5)
    assert picked.top_ids[-1] == [0] and len(picked.top_ids[0]) == 5  # top-p kept one; raw has them all
    old = StageCandidates("top_p", (Candidate(0, "a", 1.0), Candidate(1, "<reponame>", 0.0)))
    assert old.kept == (Candidate(0, "a", 1.0),)
    event = TokenSampled(step=0, token_id=0, text="a", prob=1.0, greedy=False,
                         stages=(StageCandidates("raw", (Candidate(0, "a", 0.9), Candidate(1, "b", 0.05))), old))
    said = caption(event)
    assert said is not None and "runner-up" not in said and "<reponame>" not in said
