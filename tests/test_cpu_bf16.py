"""A bfloat16 model made ready for a CPU with bfloat16 products (AMX or AVX512-BF16; core/model/cpu_bf16.py): its
packed products give every row the one-row product's bits, its attention gives a chain's and a token tree's nodes
their one-token steps' bits (with a negative control: transformers' softmax does not), and greedy drafting on such a
model is its greedy token for token. The packed products need oneDNN (any x86 CPU runs them, with bfloat16 in
hardware or not); the attention is plain torch."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
import torch
from torch import nn

from decode_tui.core.drafting.prompt_lookup import PromptLookup
from decode_tui.core.drafting.recycling import RecycledMatrix, RecyclingDrafter
from decode_tui.core.errors import UsageError
from decode_tui.core.model import cpu_bf16, loading
from decode_tui.core.record.events import Finished

from .conftest import tiny_model
from .test_speculative import ARCHS, V, repetitive_prompt, run

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(),  # type: ignore[no-untyped-call]
                                  reason="oneDNN is not in this torch")


def packed(out_features: int, in_features: int, seed: int = 0) -> cpu_bf16.PackedLinear:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(in_features, out_features, dtype=torch.bfloat16))
    cpu_bf16.prepare(model)
    layer = model[0]
    assert isinstance(layer, cpu_bf16.PackedLinear)
    return layer


@needs_onednn
@pytest.mark.parametrize("inputs", [96, 1536, 2560])
def test_every_row_of_a_packed_product_is_the_one_row_products_bits(inputs: int) -> None:
    """At every row count, every row gets the one-row product's bits; past :data:`~cpu_bf16.INPUTS` inputs (an MLP's
    down projection: AVX-512's kernel sums 1536 inputs otherwise for 2 rows than for 1) too."""
    layer = packed(192, inputs)
    x = torch.randn(3, 70, inputs, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)  # [B, N, in]
    with torch.inference_mode():
        one_by_one = torch.stack([torch.cat([layer(x[b, i : i + 1]) for i in range(70)]) for b in range(3)])
        for width in (*range(2, 17), 24, cpu_bf16.ROWS, cpu_bf16.ROWS + 1, 70):
            assert torch.equal(layer(x[:, :width]), one_by_one[:, :width]), width
        plain = nn.functional.linear(x.float(), layer.weight.float(), layer.bias.float())
    assert len(layer.packed) == -(-inputs // cpu_bf16.INPUTS)
    assert torch.allclose(one_by_one.float(), plain, atol=0.05, rtol=0.02), "the same product as a plain one"


@needs_onednn
def test_a_copy_of_a_prepared_model_has_plain_layers_with_the_same_weights() -> None:
    """A copy is made to change its weights (a draft made from the target), so its layers must read them."""
    layer = packed(16, 8)
    clone = copy.deepcopy(nn.Sequential(layer))[0]
    assert type(clone) is nn.Linear and not hasattr(clone, "packed")
    assert torch.equal(clone.weight, layer.weight) and clone.weight is not layer.weight


def steps_and_tree(prefix: int, attend: Any, seed: int = 0) -> tuple[list[torch.Tensor], torch.Tensor]:
    """One attention over a token tree of 10 nodes after ``prefix`` keys, and each node's one-token step: its query
    against the prefix and its ancestors only, in the cache order a step would have. SmolLM2-135M's heads."""
    parents = [-1, 0, 0, 1, 2, 2, 3, 5, 5, 7]
    n, heads, kv_heads, d = len(parents), 9, 3, 64
    g = torch.Generator().manual_seed(prefix + 1000 * seed)
    q = torch.randn(1, heads, n, d, generator=g).to(torch.bfloat16)  # [B, H, T, D]
    k, v = (torch.randn(1, kv_heads, prefix + n, d, generator=g).to(torch.bfloat16) for _ in range(2))

    def ancestors(i: int) -> list[int]:
        return [] if i < 0 else [*ancestors(parents[i]), i]

    mask = torch.full((1, 1, n, prefix + n), float("-inf"), dtype=torch.bfloat16)
    mask[..., :prefix] = 0
    for i in range(n):
        mask[0, 0, i, [prefix + a for a in ancestors(i)]] = 0
    layer = nn.Module()
    tree = attend(layer, q, k, v, mask, 0.25)[0]  # [B, T, H, D]
    steps = []
    for i in range(n):
        keys = list(range(prefix)) + [prefix + a for a in ancestors(i)]
        steps.append(attend(layer, q[:, :, i : i + 1], k[:, :, keys], v[:, :, keys], None, 0.25)[0][:, 0])
    return steps, tree


def sdpa(module: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
         scaling: float) -> tuple[torch.Tensor, None]:
    """transformers' default attention on a CPU, for the negative control."""
    out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2), None


@pytest.mark.parametrize("prefix", [5, 60, 300, 700])
def test_a_tree_node_gets_its_steps_bits_from_the_attention(prefix: int) -> None:
    """Several trees, since a float32 attention of matrix products missed a node's bits in about one case of eight
    on the AMD CPU of 2026-12-06 (its kernels order a sum by the rows and keys of the product)."""
    for seed in range(3, -1, -1):
        steps, tree = steps_and_tree(prefix, cpu_bf16.attention, seed)
        assert all(torch.equal(step, tree[:, i]) for i, step in enumerate(steps)), seed
    control_steps, control = steps_and_tree(prefix, sdpa)  # seed 0's, as tree is
    assert all(torch.allclose(s.float(), tree[:, i].float(), atol=0.02) for i, s in enumerate(control_steps)), \
        "the same attention as torch's"
    if prefix == 60:  # the negative control: torch's softmax sums over keys in vector lanes, by position
        assert not all(torch.equal(step, control[:, i]) for i, step in enumerate(control_steps))


def prepared(seed: int) -> Any:
    model = tiny_model(ARCHS[seed % len(ARCHS)], vocab_size=V, seed=seed).to(torch.bfloat16)
    cpu_bf16.prepare(model)
    assert model.config._attn_implementation == cpu_bf16.EXACT_ATTENTION
    return model


def test_a_model_off_sdpa_keeps_its_own_attention() -> None:
    """Gemma 2 (capped logits) and gpt-oss (sinks) cannot run SDPA: they load on their own eager attention, which is
    more than a plain softmax, and keep it."""
    model = tiny_model("llama", vocab_size=V).to(torch.bfloat16)
    model.set_attn_implementation("eager")
    cpu_bf16.prepare(model)
    assert model.config._attn_implementation == "eager"


@needs_onednn
@pytest.mark.parametrize("seed", range(4))
def test_greedy_drafting_on_a_prepared_model_is_its_greedy(byte_bpe: Any, seed: int) -> None:
    """A chain (prompt lookup on a repetitive prompt) and token trees (recycling, warm the second time) verified on
    the prepared model give ``generate``'s greedy text on the same model, token for token."""
    model = prepared(seed)  # a Llama, a Qwen2, a Phi-3 and a GPT-2
    prompt, max_new = repetitive_prompt(seed, 12), 32
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False, eos_token_id=V - 1,
                             pad_token_id=0)[0, len(prompt) :].tolist()
    expected = out[: out.index(V - 1) + 1] if V - 1 in out else out
    recycling = RecyclingDrafter(RecycledMatrix(V, 8), 5, 8, frozenset({V - 1}))
    forwards = []
    for drafter in (PromptLookup(3, 4, frozenset({V - 1})), recycling, recycling):
        result = run(model, byte_bpe, drafter, prompt, max_new, k=5)[-1]
        assert isinstance(result, Finished) and list(result.token_ids) == expected, type(drafter).__name__
        forwards.append(result.target_forwards)
    assert forwards[2] < len(expected), "the warm trees kept drafted tokens"


def test_auto_picks_bfloat16_on_a_cpu_with_bfloat16_products(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    monkeypatch.setattr(cpu_bf16, "bf16_products", lambda: True)
    assert loading.resolve_dtype("auto", cpu) == torch.bfloat16
    monkeypatch.setattr(cpu_bf16, "bf16_products", lambda: False)
    assert loading.resolve_dtype("auto", cpu) == torch.float32
    assert loading.resolve_dtype("float32", cpu) == torch.float32


def test_compiled_steps_on_a_cpu_load_float32_and_refuse_a_narrower_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--fast`` compiles the steps, and on a CPU only float32's compiled steps keep their bits at every width: in
    bfloat16 Inductor cannot lower the packed products, and with them made opaque to it, the embedded model's
    compiled greedy and prompt lookup part on a story within 48 tokens. So ``auto`` means float32 there, a narrower
    dtype is refused, and a GPU's compiled steps keep their dtype."""
    monkeypatch.setattr(cpu_bf16, "bf16_products", lambda: True)
    cpu = torch.device("cpu")
    assert loading.resolve_dtype("auto", cpu, compiled=True) == torch.float32
    assert loading.resolve_dtype("float32", cpu, compiled=True) == torch.float32
    for narrow in ("bfloat16", "float16"):
        with pytest.raises(UsageError, match=f"--fast with --dtype {narrow} on the CPU"):
            loading.resolve_dtype(narrow, cpu, compiled=True)
        assert loading.resolve_dtype(narrow, cpu) == getattr(torch, narrow), "eager: taken as asked"
        assert loading.resolve_dtype(narrow, torch.device("cuda"), compiled=True) == getattr(torch, narrow)


@pytest.mark.skipif(not cpu_bf16.bf16_products(),
                    reason="this CPU has no bfloat16 products: --dtype auto loads float32 here")
def test_the_embedded_model_by_default_on_this_cpu_drafts_its_greedy_text(byte_bpe: Any) -> None:
    """The embedded model as ``--dtype auto`` loads it on a CPU with bfloat16 products (prepared): prompt lookup's
    chains and recycling's trees give ``generate``'s greedy text on it, token for token, on a code edit and an
    answer."""
    from decode_tui.core.model.embedded import pull
    from decode_tui.core.model.registry import resolve

    pull("smollm2")
    lm = loading.load_model(resolve("smollm2"), device="cpu")
    assert lm.dtype == torch.bfloat16 and isinstance(lm.model.lm_head, cpu_bf16.PackedLinear)
    eos = min(lm.eos_token_ids)
    for text in ("Rename x to count: def f(x):\n    y = x + 1\n    return x * y\n", "Explain how a fridge works."):
        prompt = lm.tokenizer(text)["input_ids"]
        with torch.inference_mode():
            out = cast(Any, lm.model).generate(torch.tensor([prompt]), max_new_tokens=40, do_sample=False,
                                    eos_token_id=sorted(lm.eos_token_ids), pad_token_id=eos)[0, len(prompt) :]
        expected = out.tolist()
        expected = expected[: next((i + 1 for i, t in enumerate(expected) if t in lm.eos_token_ids), len(expected))]
        for drafter in (PromptLookup(3, 8, lm.eos_token_ids), RecyclingDrafter(RecycledMatrix(len(lm.tokenizer), 8),
                                                                               5, 16, lm.eos_token_ids)):
            result = run(lm.model, lm.tokenizer, drafter, prompt, 40, eos=eos, k=8)[-1]
            assert isinstance(result, Finished) and list(result.token_ids) == expected, (text, type(drafter).__name__)
