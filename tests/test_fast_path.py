"""The fast path (static KV cache, compiled steps, padded verification) gives the plain path's tokens and events.

Most tests keep the static cache and the padding but run it eagerly
(``COMPILED_UP_TO = 0``): that is where the fast path's own logic lives
(positions, rollback by moving the cache's end, pads masked and forgotten), and
it runs in milliseconds. Two tests compile for real, on the CPU, as the GPU
machine would (there with CUDA graphs), once for a step and once for a
verification; each compile takes 15-25 s here.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers.cache_utils import StaticLayer

from decode_tui.core.drafting.model_drafter import ModelDrafter
from decode_tui.core.drafting.prompt_lookup import PromptLookup
from decode_tui.core.execution import forward as forward_module
from decode_tui.core.execution.forward import StaticKV, forward, new_cache, rollback
from decode_tui.core.params import SamplingParams
from decode_tui.core.record.detokenize import Detokenizer
from decode_tui.core.record.events import DraftProposed, DraftVerified, Event, Finished, TokenEmitted, TokenSampled
from decode_tui.core.record.transcript import Transcript
from decode_tui.core.strategies.autoregressive import autoregressive
from decode_tui.core.strategies.speculative import speculative

from .conftest import tiny_model
from .test_speculative import repetitive_prompt

V = 420
ARCHS = ["llama", "qwen2", "gpt2", "phi3"]


@pytest.fixture
def eager(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forward_module, "COMPILED_UP_TO", 0)


def sliding_phi3(seed: int) -> Any:
    """Phi-3 with a window of 8 tokens: drafts and rollbacks reach past what slides out."""
    from transformers import AutoModelForCausalLM, Phi3Config

    config = Phi3Config(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=4, max_position_embeddings=512, sliding_window=8, eos_token_id=V - 1,
                        bos_token_id=0, pad_token_id=0, initializer_range=0.2)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def transcript(tokenizer: Any, prompt: list[int], max_new: int) -> Transcript:
    return Transcript("greedy", prompt, Detokenizer(tokenizer), frozenset({V - 1}), max_new)


def plain_and_fast(fn: Any) -> tuple[list[Event], list[Event]]:
    return fn(False), fn(True)


def assert_same_events(plain: list[Event], fast: list[Event]) -> None:
    """Same kinds, same tokens and verdicts; probabilities equal to float32 rounding."""
    assert [type(e) for e in plain] == [type(e) for e in fast]
    for a, b in zip(plain, fast, strict=True):
        if isinstance(a, TokenEmitted):
            assert isinstance(b, TokenEmitted) and (a.token_id, a.source) == (b.token_id, b.source)
        elif isinstance(a, Finished):
            assert isinstance(b, Finished) and (a.token_ids, a.finish_reason) == (b.token_ids, b.finish_reason)
        elif isinstance(a, TokenSampled):
            assert isinstance(b, TokenSampled)
            assert a.token_id == b.token_id
            for sa, sb in zip(a.stages, b.stages, strict=True):
                assert [c.token_id for c in sa.candidates] == [c.token_id for c in sb.candidates]
                assert [c.prob for c in sa.candidates] == pytest.approx([c.prob for c in sb.candidates], abs=1e-5)
        elif isinstance(a, DraftVerified):
            assert isinstance(b, DraftVerified)
            assert (a.accepted, a.extra_token_id, a.extra_kind) == (b.accepted, b.extra_token_id, b.extra_kind)
            assert [v.p for v in a.verdicts] == pytest.approx([v.p for v in b.verdicts], abs=1e-5)
        elif isinstance(a, DraftProposed):
            assert isinstance(b, DraftProposed) and a.token_ids == b.token_ids


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sample"])
def test_steps_on_a_static_cache_equal_the_plain_path(byte_bpe: Any, eager: None, seed: int, sample: bool) -> None:
    model = sliding_phi3(seed) if seed == 7 else tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed)
    prompt = repetitive_prompt(seed, 1 + 3 * seed)
    params = SamplingParams(repetition_penalty=1.2, top_k=20) if seed % 2 else SamplingParams()
    plain, fast = plain_and_fast(lambda f: list(autoregressive(
        model, transcript(byte_bpe, prompt, 24), params, greedy=not sample,
        generator=torch.Generator().manual_seed(seed), fast=f)))
    assert_same_events(plain, fast)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("drafter", ["lookup", "model"])
@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sample"])
def test_verification_on_a_static_cache_equals_the_plain_path(byte_bpe: Any, eager: None, seed: int, drafter: str,
                                                              sample: bool) -> None:
    """Padded to the longest draft, rolled back by moving the cache's end: the same rounds, the same tokens."""
    model = sliding_phi3(seed) if seed == 7 else tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed)
    prompt = repetitive_prompt(seed, 4 + seed)

    def go(fast: bool) -> list[Event]:
        proposer = PromptLookup(3, 6) if drafter == "lookup" else \
            ModelDrafter(tiny_model("llama", vocab_size=V, seed=seed + 50), V)
        return list(speculative(model, transcript(byte_bpe, prompt, 2 + 5 * seed), proposer,
                                SamplingParams(top_k=30) if sample else SamplingParams(), greedy=not sample,
                                num_draft_tokens=1 + seed % 6, generator=torch.Generator().manual_seed(seed),
                                fast=fast))

    plain, fast = plain_and_fast(go)
    assert_same_events(plain, fast)
    if not sample:
        greedy = list(autoregressive(model, transcript(byte_bpe, prompt, 2 + 5 * seed), SamplingParams(),
                                     greedy=True))[-1]
        assert isinstance(greedy, Finished) and isinstance(fast[-1], Finished)
        assert fast[-1].token_ids == greedy.token_ids


@pytest.mark.parametrize("sliding", [False, True], ids=["llama", "phi3-window-8"])
def test_a_rolled_back_static_cache_gives_a_fresh_prefills_logits(eager: None, sliding: bool) -> None:
    """A fresh prefill and a cache rolled back past rejected drafts attend over the same keys and values, so
    the logits may differ only by the order float32 sums run in: the static cache's attention spans all 256
    slots (the stale ones masked), the fresh one 23. Logits here are O(1), so a float32 reduction in another
    order moves them by ~1e-6 (1.07e-5 was seen once on 1260 elements); 1e-4 allows that and would still
    catch a stale key or a wrong position, which move them by 1e-2 or more (checked below with a cache
    that is *not* rolled back)."""
    model = sliding_phi3(0) if sliding else tiny_model("llama", vocab_size=V, seed=0)
    draw = torch.Generator().manual_seed(17)  # seeded: the same inputs on every run
    context, rejected, nxt = (torch.randint(1, V, (1, n), generator=draw) for n in (20, 7, 3))
    with torch.inference_mode():
        cache = new_cache(model, rollback=True, fast=True, max_len=40)
        assert isinstance(cache, StaticKV)
        assert cache.max_len == 256, "rounded up, so runs of similar length share graphs"
        forward(model, context, cache)
        forward(model, rejected, cache, keep=7)  # written, then forgotten
        rollback(cache, 20)
        after = forward(model, nxt, cache, keep=3)
        fresh = forward(model, torch.cat([context, nxt], 1), new_cache(model), keep=3)
        stale = new_cache(model, rollback=True, fast=True, max_len=40)
        forward(model, context, stale)
        forward(model, rejected, stale, keep=7)  # never rolled back: nxt sees the rejected drafts
        wrong = forward(model, nxt, stale, keep=3)
    torch.testing.assert_close(after, fresh, atol=1e-4, rtol=0)
    assert (wrong - fresh).abs().max() > 1e-2, "the tolerance would hide a cache that was not rolled back"


def test_a_static_cache_needs_its_length() -> None:
    with pytest.raises(ValueError, match="max_len"):
        new_cache(tiny_model("llama", vocab_size=V), fast=True)


def test_compiled_steps_and_verifications_give_the_same_tokens_with_one_graph_each(byte_bpe: Any) -> None:
    """Really compiled (inductor on the CPU). Greedy: one graph for the step; PLD: one for the padded
    verification, whatever each round proposed."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = tiny_model("llama", vocab_size=V, seed=3)
    prompt = repetitive_prompt(3, 14)
    plain, fast = plain_and_fast(lambda f: list(autoregressive(model, transcript(byte_bpe, prompt, 20),
                                                               SamplingParams(), greedy=True, fast=f)))
    assert_same_events(plain, fast)
    assert counters["stats"]["unique_graphs"] >= 1, "the step was not compiled"
    graphs = counters["stats"]["unique_graphs"]
    list(autoregressive(model, transcript(byte_bpe, prompt[:9], 20), SamplingParams(), greedy=True, fast=True))
    assert counters["stats"]["unique_graphs"] == graphs, "a second run, another prompt length: no recompile"

    def lookup(fast: bool) -> list[Event]:
        return list(speculative(model, transcript(byte_bpe, prompt, 30), PromptLookup(3, 6), SamplingParams(),
                                greedy=True, num_draft_tokens=6, fast=fast))

    plain, fast = plain_and_fast(lookup)
    assert_same_events(plain, fast)
    lengths = {len(e.token_ids) for e in fast if isinstance(e, DraftProposed)}
    assert len(lengths) > 1, "the rounds proposed drafts of different lengths"
    assert counters["stats"]["unique_graphs"] - graphs <= 2, "one verification graph, not one per draft length"
    torch._dynamo.reset()


@pytest.mark.parametrize("mode", ["greedy", "sample", "pld", "beam"])
def test_a_run_takes_the_fast_path_from_its_config_and_beam_search_says_it_does_not(
        byte_bpe: Any, eager: None, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    from decode_tui.core.params import DecodeConfig
    from decode_tui.core.run import Run

    from .test_autoregressive import loaded

    caches: list[Any] = []
    original = forward_module.StaticKV.__init__

    def spy(self: StaticKV, *args: Any, **kwargs: Any) -> None:
        caches.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(forward_module.StaticKV, "__init__", spy)
    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4), byte_bpe, 2)
    runs = {fast: Run(lm, "ab ab ab ab", DecodeConfig(mode=mode, max_new_tokens=12, seed=5, fast=fast))
            for fast in (False, True)}
    plain, fast = (list(run.events()) for run in runs.values())
    assert isinstance(plain[-1], Finished) and isinstance(fast[-1], Finished)
    assert plain[-1].token_ids == fast[-1].token_ids
    if mode == "beam":
        assert not caches and any("plain path" in note for note in runs[True].notes)
    else:
        assert caches and not runs[True].notes


def hf_static(model: Any) -> Any:
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=256)


def test_a_static_caches_layers_share_one_end_and_write_what_transformers_static_cache_writes(eager: None) -> None:
    """Steps, a verification, a rollback and transformers' own crop, pass by pass on four layers: the same
    logits and the same keys and values as transformers' StaticCache, whose layers each move an end of their own;
    ours move one end, once a pass."""
    model = tiny_model("llama", vocab_size=V, seed=2, num_hidden_layers=4)
    draw = torch.Generator().manual_seed(5)
    ours, theirs = new_cache(model, graphs=True, max_len=40), hf_static(model)
    assert isinstance(ours, StaticKV) and ours.max_len == 256

    def both(width: int) -> None:
        ids = torch.randint(1, V, (1, width), generator=draw)
        with torch.inference_mode():
            a, b = (forward(model, ids, cache, keep=width) for cache in (ours, theirs))
        assert torch.equal(a, b)

    def set_end(length: int) -> None:
        rollback(ours, length)
        for layer in theirs.layers:
            assert isinstance(layer, StaticLayer)
            layer.cumulative_length.fill_(length)

    both(9)  # the prompt
    both(1)  # a step
    both(5)  # a verification of four drafts and the pending token
    set_end(12)  # three of them rejected
    both(1)
    ours.crop(-2)  # transformers' crop, which calls every layer's: the shared end moves once
    theirs.crop(-2)
    both(2)
    assert int(ours.get_seq_length()) == int(theirs.get_seq_length()) == 13
    ends = {id(layer.cumulative_length) for layer in ours.layers if isinstance(layer, StaticLayer)}
    assert len(ends) == 1, "one end for every layer"
    for mine, hf in zip(ours.layers, theirs.layers, strict=True):
        assert isinstance(mine, StaticLayer) and isinstance(hf, StaticLayer)
        assert mine.keys is not None and mine.values is not None and hf.keys is not None and hf.values is not None
        assert torch.equal(mine.keys[:, :, :13], hf.keys[:, :, :13])
        assert torch.equal(mine.values[:, :, :13], hf.values[:, :, :13])


def test_a_step_on_the_static_cache_moves_its_end_once_not_once_a_layer(eager: None) -> None:
    """transformers' static layer builds its positions and moves its end in every layer: three kernels a layer on
    a GPU, where a small model's step costs about a launch per kernel. Counted with a dispatch mode, a step on our
    cache launches 3 * (layers - 1) fewer ops than on transformers' StaticCache (the control)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):  # type: ignore[no-untyped-call]
        ops = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.ops += 1
            return func(*args, **(kwargs or {}))

    layers = 5
    model = tiny_model("llama", vocab_size=V, seed=1, num_hidden_layers=layers)
    counts = []
    for cache in (new_cache(model, graphs=True, max_len=40), hf_static(model)):
        with torch.inference_mode():  # the model called directly: only the caches differ
            model(input_ids=torch.tensor([[3, 4, 5]]), cache=cache, use_cache=True)
            with Count() as count:  # type: ignore[no-untyped-call]
                model(input_ids=torch.tensor([[6]]), cache=cache, use_cache=True)
        counts.append(count.ops)
    assert counts[1] - counts[0] == 3 * (layers - 1)


def test_one_host_copy_keeps_every_value_of_its_mixed_inputs_exactly() -> None:
    """Token ids (long), scores (float32, bfloat16) and flags (bool) go to the host in one float64 copy: every
    id below 2**53 exactly, every float unchanged, in the order given."""
    from decode_tui.core.execution.transfers import to_host

    ids = torch.tensor([[0, 151_643], [2**40 + 1, 7]])
    scores = torch.tensor([-1.0e9, 0.1, float("-inf"), 3.4e38], dtype=torch.float32)
    half = torch.tensor([0.3333], dtype=torch.bfloat16)
    flags = torch.tensor([True, False])
    host = to_host([ids, scores, half, flags, torch.tensor(5)])
    assert host == [0, 151_643, 2**40 + 1, 7, *scores.double().tolist(), float(half.double()), 1.0, 0.0, 5.0]


def test_ids_go_to_the_cpu_as_torch_tensor_would_make_them() -> None:
    """``forward.on_device`` off CUDA is torch.tensor itself (on CUDA it copies from pinned memory, in test_gpu)."""
    from decode_tui.core.execution.transfers import on_device

    for values in ([], [3], [[1, 2, 3], [4, 5, 6]]):
        got = on_device(values, torch.device("cpu"))
        assert got.dtype == torch.long and torch.equal(got, torch.tensor(values, dtype=torch.long))
