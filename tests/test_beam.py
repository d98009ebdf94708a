"""Beam search and beam sampling: what ``generate(num_beams=N, ...)`` returns, and events that tell the same story."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Literal

import pytest
import torch

from decode_tui.core.params import BeamParams, SamplingParams
from decode_tui.core.record.detokenize import Detokenizer
from decode_tui.core.record.events import BeamStepped, Event, Finished, TokenEmitted, rerank, rescored_check
from decode_tui.core.record.transcript import Transcript
from decode_tui.core.strategies.beam import beam_search

from .conftest import timeless, tiny_model

V = 420
ARCHS = ["llama", "qwen2", "gpt2", "phi3"]
EarlyStopping = bool | Literal["never"]


def ours(model: Any, tokenizer: Any, prompt: list[int], beam: BeamParams, max_new: int, eos: list[int],
         sampling: SamplingParams | None = None, seed: int | None = None) -> list[Event]:
    transcript = Transcript("beam", prompt, Detokenizer(tokenizer), frozenset(eos), max_new)
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    return list(beam_search(model, transcript, beam, sampling or SamplingParams(), do_sample=seed is not None,
                            generator=generator, decode=tokenizer.decode))


def hf(model: Any, prompt: list[int], beam: BeamParams, max_new: int, eos: list[int],
       sampling: SamplingParams | None = None, seed: int | None = None) -> Any:
    sampling = sampling or SamplingParams()
    if seed is not None:
        torch.manual_seed(seed)
    return model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                          num_beams=beam.num_beams, length_penalty=beam.length_penalty,
                          early_stopping=beam.early_stopping, num_return_sequences=beam.num_return_sequences,
                          max_new_tokens=max_new, eos_token_id=eos, pad_token_id=0, do_sample=seed is not None,
                          temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
                          repetition_penalty=sampling.repetition_penalty, return_dict_in_generate=True,
                          output_scores=True)


def assert_same_as_generate(events: list[Event], out: Any, prompt: list[int], beam: BeamParams, eos: list[int]) -> None:
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.hypotheses is not None
    assert len(finished.hypotheses) == beam.num_return_sequences
    fill = eos[0]  # generate pads with pad_token_id or, when that is 0, the first EOS id
    for i, hypothesis in enumerate(finished.hypotheses):
        theirs = out.sequences[i, len(prompt):].tolist()
        ids = list(hypothesis.token_ids)
        assert theirs[: len(ids)] == ids and all(t == fill for t in theirs[len(ids):]), (i, ids, theirs)
        if beam.num_beams > 1:  # generate returns no sequences_scores for greedy
            assert hypothesis.score == pytest.approx(float(out.sequences_scores[i]), abs=1e-4)
    assert list(finished.token_ids) == list(finished.hypotheses[0].token_ids)


GRID = list(itertools.product(range(1, 9), [-0.5, 0.0, 1.0, 2.0], [True, False, "never"]))


@pytest.mark.parametrize(("num_beams", "length_penalty", "early_stopping"), GRID)
def test_beam_search_equals_generate_over_the_grid(byte_bpe: Any, num_beams: int, length_penalty: float,
                                                   early_stopping: EarlyStopping) -> None:
    for seed in range(3):
        case = num_beams * 100 + seed
        arch = ARCHS[case % len(ARCHS)]
        # A flatter model than the default tiny one, so EOS and beam reshuffles happen often.
        model = tiny_model(arch, vocab_size=V, seed=case, initializer_range=0.05)
        g = torch.Generator().manual_seed(case)
        prompt = torch.randint(1, V - 3, (1 + case % 6,), generator=g).tolist()
        eos = [V - 1, V - 2][: 1 + seed % 2]
        beam = BeamParams(num_beams, length_penalty, early_stopping, 1 + seed % num_beams)
        max_new = 3 + case % 9
        events = ours(model, byte_bpe, prompt, beam, max_new, eos)
        assert_same_as_generate(events, hf(model, prompt, beam, max_new, eos), prompt, beam, eos)


@pytest.mark.parametrize("seed", range(16))
def test_beam_search_with_an_eos_that_the_model_likes(byte_bpe: Any, seed: int) -> None:
    """EOS ids picked from the model's own likely tokens, so hypotheses finish early and the heap fills."""
    model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed, initializer_range=0.05)
    prompt = [3 + seed, 17, 40][: 1 + seed % 3]
    with torch.inference_mode():
        likely = torch.topk(model(torch.tensor([prompt])).logits[0, -1], 6).indices.tolist()
    eos = likely[2 + seed % 3 : 3 + seed % 3]
    stopping: list[EarlyStopping] = [True, False, "never"]
    beam = BeamParams(2 + seed % 5, [0.5, 1.0, -1.0, 0.0][seed % 4], stopping[seed % 3], 1 + seed % 2)
    events = ours(model, byte_bpe, prompt, beam, 12, eos)
    assert_same_as_generate(events, hf(model, prompt, beam, 12, eos), prompt, beam, eos)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=0.7, top_k=10),
                                      SamplingParams(top_k=0, top_p=0.8, repetition_penalty=1.2)],
                         ids=["plain", "t0.7-k10", "p0.8-r1.2"])
def test_beam_sampling_equals_generate_under_the_same_seed(byte_bpe: Any, seed: int,
                                                           sampling: SamplingParams) -> None:
    model = tiny_model(ARCHS[seed % 2], vocab_size=V, seed=seed, initializer_range=0.05)
    prompt = [5 + seed, 9, 11][: 1 + seed % 3]
    beam = BeamParams(2 + seed % 3, 1.0, False, 1)
    events = ours(model, byte_bpe, prompt, beam, 8, [V - 1], sampling, seed=seed)
    assert_same_as_generate(events, hf(model, prompt, beam, 8, [V - 1], sampling, seed=seed), prompt, beam,
                            [V - 1])


def test_beam_sampling_draws_differ_by_seed(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=1, initializer_range=0.05)
    results = set()
    for s in range(8):
        last = ours(model, byte_bpe, [7, 8], BeamParams(3), 10, [V - 1], seed=s)[-1]
        assert isinstance(last, Finished)
        results.add(last.token_ids)
    assert len(results) > 1


def test_rerank_agrees_with_a_full_rerun_under_the_other_penalty(byte_bpe: Any) -> None:
    compared = 0
    for seed in range(10):
        model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed, initializer_range=0.05)
        prompt = [11 + seed, 12]
        runs = {}
        for lp in (0.0, 2.0):
            last = ours(model, byte_bpe, prompt, BeamParams(6, lp, "never", 6), 8, [V - 1, V - 2])[-1]
            assert isinstance(last, Finished) and last.hypotheses is not None
            runs[lp] = last.hypotheses
        reranked = rerank(runs[0.0], 2.0)
        assert [h.score for h in reranked] == sorted((h.score for h in reranked), reverse=True)
        rerun = {h.token_ids: h for h in runs[2.0]}
        common = [h for h in reranked if h.token_ids in rerun]
        for h in common:  # same hypothesis, same score as the full re-run gives it
            assert h.score == pytest.approx(rerun[h.token_ids].score, abs=1e-5)
            assert h.sum_logprobs == pytest.approx(rerun[h.token_ids].sum_logprobs, abs=1e-5)
        # ... and the re-ranking orders the common ones as the re-run does
        assert [h.token_ids for h in common] == [h.token_ids for h in runs[2.0] if h.token_ids in
                                                 {c.token_ids for c in common}]
        compared += len(common)
    assert compared >= 20, "too few hypotheses in common to say anything"


@pytest.mark.parametrize("seed", range(12))
def test_the_test_rescored_with_the_runs_own_penalty_is_the_runs_test(byte_bpe: Any, seed: int) -> None:
    """What a viewer shows after a re-rank (rescored_check) is computed as beam search computes it: with the
    run's own penalty it gives the step's own figures and verdict, at every step."""
    model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed, initializer_range=0.05)
    with torch.inference_mode():
        likely = torch.topk(model(torch.tensor([[3 + seed, 17]])).logits[0, -1], 6).indices.tolist()
    stopping: list[EarlyStopping] = [False, "never", True]
    lp = [1.0, 0.5, 2.0, -1.0][seed % 4]
    beam = BeamParams(2 + seed % 4, lp, stopping[seed % 3], 1)
    events = ours(model, byte_bpe, [3 + seed, 17], beam, 10, likely[2:3])
    steps = [e for e in events if isinstance(e, BeamStepped)]
    for step in steps:
        check = rescored_check(step, lp, 10)
        if step.early_stop.best_attainable_score is None:
            assert check.best_attainable_score is None
        else:
            assert check.best_attainable_score == pytest.approx(step.early_stop.best_attainable_score, rel=1e-6)
        assert check.worst_finished_score == pytest.approx(step.early_stop.worst_finished_score, rel=1e-6)
        if step.beams:  # a search that ran out of open beams (the length limit) ends for that reason alone
            assert check.done == step.early_stop.done, step.step


def test_events_tell_the_same_story_as_the_result(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=3, initializer_range=0.05)
    beam = BeamParams(4, 1.0, False, 2)
    events = ours(model, byte_bpe, [5, 6, 7], beam, 10, [V - 1, V - 2])
    steps = [e for e in events if isinstance(e, BeamStepped)]
    emitted = [e for e in events if isinstance(e, TokenEmitted)]
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.hypotheses is not None
    assert steps and [s.step for s in steps] == list(range(len(steps)))
    assert finished.target_forwards == len(steps)  # the prefill, then one batched forward per further step
    last = steps[-1]
    assert last.early_stop.done or len(steps) == 10
    assert last.finished[0] == finished.hypotheses[0]
    assert "".join(e.text for e in emitted) == finished.text == finished.hypotheses[0].text
    for previous, step in itertools.pairwise(steps):
        at_the_limit = step.step == 9  # every candidate finishes there: no beam stays open
        assert len(step.beams) == (0 if at_the_limit else 4) and len(step.candidates) == 3 * 4  # K = (1 + #eos) * N
        for b in step.beams:  # every live beam extends a beam of the step before
            parent = previous.beams[b.parent]
            assert b.token_ids[:-1] == parent.token_ids
            assert b.score == pytest.approx(b.sum_logprobs / len(b.token_ids) ** 1.0)
        assert sum(c.verdict == "kept" for c in step.candidates) <= 4
        scores = [h.score for h in step.finished]
        assert scores == sorted(scores, reverse=True)
        if step.finished and len(step.finished) == 4:
            assert step.early_stop.worst_finished_score == pytest.approx(min(scores))


def _numbers(value: Any) -> list[float]:
    """Every number inside an event, however deep (dataclasses, tuples, dicts)."""

    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [x for f in dataclasses.fields(value) for x in _numbers(getattr(value, f.name))]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, list | tuple):
        return [x for v in value for x in _numbers(v)]
    return []


@pytest.mark.parametrize("num_beams", [2, 3, 4])
def test_a_search_that_hits_the_length_limit_shows_no_placeholder_score(byte_bpe: Any, num_beams: int) -> None:
    """No -1e9 ("impossible") anywhere: not in the beams, candidates, hypotheses, early-stop test or the jsonl."""
    import json

    model = tiny_model("llama", vocab_size=V, seed=3, initializer_range=0.05)
    events = ours(model, byte_bpe, [5, 6, 7], BeamParams(num_beams, 1.0, "never", num_beams), 6, [V - 1])
    steps = [e for e in events if isinstance(e, BeamStepped)]
    assert len(steps) == 6, "ran to the length limit"
    assert steps[-1].beams == () and steps[-1].early_stop.done
    assert all(len(s.beams) == num_beams for s in steps[:-1])
    numbers = [x for e in events for x in _numbers(e)]
    assert numbers and min(numbers) > -1e8
    lines = [json.loads(e.to_json()) for e in events]
    assert min(x for line in lines for x in _numbers(line)) > -1e8


@pytest.mark.parametrize("seed", range(16))
def test_running_one_pass_ahead_changes_nothing_a_consumer_sees(byte_bpe: Any, seed: int) -> None:
    """The GPU's loop order (each step's pass queued before the last step is read back), forced on the CPU: the
    same events, the same passes counted, whether the search ends at the length limit, by its early-stopping test
    (where the pass queued ahead is wasted) or by a cancel."""
    model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed, initializer_range=0.05)
    prompt = [3 + seed, 17, 40][: 1 + seed % 3]
    with torch.inference_mode():
        likely = torch.topk(model(torch.tensor([prompt])).logits[0, -1], 6).indices.tolist()
    eos = likely[2 + seed % 3 : 3 + seed % 3] if seed % 2 else [V - 1]  # some searches finish early
    stopping: list[EarlyStopping] = [True, False, "never"]
    beam = BeamParams(2 + seed % 4, [0.5, 1.0, -1.0, 0.0][seed % 4], stopping[seed % 3], 1 + seed % 2)
    sampling = SamplingParams(temperature=0.8, top_k=20) if seed % 4 == 3 else SamplingParams()
    streams = []
    for ahead in (False, True):
        transcript = Transcript("beam", prompt, Detokenizer(byte_bpe), frozenset(eos), 10)
        events = []
        for event in beam_search(model, transcript, beam, sampling, do_sample=seed % 4 == 3,
                                 generator=torch.Generator().manual_seed(seed), decode=byte_bpe.decode,
                                 run_ahead=ahead):
            events.append(event)
            if isinstance(event, BeamStepped) and event.step == 4 and seed % 5 == 0:
                transcript.request_cancel()
        streams.append([timeless(e) for e in events])
    assert streams[0] == streams[1]
    assert isinstance(streams[1][-1], Finished)
    if seed % 5:
        assert_same_as_generate(streams[1], hf(model, prompt, beam, 10, eos, sampling,
                                               seed=seed if seed % 4 == 3 else None), prompt, beam, eos)


@pytest.mark.parametrize("early", [False, True], ids=["to-the-limit", "stopped-early"])
def test_running_ahead_wastes_a_pass_only_where_the_search_stops_before_its_limit(byte_bpe: Any,
                                                                                  early: bool) -> None:
    """At the length limit the search always stops, so running ahead queues nothing after its last step; stopped
    earlier by its test, it wasted the one pass it had queued."""
    model = tiny_model("llama", vocab_size=V, seed=5, initializer_range=0.05)
    prompt = [8, 17]
    with torch.inference_mode():
        likely = torch.topk(model(torch.tensor([prompt])).logits[0, -1], 3).indices.tolist()
    eos = likely[:2] if early else [V - 1]
    passes = []
    for ahead in (False, True):
        calls: list[int] = []
        hook = model.register_forward_pre_hook(lambda *_, calls=calls: calls.append(1))
        try:
            events = list(beam_search(model, Transcript("beam", prompt, Detokenizer(byte_bpe), frozenset(eos), 8),
                                      BeamParams(2, early_stopping=True), SamplingParams(), run_ahead=ahead))
        finally:
            hook.remove()
        steps = sum(isinstance(e, BeamStepped) for e in events)
        assert (steps < 8) is early
        passes.append(len(calls))
    assert passes[1] == passes[0] + early


def test_cancel_request_stops_beam_search(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=3, initializer_range=0.05)
    transcript = Transcript("beam", [5, 6], Detokenizer(byte_bpe), frozenset({V - 1}), 30)
    events = []
    for event in beam_search(model, transcript, BeamParams(3), SamplingParams(), decode=byte_bpe.decode):
        events.append(event)
        if isinstance(event, BeamStepped) and event.step == 2:
            transcript.request_cancel()
    assert isinstance(events[-1], Finished) and events[-1].finish_reason == "cancelled"
    assert sum(isinstance(e, BeamStepped) for e in events) == 3


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [({"num_beams": 0}, "num_beams must be at least 1"),
     ({"num_beams": 2, "num_return_sequences": 3}, "between 1 and num_beams"),
     ({"length_penalty": float("nan")}, "finite number"),
     ({"early_stopping": "sometimes"}, "true, false or never")],
)
def test_bad_beam_parameters_say_what_to_do(kwargs: dict[str, Any], fragment: str) -> None:
    from decode_tui.core.errors import UsageError

    with pytest.raises(UsageError, match=fragment):
        BeamParams(**kwargs)


@pytest.mark.real_model
@pytest.mark.parametrize("prompt", ["What is the capital of France?",
                                    "Rename the variable x to count:\nx = 0\nx += 1\nprint(x)"])
def test_beam_search_equals_generate_on_the_real_model(smollm2: Any, prompt: str) -> None:
    from decode_tui.core.params import DecodeConfig
    from decode_tui.core.run import Run

    beam = BeamParams(4, 1.0, False, 2)
    run = Run(smollm2, prompt, DecodeConfig(mode="beam", max_new_tokens=32, beam=beam))
    events = list(run.events())
    eos = sorted(smollm2.eos_token_ids)
    ids = torch.tensor([run.prompt_ids])
    out = smollm2.model.generate(ids, attention_mask=torch.ones_like(ids), num_beams=4, length_penalty=1.0,
                                 early_stopping=False, num_return_sequences=2, max_new_tokens=32, do_sample=False,
                                 eos_token_id=eos, pad_token_id=smollm2.tokenizer.pad_token_id,
                                 return_dict_in_generate=True, output_scores=True)
    fill = smollm2.tokenizer.pad_token_id or eos[0]
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.hypotheses is not None
    for i, hypothesis in enumerate(finished.hypotheses):
        theirs = out.sequences[i, len(run.prompt_ids):].tolist()
        assert theirs[: len(hypothesis.token_ids)] == list(hypothesis.token_ids)
        assert all(t == fill for t in theirs[len(hypothesis.token_ids):])
        assert hypothesis.score == pytest.approx(float(out.sequences_scores[i]), abs=1e-4)
