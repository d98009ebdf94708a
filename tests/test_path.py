"""Every mode from a path it did not choose (a branch), and how likely every emitted token was.

Against transformers: decoding from a forced path equals ``generate`` on prompt + path (greedy, greedy
speculative and prompt lookup, beam search, sampling under a seed), and every emitted token's ``logprob``,
``entropy`` and ``rank`` are those of the log-softmax of the model's raw logits at its position.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from decode_tui.core.drafting.model_drafter import ModelDrafter
from decode_tui.core.drafting.prompt_lookup import PromptLookup
from decode_tui.core.errors import UsageError
from decode_tui.core.params import BeamParams, DecodeConfig, SamplingParams
from decode_tui.core.record.detokenize import Detokenizer
from decode_tui.core.record.events import Branched, Event, Finished, Started, TokenEmitted
from decode_tui.core.record.path import Path
from decode_tui.core.record.transcript import TokenStats, Transcript
from decode_tui.core.run import Run
from decode_tui.core.strategies.autoregressive import autoregressive
from decode_tui.core.strategies.beam import beam_search
from decode_tui.core.strategies.speculative import speculative

from .conftest import tiny_model
from .test_autoregressive import loaded

V = 420
EOS = V - 1
ARCHS = ["llama", "qwen2", "gpt2", "phi3"]

Strategy = Callable[[Any, Any, list[int], int, Path | None, int], list[Event]]


def _transcript(tokenizer: Any, prompt: list[int], max_new: int) -> Transcript:
    return Transcript("greedy", prompt, Detokenizer(tokenizer), frozenset({EOS}), max_new)


def _auto(greedy: bool, params: SamplingParams | None = None) -> Strategy:
    def go(model: Any, tok: Any, prompt: list[int], max_new: int, path: Path | None, seed: int) -> list[Event]:
        return list(autoregressive(model, _transcript(tok, prompt, max_new), params or SamplingParams(),
                                   greedy=greedy, generator=torch.Generator().manual_seed(seed), path=path))
    return go


def _spec(drafter: str, greedy: bool = True) -> Strategy:
    def go(model: Any, tok: Any, prompt: list[int], max_new: int, path: Path | None, seed: int) -> list[Event]:
        made = (PromptLookup(2, 3, frozenset({EOS})) if drafter == "lookup"
                else ModelDrafter(tiny_model("llama", vocab_size=V, seed=seed + 7), V))
        return list(speculative(model, _transcript(tok, prompt, max_new), made, SamplingParams(), greedy=greedy,
                                num_draft_tokens=3, generator=torch.Generator().manual_seed(seed), path=path))
    return go


def _beam(num_beams: int, sample: bool = False) -> Strategy:
    def go(model: Any, tok: Any, prompt: list[int], max_new: int, path: Path | None, seed: int) -> list[Event]:
        return list(beam_search(model, _transcript(tok, prompt, max_new), BeamParams(num_beams=num_beams),
                                SamplingParams(), do_sample=sample, generator=torch.Generator().manual_seed(seed),
                                decode=tok.decode, path=path))
    return go


MODES: dict[str, Strategy] = {
    "greedy": _auto(True),
    "greedy-penalty": _auto(True, SamplingParams(repetition_penalty=1.4)),
    "sample": _auto(False, SamplingParams(temperature=0.8, top_k=30)),
    "pld": _spec("lookup"),
    "speculative": _spec("model"),
    "speculative-sampling": _spec("model", greedy=False),
    "pld-sampling": _spec("lookup", greedy=False),
    "beam": _beam(3),
    "beam-one": _beam(1),
    "beam-sampling": _beam(2, sample=True),
}


def prompt_of(seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(1, V - 2, (5,), generator=g).tolist()
    return (base * 3)[: 4 + seed % 9]


def emitted(events: list[Event]) -> list[TokenEmitted]:
    return [e for e in events if isinstance(e, TokenEmitted)]


def raw_log_softmax(model: Any, ids: list[int]) -> torch.Tensor:
    """The log-softmax of the model's raw logits over ``ids`` in one plain forward ([T, V])."""
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("seed", range(4))
def test_every_emitted_token_carries_its_raw_log_probability_entropy_and_rank(byte_bpe: Any, mode: str,
                                                                              seed: int) -> None:
    model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed)
    prompt = prompt_of(seed)
    events = MODES[mode](model, byte_bpe, prompt, 12, None, seed)
    finished = events[-1]
    assert isinstance(finished, Finished)
    tokens = emitted(events)
    assert [t.token_id for t in tokens] == list(finished.token_ids)
    logp = raw_log_softmax(model, prompt + list(finished.token_ids))
    for t in tokens:
        row = logp[len(prompt) - 1 + t.index]  # the position that predicts this token
        assert t.logprob == pytest.approx(float(row[t.token_id]), abs=1e-4), (mode, t.index)
        assert t.entropy == pytest.approx(float(-(row.exp() * row).sum()), abs=1e-4)
        assert t.rank == 1 + int((row > row[t.token_id]).sum())
    total = sum(t.logprob or 0.0 for t in tokens)
    assert finished.sum_logprob == pytest.approx(total, abs=1e-6)
    assert finished.mean_logprob == pytest.approx(total / len(tokens), abs=1e-6)
    assert finished.perplexity == pytest.approx(math.exp(-total / len(tokens)), rel=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_greedy_log_probabilities_equal_generates_own_raw_logits(byte_bpe: Any, seed: int) -> None:
    model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed)
    prompt = prompt_of(seed)
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         do_sample=False, max_new_tokens=10, eos_token_id=EOS, pad_token_id=0,
                         return_dict_in_generate=True, output_logits=True)
    tokens = emitted(MODES["greedy"](model, byte_bpe, prompt, 10, None, seed))
    assert [t.token_id for t in tokens] == out.sequences[0, len(prompt):].tolist()
    for t, logits in zip(tokens, out.logits, strict=True):
        assert t.logprob == pytest.approx(float(torch.log_softmax(logits[0].float(), -1)[t.token_id]), abs=1e-4)


def hf_greedy(model: Any, context: list[int], max_new: int) -> list[int]:
    out = model.generate(torch.tensor([context]), attention_mask=torch.ones(1, len(context), dtype=torch.long),
                         do_sample=False, max_new_tokens=max_new, eos_token_id=EOS, pad_token_id=0)
    return [int(t) for t in out[0, len(context):]]


def forced_path(model: Any, prompt: list[int], seed: int, kept: int = 3, forced: int = 2) -> Path:
    """A path that leaves the model's own greedy choice: its first ``kept`` greedy tokens, then ``forced``
    tokens the model would not have picked (its runner-up at each forced position)."""
    ids = list(prompt) + hf_greedy(model, prompt, kept)[:kept]
    forced_ids = []
    for _ in range(forced):
        row = raw_log_softmax(model, ids)[-1]
        runner_up = int(torch.topk(row, 2).indices[1])
        forced_ids.append(runner_up)
        ids.append(runner_up)
    return Path(kept=tuple(ids[len(prompt) : len(prompt) + kept]), forced=tuple(forced_ids), forced_text="x")


@pytest.mark.parametrize("mode", ["greedy", "greedy-penalty", "pld", "speculative", "beam-one"])
@pytest.mark.parametrize("seed", range(6))
def test_greedy_modes_from_a_forced_path_equal_generate_on_prompt_plus_path(byte_bpe: Any, mode: str,
                                                                           seed: int) -> None:
    model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed)
    prompt = prompt_of(seed)
    path = forced_path(model, prompt, seed)
    max_new = 14
    events = MODES[mode](model, byte_bpe, prompt, max_new, path, seed)
    tokens = emitted(events)
    n = len(path.ids)
    assert [t.token_id for t in tokens[:n]] == list(path.ids)
    assert [t.source for t in tokens[:n]] == ["target"] * len(path.kept) + ["forced"] * len(path.forced)
    context = prompt + list(path.ids)
    if mode == "greedy-penalty":
        out = model.generate(torch.tensor([context]), attention_mask=torch.ones(1, len(context), dtype=torch.long),
                             do_sample=False, max_new_tokens=max_new - n, eos_token_id=EOS, pad_token_id=0,
                             repetition_penalty=1.4)
        expected = out[0, len(context):].tolist()
    else:
        expected = hf_greedy(model, context, max_new - n)
    assert [t.token_id for t in tokens[n:]] == expected
    assert all(t.source != "forced" for t in tokens[n:])
    # A forced token is the model's runner-up: its rank says so.
    assert [t.rank for t in tokens[len(path.kept) : n]] == [2] * len(path.forced)


@pytest.mark.parametrize("seed", range(4))
def test_beam_search_from_a_forced_path_equals_generate_on_prompt_plus_path(byte_bpe: Any, seed: int) -> None:
    model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed)
    prompt = prompt_of(seed)
    path = forced_path(model, prompt, seed)
    context = prompt + list(path.ids)
    events = MODES["beam"](model, byte_bpe, prompt, 12, path, seed)
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.hypotheses
    out = model.generate(torch.tensor([context]), attention_mask=torch.ones(1, len(context), dtype=torch.long),
                         num_beams=3, max_new_tokens=12 - len(path.ids), eos_token_id=EOS, pad_token_id=0,
                         do_sample=False, return_dict_in_generate=True, output_scores=True)
    best = list(finished.hypotheses[0].token_ids)
    theirs = out.sequences[0, len(context):].tolist()
    assert theirs[: len(best)] == best and all(t == EOS for t in theirs[len(best):])
    assert finished.hypotheses[0].score == pytest.approx(float(out.sequences_scores[0]), abs=1e-4)
    assert list(finished.token_ids) == list(path.ids) + best


@pytest.mark.parametrize("seed", range(4))
def test_sampling_from_a_forced_path_is_reproducible_and_equals_generate_under_the_seed(byte_bpe: Any,
                                                                                         seed: int) -> None:
    model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed)
    prompt = prompt_of(seed)
    path = forced_path(model, prompt, seed)
    context = prompt + list(path.ids)
    params = SamplingParams(temperature=0.8, top_k=30)
    runs = [MODES["sample"](model, byte_bpe, prompt, 14, path, 100 + seed) for _ in range(2)]
    first, second = (r[-1] for r in runs)
    assert isinstance(first, Finished) and isinstance(second, Finished)
    assert first.token_ids == second.token_ids
    torch.manual_seed(100 + seed)
    out = model.generate(torch.tensor([context]), attention_mask=torch.ones(1, len(context), dtype=torch.long),
                         do_sample=True, max_new_tokens=14 - len(path.ids), eos_token_id=EOS, pad_token_id=0,
                         temperature=params.temperature, top_k=params.top_k)
    assert list(first.token_ids[len(path.ids):]) == out[0, len(context):].tolist()


@pytest.mark.parametrize("mode", list(MODES))
def test_a_path_that_ends_in_an_eos_ends_the_run_there(byte_bpe: Any, mode: str) -> None:
    model = tiny_model("llama", vocab_size=V, seed=3)
    path = Path(kept=(5, 6), forced=(EOS, 9))  # what is forced after the EOS never reaches the text
    events = MODES[mode](model, byte_bpe, prompt_of(3), 10, path, 0)
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert finished.token_ids == (5, 6, EOS) and finished.finish_reason == "eos"


def test_a_run_from_a_path_says_it_branched_and_refuses_what_cannot_be_a_path(byte_bpe: Any) -> None:
    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4), byte_bpe, 2)
    config = DecodeConfig(mode="greedy", max_new_tokens=12)
    path = Path(kept=(40, 41), forced=(42,), forced_text="*", branch=2, parent=1)
    events = list(Run(lm, "Hello world", config, path=path).events())
    assert isinstance(events[0], Started)
    assert events[1] == Branched(branch=2, parent=1, position=2, forced_token_ids=(42,), forced_text="*")
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.token_ids[:3] == (40, 41, 42)
    assert "".join(e.text for e in emitted(events)) == finished.text
    with pytest.raises(UsageError, match="vocabulary"):
        Run(lm, "Hello world", config, path=Path(forced=(len(byte_bpe) + 5,)))
    with pytest.raises(UsageError, match="max-new-tokens"):
        Run(lm, "Hello world", config, path=Path(forced=tuple(range(40, 52))))


def _widths(model: Any) -> list[int]:
    """Record the width of every forward pass ``model`` makes from now on (its first is the prefill)."""
    widths: list[int] = []
    original = model.forward

    def counting(*args: Any, **kwargs: Any) -> Any:
        ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        widths.append(int(ids.shape[1]))
        return original(*args, **kwargs)

    model.forward = counting
    return widths


@pytest.mark.parametrize("picked", [False, True], ids=["typed", "picked"])
@pytest.mark.parametrize("mode", ["greedy", "pld", "speculative"])
@pytest.mark.parametrize("seed", range(3))
def test_a_branch_reuses_its_parents_cache_and_decodes_what_generate_does(byte_bpe: Any, mode: str,
                                                                          seed: int, picked: bool) -> None:
    """A rewind crops the parent's cache where they part: the branch feeds the last kept token and the forced
    one (only the forced one when its figures came with it: a candidate picked from the parent's list), never
    the prompt again, and still decodes what generate does on prompt + path."""
    model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed)
    prompt = prompt_of(seed) * 3  # a longer prompt, so prefilling it again would show
    parent = emitted(MODES[mode](model, byte_bpe, prompt, 12, None, seed))
    at = 5
    row = raw_log_softmax(model, prompt + [t.token_id for t in parent[:at]])[-1]
    forced = int(torch.topk(row, 2).indices[1])
    path = Path(kept=tuple(t.token_id for t in parent[:at]), kept_sources=tuple(t.source for t in parent[:at]),
                kept_stats=tuple(TokenStats.of(t) for t in parent[:at]), forced=(forced,),
                forced_stats=(TokenStats(float(row[forced]), float(-(row.exp() * row).sum()), 2),) if picked else ())
    widths = _widths(model)
    tokens = emitted(MODES[mode](model, byte_bpe, prompt, 12, path, seed))
    assert widths[0] == (1 if picked else 2), "the branch feeds what the cache lacks, never the prompt again"
    context = prompt + list(path.ids)
    assert [t.token_id for t in tokens[at + 1 :]] == hf_greedy(model, context, 12 - at - 1)
    assert tokens[at].logprob == pytest.approx(float(row[forced]), abs=1e-4) and tokens[at].rank == 2
    assert [t.logprob for t in tokens[:at]] == [t.logprob for t in parent[:at]]


def test_a_run_that_is_no_branch_prefills_its_whole_prompt(byte_bpe: Any) -> None:
    """Only a branch reuses a kept cache: a restart (or a benchmark's timed run) prefills as it always did."""
    model = tiny_model("llama", vocab_size=V, seed=1)
    prompt = prompt_of(1) * 2
    MODES["greedy"](model, byte_bpe, prompt, 8, None, 0)
    widths = _widths(model)
    MODES["greedy"](model, byte_bpe, prompt, 8, None, 0)
    assert widths[0] == len(prompt)
