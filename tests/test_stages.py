"""Every sampling stage transformers applies to a causal LM's text: the same processors in generate's order, the
figures that say why each one cut, the same tokens as generate in every mode, and the ranges refused."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from transformers import GenerationConfig

from decode_tui.core.choosing.sampling import StageContext, draw, processed, stage_processors, staged_scores
from decode_tui.core.errors import UsageError
from decode_tui.core.params import SamplingParams

from .conftest import tiny_model

V = 97
EOS = 3


# A vocabulary for these tests (bad words need one): tokens 0-25 are the letters a-z, 26-51 the same letters
# doubled, and so on, so that a word has many spellings ("aab" is "a" + "a" + "b" or "aa" + "b"); EOS writes nothing.
FAKE_BYTES = [b"" if i == EOS else bytes([ord("a") + i % 26]) * (1 + i // 26) for i in range(V)]
CONTEXT = StageContext(eos_token_ids=(EOS,), prompt_length=5, token_bytes=lambda: FAKE_BYTES)


@pytest.fixture(scope="module")
def hf_model() -> Any:
    return tiny_model("llama", vocab_size=V)


def generation_config(params: SamplingParams, do_sample: bool, context: StageContext = CONTEXT,
                      **extra: Any) -> GenerationConfig:
    """The GenerationConfig that asks generate for ``params``."""
    config = GenerationConfig(
        do_sample=do_sample, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
        repetition_penalty=params.repetition_penalty, min_p=params.min_p, typical_p=params.typical_p,
        epsilon_cutoff=params.epsilon_cutoff, eta_cutoff=params.eta_cutoff, top_h=params.top_h,
        no_repeat_ngram_size=params.no_repeat_ngram_size or None,
        min_new_tokens=params.min_new_tokens or None, eos_token_id=list(context.eos_token_ids), **extra)
    return config


def hf_processors(model: Any, params: SamplingParams, do_sample: bool) -> Any:
    """The processor list ``generate`` itself builds for these parameters (its EOS tensor set as generate sets it)."""
    config = generation_config(params, do_sample)
    config._eos_token_tensor = torch.tensor([EOS])
    processors = list(model._get_logits_processor(generation_config=config, input_ids_seq_length=CONTEXT.prompt_length,
                                                  device="cpu"))
    if params.bad_words:  # ours, not generate's (which bans token runs): in the place generate's would take
        place = sum(type(p).__name__ in ("RepetitionPenaltyLogitsProcessor", "NoRepeatNGramLogitsProcessor")
                    for p in processors)
        processors.insert(place, CONTEXT.bad_words(params.bad_words))
    return processors


PARAMS = st.builds(
    SamplingParams,
    temperature=st.sampled_from([1.0, 0.5, 1.5, 3.0]),
    top_k=st.sampled_from([0, 5, 50]),
    top_p=st.sampled_from([1.0, 0.9]),
    repetition_penalty=st.sampled_from([1.0, 1.3]),
    min_p=st.sampled_from([None, 0.0, 0.05, 0.2, 1.0]),
    typical_p=st.sampled_from([1.0, 0.9, 0.2]),
    epsilon_cutoff=st.sampled_from([0.0, 3e-4, 0.02]),
    eta_cutoff=st.sampled_from([0.0, 3e-4, 0.05]),
    top_h=st.sampled_from([None, 0.4, 1.0]),
    no_repeat_ngram_size=st.sampled_from([0, 1, 2, 3]),
    bad_words=st.sampled_from([(), ("ab",), ("a", "bcd")]),
    min_new_tokens=st.sampled_from([0, 4, 20]),
)


@settings(max_examples=300, deadline=None)
@given(params=PARAMS, seed=st.integers(0, 2**16), do_sample=st.booleans())
def test_each_stage_equals_the_processor_generate_builds_in_its_order(hf_model: Any, params: SamplingParams,
                                                                      seed: int, do_sample: bool) -> None:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, V, generator=g) * 3
    input_ids = torch.randint(0, 8, (1, 12), generator=g)  # few distinct ids: n-grams repeat
    processors = stage_processors(params, greedy=not do_sample, context=CONTEXT)
    theirs = [p for p in hf_processors(hf_model, params, do_sample) if params.min_p or type(p).__name__ !=
              "MinPLogitsWarper"]  # generate adds min-p at 0 too, where it removes nothing; we leave it out
    assert [type(p).__name__ for _, p in processors] == [type(p).__name__ for p in theirs]
    ours = staged_scores(processors, input_ids, logits)
    scores = logits.clone()
    for (stage, our_scores), processor in zip(ours[1:], theirs, strict=True):
        scores = processor(input_ids, scores)
        torch.testing.assert_close(our_scores, scores, rtol=0, atol=0, msg=f"stage {stage}")
    if not torch.isfinite(scores).any():
        return  # the stages removed every token (min_new_tokens and bad words on a tiny vocabulary can)
    picked = draw(ours, greedy=not do_sample, generator=torch.Generator().manual_seed(seed), top_n=5,
                  processors=processors)
    # What each stage cut, on the host: tokens left and removed, and the best of those it removed.
    finite = [torch.isfinite(s[0]) for _, s in ours]
    for i, cut in enumerate(picked.cuts[1:], start=1):
        assert cut.possible == int(finite[i].sum())
        assert cut.removed == int((finite[i - 1] & ~finite[i]).sum())
        before = torch.softmax(ours[i - 1][1][0], -1)
        for token, p in zip(cut.removed_ids, cut.removed_probs, strict=True):
            assert not finite[i][token] and finite[i - 1][token]
            assert p == pytest.approx(float(before[token]))


def _entropy(p: torch.Tensor) -> float:
    return float(-(p[p > 0] * p[p > 0].log()).sum())


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**16), temperature=st.sampled_from([0.7, 1.0, 2.0]))
def test_each_cutoff_is_shown_in_its_methods_words(seed: int, temperature: float) -> None:
    """min-p cuts below min_p × p_max, epsilon below ε, eta below min(η, √η·e^-H), typical keeps a band around the
    entropy, top-h an entropy budget: the figures shown are the ones the processors' cuts obey."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, V, generator=g) * 2
    for params in (SamplingParams(temperature=temperature, top_k=0, min_p=0.1),
                   SamplingParams(temperature=temperature, top_k=0, epsilon_cutoff=0.01),
                   SamplingParams(temperature=temperature, top_k=0, eta_cutoff=0.05),
                   SamplingParams(temperature=temperature, top_k=0, typical_p=0.5),
                   SamplingParams(temperature=temperature, top_k=0, top_h=0.5)):
        processors = stage_processors(params, greedy=False)
        staged = staged_scores(processors, torch.zeros(1, 0, dtype=torch.long), logits)
        cut = draw(staged, greedy=False, generator=torch.Generator().manual_seed(0), top_n=5,
                   processors=processors).cuts[-1]
        p_in = torch.softmax(staged[-2][1][0], -1)
        kept = torch.isfinite(staged[-1][1][0])
        stage = staged[-1][0]
        assert cut.threshold is not None, stage
        if stage in ("min_p", "epsilon_cutoff", "eta_cutoff"):
            if stage == "min_p":
                assert cut.threshold == pytest.approx(0.1 * float(p_in.max()), rel=1e-5)
            elif stage == "epsilon_cutoff":
                assert cut.threshold == pytest.approx(0.01)
            else:
                h = _entropy(p_in)
                assert cut.entropy == pytest.approx(h, rel=1e-4)
                assert cut.threshold == pytest.approx(min(0.05, math.sqrt(0.05) * math.exp(-h)), rel=1e-4)
            below = p_in < cut.threshold * (1 - 1e-6)
            assert not (kept & below).any() or kept.sum() == 1  # nothing under it is kept (but the best one)
            assert (kept | below).all()  # and everything at or above it is
        elif stage == "typical_p":
            h = _entropy(p_in)
            distance = (-p_in.log() - h).abs()
            assert cut.entropy == pytest.approx(h, rel=1e-4)
            assert cut.threshold == pytest.approx(float(distance[kept].max()), rel=1e-4)
        else:
            assert cut.entropy is not None and cut.threshold == pytest.approx(0.5 * cut.entropy)


def test_the_stage_order_is_generates() -> None:
    params = SamplingParams(temperature=0.7, top_k=10, top_p=0.9, repetition_penalty=1.3, min_p=0.05, typical_p=0.9,
                            epsilon_cutoff=3e-4, eta_cutoff=3e-4, top_h=0.4, no_repeat_ngram_size=3,
                            bad_words=("ab",), min_new_tokens=2)
    assert [s for s, _ in stage_processors(params, greedy=False, context=CONTEXT)] == [
        "repetition_penalty", "no_repeat_ngram_size", "bad_words", "min_new_tokens", "temperature", "top_h",
        "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff"]
    assert [s for s, _ in stage_processors(params, greedy=True, context=CONTEXT)] == [
        "repetition_penalty", "no_repeat_ngram_size", "bad_words", "min_new_tokens"]


def written(output: list[int]) -> bytes:
    return b"".join(FAKE_BYTES[t] for t in output)


@settings(max_examples=300, deadline=None)
@given(output=st.lists(st.integers(0, 30), max_size=12),
       words=st.lists(st.text("abcz", min_size=1, max_size=5), min_size=1, max_size=3))
def test_a_bad_word_is_banned_however_it_would_be_spelt(output: list[int], words: list[str]) -> None:
    """A token is banned exactly where it would put a bad word into the text after the prompt: every spelling
    ("a"+"b", or "aa"+"b" after "a"), inside a longer token too."""
    from decode_tui.core.choosing.bad_words import NoBadWords

    prompt = [0, 1]  # "ab": the prompt may hold a bad word; only the output counts
    processor = NoBadWords(words, FAKE_BYTES, len(prompt))
    scores = processor(torch.tensor([prompt + output]), torch.zeros(1, V))
    before = written(output)
    assume(not any(w.encode() in before for w in words))  # as every earlier step of a run made sure
    for token in range(V):
        after = written([*output, token])
        expected = any(w.encode() in after for w in words)
        assert (scores[0, token] == float("-inf")) == expected, (before, token, FAKE_BYTES[token])


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"min_p": -0.1}, "min_p must be in [0, 1]"),
        ({"min_p": 1.5}, "min_p must be in [0, 1]"),
        ({"typical_p": 0.0}, "typical_p must be in (0, 1]"),
        ({"typical_p": 1.2}, "typical_p must be in (0, 1]"),
        ({"epsilon_cutoff": -1e-3}, "epsilon_cutoff must be in [0, 1)"),
        ({"eta_cutoff": 1.0}, "eta_cutoff must be in [0, 1)"),
        ({"top_h": 0.0}, "top_h must be in (0, 1]"),
        ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size must be 0"),
        ({"min_new_tokens": -2}, "min_new_tokens must be 0"),
        ({"bad_words": ("ok", " ")}, "A bad word is empty"),
    ],
)
def test_out_of_range_stage_values_say_the_valid_range(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(UsageError) as err:
        SamplingParams(**kwargs)
    assert fragment in err.value.message


def test_bad_words_without_a_tokenizer_are_refused() -> None:
    with pytest.raises(UsageError, match="need the model's tokenizer"):
        stage_processors(SamplingParams(bad_words=("zz",)), greedy=True, context=StageContext())


def test_the_stages_never_edit_the_logits_they_are_given() -> None:
    logits = torch.randn(1, V, generator=torch.Generator().manual_seed(5))
    before = logits.clone()
    params = SamplingParams(temperature=0.5, min_p=0.1, typical_p=0.8, epsilon_cutoff=1e-3, eta_cutoff=1e-3,
                            top_h=0.5, no_repeat_ngram_size=2, bad_words=("a",), min_new_tokens=50)
    processors = stage_processors(params, greedy=False, context=CONTEXT)
    processed(processors, torch.tensor([[1, 2, 1, 2, 1]]), logits)
    assert torch.equal(logits, before)
