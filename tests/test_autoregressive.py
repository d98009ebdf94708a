"""Greedy and sampling strategies: token for token what ``generate`` gives, with a consistent event stream."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from decode_tui.core.errors import UsageError
from decode_tui.core.model.loading import LoadedModel, context_length
from decode_tui.core.params import DecodeConfig, SamplingParams
from decode_tui.core.record.detokenize import Detokenizer
from decode_tui.core.record.events import Event, Finished, Started, TokenEmitted, TokenSampled
from decode_tui.core.record.path import Path as DecodePath
from decode_tui.core.record.transcript import Transcript
from decode_tui.core.run import Run
from decode_tui.core.strategies.autoregressive import autoregressive

from .conftest import timeless, tiny_model

ARCHS = ["llama", "qwen2", "gpt2", "phi3"]
V = 420


def run_strategy(model: Any, tokenizer: Any, prompt: list[int], params: SamplingParams, greedy: bool,
                 max_new: int, eos: int, seed: int = 0) -> list[Event]:
    transcript = Transcript("greedy" if greedy else "sample", prompt, Detokenizer(tokenizer), frozenset({eos}),
                            max_new)
    gen = torch.Generator().manual_seed(seed)
    return list(autoregressive(model, transcript, params, greedy=greedy, generator=gen))


def hf_generate(model: Any, prompt: list[int], params: SamplingParams, greedy: bool, max_new: int, eos: int,
                seed: int = 0) -> list[int]:
    torch.manual_seed(seed)  # generate draws from the global generator; ours from an explicit one, same seed
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         do_sample=not greedy, max_new_tokens=max_new, eos_token_id=eos, pad_token_id=0,
                         temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
                         repetition_penalty=params.repetition_penalty)
    return [int(t) for t in out[0, len(prompt):]]


def case(seed: int) -> tuple[str, list[int], int]:
    g = torch.Generator().manual_seed(seed)
    arch = ARCHS[seed % len(ARCHS)]
    prompt = torch.randint(1, V - 1, (1 + seed % 13,), generator=g).tolist()
    return arch, prompt, 1 + (seed * 7) % 40


@pytest.mark.parametrize("seed", range(24))
def test_greedy_equals_generate(byte_bpe: Any, seed: int) -> None:
    arch, prompt, max_new = case(seed)
    model = tiny_model(arch, vocab_size=V, seed=seed)
    eos = V - 1 - seed % 3
    for params in (SamplingParams(), SamplingParams(repetition_penalty=1.3)):
        events = run_strategy(model, byte_bpe, prompt, params, True, max_new, eos)
        finished = events[-1]
        assert isinstance(finished, Finished)
        assert list(finished.token_ids) == hf_generate(model, prompt, params, True, max_new, eos)


SAMPLE_PARAMS = [
    SamplingParams(),
    SamplingParams(temperature=0.7),
    SamplingParams(temperature=1.3, top_k=0),
    SamplingParams(top_k=5),
    SamplingParams(top_k=0, top_p=0.8),
    SamplingParams(temperature=0.8, top_k=20, top_p=0.9, repetition_penalty=1.2),
]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(
    "params", SAMPLE_PARAMS, ids=lambda p: f"t{p.temperature}-k{p.top_k}-p{p.top_p}-r{p.repetition_penalty}")
def test_sampling_with_a_seed_equals_generate_with_that_seed(byte_bpe: Any, seed: int,
                                                             params: SamplingParams) -> None:
    arch, prompt, max_new = case(seed)
    model = tiny_model(arch, vocab_size=V, seed=seed)
    events = run_strategy(model, byte_bpe, prompt, params, False, max_new, V - 1, seed)
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert list(finished.token_ids) == hf_generate(model, prompt, params, False, max_new, V - 1, seed)


def test_temperature_zero_in_sample_mode_is_greedy(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=5)
    prompt = [5, 6, 7]
    greedy = run_strategy(model, byte_bpe, prompt, SamplingParams(), True, 20, V - 1)[-1]
    zero = run_strategy(model, byte_bpe, prompt, SamplingParams(temperature=0.0), False, 20, V - 1, seed=9)[-1]
    assert isinstance(greedy, Finished) and isinstance(zero, Finished)
    assert zero.token_ids == greedy.token_ids


def test_event_stream_is_consistent(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=1)
    events = run_strategy(model, byte_bpe, [10, 11, 12], SamplingParams(temperature=0.9, top_k=40), False, 30,
                          V - 1, seed=3)
    sampled = [e for e in events if isinstance(e, TokenSampled)]
    emitted = [e for e in events if isinstance(e, TokenEmitted)]
    finished = events[-1]
    assert isinstance(finished, Finished) and sum(isinstance(e, Finished) for e in events) == 1
    assert [s.token_id for s in sampled] == [e.token_id for e in emitted] == list(finished.token_ids)
    assert "".join(e.text for e in emitted) == finished.text == byte_bpe.decode(list(finished.token_ids),
                                                                               skip_special_tokens=True)
    assert [e.index for e in emitted] == list(range(len(emitted)))
    assert finished.new_tokens == len(emitted) and finished.target_forwards == len(emitted)
    for s in sampled:
        assert [st.stage for st in s.stages] == ["raw", "temperature", "top_k"]
        assert all(len(st.candidates) == 10 for st in s.stages)
        assert s.prob > 0


def test_stops_at_eos_and_includes_it(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=2)
    free = run_strategy(model, byte_bpe, [3, 4], SamplingParams(), True, 12, V - 1)[-1]
    assert isinstance(free, Finished) and free.finish_reason == "length" and free.new_tokens == 12
    eos = free.token_ids[5]  # make the 6th greedy token an end-of-sequence token
    first = free.token_ids.index(eos)
    stopped = run_strategy(model, byte_bpe, [3, 4], SamplingParams(), True, 12, eos)[-1]
    assert isinstance(stopped, Finished)
    assert stopped.finish_reason == "eos" and stopped.token_ids == free.token_ids[: first + 1]


def test_a_consumer_that_stops_stops_decoding(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=2)
    transcript = Transcript("greedy", [3, 4], Detokenizer(byte_bpe), frozenset({V - 1}), 50)
    stream = autoregressive(model, transcript, SamplingParams(), greedy=True)
    for event in stream:
        if isinstance(event, TokenEmitted) and event.index == 2:
            break
    stream.close()
    assert transcript.target_forwards == 3 and len(transcript.token_ids) == 3
    result = transcript.finished("cancelled")
    assert result.finish_reason == "cancelled" and result.new_tokens == 3


def test_cancel_request_ends_the_run_at_the_next_step(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=2)
    transcript = Transcript("greedy", [3, 4], Detokenizer(byte_bpe), frozenset({V - 1}), 50)
    events = []
    for event in autoregressive(model, transcript, SamplingParams(), greedy=True):
        events.append(event)
        if isinstance(event, TokenEmitted) and event.index == 4:
            transcript.request_cancel()
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert finished.finish_reason == "cancelled" and finished.new_tokens == 5


@pytest.mark.parametrize("seed", range(12))
def test_running_one_forward_ahead_changes_nothing_a_consumer_sees(byte_bpe: Any, seed: int) -> None:
    """The GPU's loop order (next pass queued before the step is read back), forced on the CPU."""
    arch, prompt, max_new = case(seed)
    model = tiny_model(arch, vocab_size=V, seed=seed)
    params = [SamplingParams(), SamplingParams(temperature=0.8, top_k=20, repetition_penalty=1.2)][seed % 2]
    eos = (seed * 31) % V  # some runs end at an EOS, where the pass queued ahead is discarded
    streams = []
    for ahead in (False, True):
        transcript = Transcript("sample", prompt, Detokenizer(byte_bpe), frozenset({eos}), max_new)
        gen = torch.Generator().manual_seed(seed)
        events = []
        for event in autoregressive(model, transcript, params, greedy=seed % 2 == 0, generator=gen,
                                    run_ahead=ahead):
            events.append(event)
            if isinstance(event, TokenEmitted) and event.index == 6 and seed % 3 == 0:
                transcript.request_cancel()
        streams.append([timeless(e) for e in events])
    assert streams[0] == streams[1]


def loaded(model: Any, tokenizer: Any, eos: int) -> LoadedModel:
    return LoadedModel(name="tiny", model=model, tokenizer=tokenizer, device=torch.device("cpu"),
                       dtype=torch.float32, eos_token_ids=frozenset({eos}), context_length=context_length(model),
                       chat=True)


def test_run_with_a_seed_is_reproducible_and_reports_it(byte_bpe: Any) -> None:
    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4), byte_bpe, 2)
    config = DecodeConfig(mode="sample", max_new_tokens=25, seed=1234)
    runs = [list(Run(lm, "Hello world", config).events()) for _ in range(2)]
    firsts, seconds = runs[0][-1], runs[1][-1]
    assert isinstance(firsts, Finished) and isinstance(seconds, Finished)
    assert firsts.token_ids == seconds.token_ids
    started = runs[0][0]
    assert isinstance(started, Started) and started.params["seed"] == 1234
    other = list(Run(lm, "Hello world", DecodeConfig(mode="sample", max_new_tokens=25, seed=99)).events())[-1]
    assert isinstance(other, Finished) and other.token_ids != firsts.token_ids


def test_time_the_caller_holds_a_run_is_not_decoding_time(byte_bpe: Any) -> None:
    """A paused, stepped or narrated run is held at a yield: its clock, tok/s included, leaves that time out."""
    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4), byte_bpe, 2)
    config = DecodeConfig(mode="greedy", max_new_tokens=6, use_chat=False)
    started = time.perf_counter()
    events = []
    for event in Run(lm, "Hello world", config).events():
        events.append(event)
        time.sleep(0.3)  # the consumer holds the run: 0.3 s at every event, 2.4 s in all
    wall = time.perf_counter() - started
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.new_tokens == 6 and wall > 2.1
    held = 0.3 * (len(events) - 1)  # the last sleep comes after Finished is built
    assert finished.elapsed_s < wall - held + 0.05
    assert finished.tokens_per_s == pytest.approx(6 / finished.elapsed_s)
    clocks = [e.elapsed_s for e in events if isinstance(e, TokenEmitted)]
    assert all(c is not None for c in clocks) and clocks == sorted(clocks)  # type: ignore[type-var]
    assert clocks[-1] is not None and clocks[-1] <= finished.elapsed_s


def test_run_applies_the_chat_template_unless_told_not_to(byte_bpe: Any) -> None:
    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4), byte_bpe, 2)
    chat = Run(lm, "Hi", DecodeConfig(max_new_tokens=1))
    plain = Run(lm, "Hi", DecodeConfig(max_new_tokens=1, use_chat=False))
    assert byte_bpe.decode(chat.prompt_ids) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert byte_bpe.decode(plain.prompt_ids) == "Hi"


def test_run_rejects_a_prompt_longer_than_the_context_and_caps_new_tokens(byte_bpe: Any) -> None:
    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4, max_positions=64), byte_bpe, 2)
    with pytest.raises(UsageError, match="reads at most 64 tokens"):
        Run(lm, "word " * 100, DecodeConfig(use_chat=False))
    run = Run(lm, "word " * 10, DecodeConfig(max_new_tokens=500, use_chat=False))
    assert run.transcript.max_new_tokens == 64 - len(run.prompt_ids) and run.notes
    # A branch whose decided tokens fill the rest of the context says so, counting them with the prompt.
    fill = DecodePath(kept=tuple(run.prompt_ids[:1]) * (64 - len(run.prompt_ids)))
    with pytest.raises(UsageError, match=rf"prompt \({len(run.prompt_ids)} tokens\) and the branch's "
                       rf"{64 - len(run.prompt_ids)} decided tokens make 64, but tiny reads at most 64"):
        Run(lm, "word " * 10, DecodeConfig(max_new_tokens=500, use_chat=False), path=fill)


def test_a_caller_that_stops_consuming_a_run_stops_its_strategy_at_once(byte_bpe: Any) -> None:
    """Closing Run.events() closes the strategy's generator there and then (its finally: blocks release the
    cache), not whenever the garbage collector gets to it."""
    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4), byte_bpe, 2)
    run = Run(lm, "Hello world", DecodeConfig(mode="greedy", max_new_tokens=20, use_chat=False))
    events = run.events()
    inner: list[Any] = []
    original = run._events

    def spy() -> Any:
        inner.append(original())
        return inner[-1]

    run._events = spy  # type: ignore[method-assign]
    for event in events:
        if isinstance(event, TokenEmitted) and event.index == 2:
            break
    events.close()
    assert inner and inner[0].gi_frame is None, "the strategy's generator is closed"
