"""A draft's layers with fewer kernels (core/drafting/draft_layers.py): fused where a check finds them computing what
transformers' modules compute, left as they were elsewhere, and the target never touched."""

from __future__ import annotations

import collections
from typing import Any, ClassVar, cast

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from decode_tui.core.drafting import draft_layers, target_drafts
from decode_tui.core.execution import float_mask
from decode_tui.core.params import TargetDraft

from .conftest import tiny_model
from .controls import unfused_build
from .test_speculative import V

DRAFTS = {"int4": TargetDraft(4), "int8": TargetDraft(8), "layers:1": TargetDraft(None, 1),
          "int4+layers:1": TargetDraft(4, 1)}


def _fused_kinds(model: Any) -> set[str]:
    return {type(m).__name__ for m in model.modules() if type(m).__module__ == draft_layers.__name__}


@pytest.mark.parametrize("arch", ["llama", "qwen2", "phi3"])
@pytest.mark.parametrize("spec", list(DRAFTS))
def test_a_built_drafts_layers_are_fused_where_they_can_be_and_the_targets_are_left_as_they_were(
        arch: str, spec: str) -> None:
    """Every decoder layer the draft keeps has the fused attention and its norms are fused. The products are joined
    only in a quantised draft (whose weights are new memory anyway): an early exit shares the target's tensors,
    so only Phi-3's attention, one product already, is fused there; Phi-3's MLP is one product already too."""
    model = tiny_model(arch, vocab_size=V, seed=6)
    before = {name: type(m) for name, m in model.named_modules()}
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.inference_mode():
        logits = model(ids).logits
    draft = target_drafts.build(model, DRAFTS[spec])
    layers = cast(Any, draft).model.layers
    quantised = DRAFTS[spec].bits is not None
    attention_fused = quantised or arch == "phi3"
    assert all(isinstance(layer.self_attn, draft_layers.FusedAttention) == attention_fused for layer in layers)
    assert all(isinstance(layer.mlp, draft_layers.FusedMLP) == (quantised and arch != "phi3") for layer in layers)
    norms = [m for name, m in draft.named_modules() if "norm" in name.split(".")[-1]]
    assert len(norms) >= 3 and all(isinstance(m, draft_layers.FusedRMSNorm) for m in norms)
    assert {name: type(m) for name, m in model.named_modules()} == before
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, logits)
    if not quantised:  # the same tensors, not copies: an early exit costs no memory
        target_params = {p.data_ptr() for p in model.parameters()}
        assert {p.data_ptr() for p in draft.parameters()} <= target_params


@pytest.mark.parametrize("arch", ["llama", "qwen2", "phi3"])
@pytest.mark.parametrize("spec", list(DRAFTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_fused_draft_computes_what_the_same_draft_with_transformers_modules_computes(
        arch: str, spec: str, dtype: torch.dtype) -> None:
    """The fused draft against the control the benchmarks time (target_drafts.unfused), on a prompt and on a
    step with a cache. In float32 the logits agree but for float error. A draft that computes in bf16 (a
    quantised one, or any bf16 draft) rounds elsewhere: the fused rotary rounds once, in a multiply-add, where
    transformers' rounds the products and the sum, and two layers of a random model with large weights carry that
    to its logits (up to about 0.1 here). So there it proposes what the control proposes: the same argmax wherever
    the control's best leads its runner-up by more than that, a token within that of the best where it does not
    (a logit of 4.5 against 4.47, one unit in bf16's last place, went either way), and probabilities (its q) within
    0.02 (under 0.01 seen)."""
    from decode_tui.core.execution.forward import forward, new_cache

    model = tiny_model(arch, vocab_size=V, seed=6).to(dtype)
    fused = target_drafts.build(model, DRAFTS[spec])
    plain = unfused_build(model, DRAFTS[spec])
    assert _fused_kinds(fused) and not _fused_kinds(plain)
    outputs = []
    for draft in (fused, plain):
        cache = new_cache(draft, rollback=True)
        with torch.inference_mode():
            prompt = forward(draft, torch.tensor([[9, 8, 7, 6, 9, 8, 7]]), cache, keep=7)
            step = forward(draft, torch.tensor([[5]]), cache)
        outputs.append(torch.cat([prompt[0], step[0]]).float())  # [positions, V]
    if dtype == torch.float32 and DRAFTS[spec].bits is None:
        assert torch.allclose(outputs[0], outputs[1], rtol=1e-4, atol=1e-4)
    else:
        best, runner_up = outputs[1].topk(2, -1).values.unbind(-1)  # the control's, at each position
        clear = best - runner_up > 0.1
        assert clear.float().mean() >= 0.5  # most positions have a clear best: the check below is not empty
        assert torch.equal(outputs[0].argmax(-1)[clear], outputs[1].argmax(-1)[clear])
        picked = outputs[1].gather(-1, outputs[0].argmax(-1, keepdim=True)).squeeze(-1)
        assert bool((best - picked <= 0.1).all())
        assert torch.allclose(outputs[0].softmax(-1), outputs[1].softmax(-1), rtol=0, atol=0.02)


def test_the_rotary_embedding_in_one_pass_is_transformers_own_whole_and_partial() -> None:
    """RoPE over queries and keys side by side gives what transformers' Llama gives each, and with Phi-3's split
    (a rotary over the first half of each head, the rest passed through) what Phi-3's gives."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_rope
    from transformers.models.phi3.modeling_phi3 import apply_rotary_pos_emb as phi3_rope

    torch.manual_seed(0)
    q, k = torch.randn(1, 4, 3, 16), torch.randn(1, 2, 3, 16)  # [B, H, T, D]
    for rope, width in ((llama_rope, 16), (phi3_rope, 8)):
        cos, sin = torch.randn(1, 3, width), torch.randn(1, 3, width)  # [B, T, d]
        expected_q, expected_k = rope(q, k, cos, sin)
        both = torch.cat([q, k], 1).transpose(1, 2)  # [B, T, Hq + Hkv, D], as the fused attention holds them
        got = draft_layers.rotated(both, cos.unsqueeze(2), draft_layers.signed(sin).unsqueeze(2)).transpose(1, 2)
        assert torch.allclose(got[:, :4], expected_q, atol=1e-6) and torch.allclose(got[:, 4:], expected_k, atol=1e-6)


def test_an_attention_that_computes_something_else_keeps_transformers_forward() -> None:
    """The check can fail: Qwen3 normalises its queries and keys before the rotary, which the fused attention does
    not, so a Qwen3 draft keeps Qwen3's attention (its norms and MLP are still fused); and a fused attention whose
    product has its rows in another order (keys first) does not pass the check."""
    model = tiny_model("llama", vocab_size=V, seed=6)
    draft = cast(Any, target_drafts.build(_qwen3(), TargetDraft(4)))
    assert not any(isinstance(layer.self_attn, draft_layers.FusedAttention) for layer in draft.model.layers)
    assert all(isinstance(layer.mlp, draft_layers.FusedMLP) for layer in draft.model.layers)

    attention, rotary = cast(Any, model).model.layers[0].self_attn, cast(Any, model).model.rotary_emb
    assert draft_layers.FusedAttention.of(attention, rotary, join_products=True) is not None
    keys_first = draft_layers.joined(attention.k_proj, attention.q_proj, attention.v_proj)
    assert keys_first is not None
    wrong = draft_layers.FusedAttention(attention, keys_first)
    hidden = torch.randn(1, 3, 64)
    cos, sin = rotary(hidden, torch.arange(3)[None])
    assert not draft_layers.agrees(attention, wrong, hidden_states=hidden, position_embeddings=(cos, sin),
                                    attention_mask=None, cache=None)


def test_the_checks_tolerance_grows_with_the_output_and_still_refuses_a_wrong_form_there() -> None:
    """An attention whose outputs reach the hundreds (as a real model's do) in bf16: its fused form passes the
    check, though entries near zero differ by more than an absolute 0.02, and the fused form with its products'
    rows in another order (keys first) still fails it, being off by the output's own size."""
    model = tiny_model("llama", vocab_size=V, seed=6).to(torch.bfloat16)
    attention, rotary = cast(Any, model).model.layers[0].self_attn, cast(Any, model).model.rotary_emb
    with torch.no_grad():
        attention.o_proj.weight.mul_(300.0)
    hidden = draft_layers._random((1, 3, 64), attention.o_proj.weight)
    cos, sin = rotary(hidden, torch.arange(3)[None])
    inputs: dict[str, Any] = dict(hidden_states=hidden, position_embeddings=(cos, sin), attention_mask=None,
                                  cache=None)
    right = draft_layers.FusedAttention.of(attention, rotary, join_products=True)
    assert right is not None
    with torch.inference_mode():
        expected, got = attention(**inputs)[0].float(), right(**inputs)[0].float()
    assert expected.abs().max() > 100  # the size a real model's attention gives
    assert not torch.allclose(got, expected, rtol=2e-2, atol=2e-2)  # what an entry-by-entry check would refuse
    keys_first = draft_layers.joined(attention.k_proj, attention.q_proj, attention.v_proj)
    assert keys_first is not None
    assert not draft_layers.agrees(attention, draft_layers.FusedAttention(attention, keys_first), **inputs)


def test_a_model_whose_rotary_embedding_takes_other_arguments_keeps_its_attention(monkeypatch: Any) -> None:
    """The check cannot even build its input where the rotary embedding wants more than an input and positions
    (Gemma 3's takes a layer type): the attention is kept as it is, and the draft is still built and fused
    elsewhere, instead of the build failing."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    def by_layer_type(self: Any, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str) -> Any:
        raise AssertionError("not called this way")

    model = tiny_model("llama", vocab_size=V, seed=6)
    monkeypatch.setattr(LlamaRotaryEmbedding, "forward", by_layer_type)
    draft = cast(Any, target_drafts.build(model, DRAFTS["int4"]))
    assert not any(isinstance(layer.self_attn, draft_layers.FusedAttention) for layer in draft.model.layers)
    assert all(isinstance(layer.mlp, draft_layers.FusedMLP) for layer in draft.model.layers)


class _Ops(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts the ops that launch work (not views) run inside the attention and MLP modules."""

    FREE: ClassVar[set[str]] = {
        "view", "_unsafe_view", "t", "transpose", "unsqueeze", "expand", "slice", "select", "reshape", "split",
        "chunk", "split_with_sizes", "squeeze", "detach", "as_strided", "alias", "_reshape_alias", "unbind",
        "dropout", "lift_fresh", "lift_fresh_copy", "permute"}

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.inside = False
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if self.inside and name not in self.FREE and not (name == "to" and out is args[0]):
            self.ops[name] += 1
        return out


def _step_ops(draft: Any) -> collections.Counter[str]:
    """Ops one decoding step (one token, after a prompt) runs in the first layer's attention and MLP."""
    from decode_tui.core.execution.forward import forward, new_cache

    census = _Ops()
    layer = draft.model.layers[0]
    for module in (layer.self_attn, layer.mlp):
        module.register_forward_pre_hook(lambda *_: setattr(census, "inside", True))
        module.register_forward_hook(lambda *_: setattr(census, "inside", False))
    cache = new_cache(draft, rollback=True)
    with torch.inference_mode():
        forward(draft, torch.tensor([[9, 8, 7, 6]]), cache)
        with census:
            forward(draft, torch.tensor([[5]]), cache)
    return census.ops


@pytest.mark.parametrize(("arch", "products", "fewer"), [("llama", 4, 8), ("phi3", 4, 7)])
def test_a_fused_draft_layer_runs_fewer_ops_than_the_same_draft_with_transformers_modules(
        arch: str, products: int, fewer: int) -> None:
    """What the fusion is for: every op is a kernel on a GPU. A Llama int4 draft's attention and MLP run four
    weight products instead of seven, and the rotary over queries and keys at once; Phi-3's products are joined
    already, so it saves the rotary's ops only. (benchmarks/step_kernels.py counts a whole layer.)"""
    model = tiny_model(arch, vocab_size=V, seed=6)
    fused = _step_ops(target_drafts.build(model, TargetDraft(4)))
    plain = _step_ops(unfused_build(model, TargetDraft(4)))
    kernel = "_weight_int4pack_mm_for_cpu"
    assert fused[kernel] == products and plain[kernel] == (7 if arch == "llama" else 4)
    assert sum(fused.values()) <= sum(plain.values()) - fewer, (fused, plain)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_fused_norm_gives_transformers_norm_up_to_a_rounding_and_a_different_norm_is_kept(dtype: torch.dtype
                                                                                          ) -> None:
    """The fused norm rounds once, at the end, where transformers' rounds before scaling by the weight: equal in
    float32 but for float error, within one bf16 rounding in bf16. Gemma's norm scales by 1 + w: not fused (the
    control that the check can fail), also with an outlier weight in one channel."""
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    llama, gemma = LlamaRMSNorm(64, eps=1e-5), GemmaRMSNorm(64, eps=1e-6)
    for norm in (llama, gemma):
        norm.weight.data = torch.randn(64)
        norm.to(dtype)
    fused = draft_layers.fusable(llama)
    assert fused is not None and fused.weight is llama.weight
    x = (4 * torch.randn(5, 3, 64)).to(dtype)
    with torch.inference_mode():
        got, expected = fused(x), llama(x)
    assert got.dtype == expected.dtype == dtype
    rounding = 1e-5 if dtype == torch.float32 else 2**-7  # bf16 keeps 8 significant bits
    assert torch.allclose(got.float(), expected.float(), rtol=rounding, atol=rounding)
    assert draft_layers.fusable(gemma) is None
    # One outlier channel, as real norms have, in a real norm's width: every other channel of Gemma's norm is still
    # off by its input, and the check still says so (a tolerance scaled by the largest entry would let it through).
    wide = GemmaRMSNorm(2048, eps=1e-6)
    wide.weight.data = torch.randn(2048)
    wide.weight.data[7] = 300.0
    assert draft_layers.fusable(wide.to(dtype)) is None


def _mask_ops(model: Any) -> collections.Counter[str]:
    """The ops that build or convert attention masks in one step on the static cache CUDA graphs replay on, as
    the profiler sees them (inside torch's attention too, where a dispatch mode does not look)."""
    from torch.profiler import profile

    from decode_tui.core.execution.forward import forward, new_cache

    cache = new_cache(model, graphs=True, max_len=40)
    with torch.inference_mode():
        forward(model, torch.tensor([[3, 4, 5]]), cache)
        with profile() as prof:
            forward(model, torch.tensor([[6]]), cache)
    return collections.Counter(e.name for e in prof.events() if e.name in ("aten::where", "aten::scalar_tensor"))


@pytest.mark.parametrize("arch", ["llama", "qwen2", "phi3"])
def test_a_drafts_step_builds_one_float_mask_for_its_layers_where_the_target_converts_one_in_each(
        arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's attention turns a boolean mask into a float one in every call: a fill and a where, kernels on a
    GPU, in every layer of the target's step (the control). The draft's passes build the mask as floats once, and
    every layer's attention gets that one tensor; the target keeps transformers' SDPA, so its tokens stay
    generate's. On the static cache the draft's logits are exactly those of the same draft on transformers' SDPA
    and its boolean masks, which torch's attention turns into the same floats."""
    from decode_tui.core.execution.forward import forward, new_cache

    layers = 4
    model = tiny_model(arch, vocab_size=V, seed=6, num_hidden_layers=layers)
    draft, plain = (target_drafts.build(model, TargetDraft(4)) for _ in range(2))
    assert cast(Any, draft).config._attn_implementation == float_mask.FLOAT_MASK_SDPA
    cast(Any, plain).set_attn_implementation("sdpa")  # the same draft on boolean masks
    assert model.config._attn_implementation == "sdpa"

    target_ops, draft_ops = _mask_ops(model), _mask_ops(draft)
    assert target_ops["aten::where"] >= layers and draft_ops["aten::where"] <= 2, (target_ops, draft_ops)

    masks: list[torch.Tensor | None] = []
    attention: Any = torch.nn.functional.scaled_dot_product_attention

    def spy(*args: Any, **kwargs: Any) -> torch.Tensor:
        masks.append(kwargs.get("attn_mask"))
        return cast(torch.Tensor, attention(*args, **kwargs))

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    steps = []
    for each in (draft, plain):
        cache = new_cache(each, graphs=True, max_len=40)
        with torch.inference_mode():
            forward(each, torch.tensor([[9, 8, 7, 6, 9]]), cache)
            float_mask.exact(each)  # a capture's check of the model's own float masks runs its passes first
            masks.clear()
            steps.append(forward(each, torch.tensor([[5]]), cache).float())
        if each is draft:
            assert len(masks) == layers and masks[0] is not None and masks[0].is_floating_point()
            assert all(mask is masks[0] for mask in masks), "one mask for every layer of the pass"
        else:
            assert all(mask is not None and mask.dtype == torch.bool for mask in masks)
    assert torch.equal(steps[0], steps[1])


def test_a_draft_whose_float_mask_would_move_its_logits_keeps_transformers_sdpa(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: with a mask function that lets every token see the ones after it, the draft's logits
    move, and the draft keeps transformers' SDPA (and still builds, fused otherwise)."""
    def sees_the_future(**kwargs: Any) -> torch.Tensor:
        return torch.zeros((kwargs["batch_size"], 1, kwargs["q_length"], kwargs["kv_length"]))

    monkeypatch.setattr(draft_layers, "additive_mask", sees_the_future)
    draft = target_drafts.build(tiny_model("llama", vocab_size=V, seed=6), TargetDraft(4))
    assert cast(Any, draft).config._attn_implementation == "sdpa"
    assert _fused_kinds(draft) == {"FusedRMSNorm", "FusedAttention", "FusedMLP"}


def _qwen3() -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("qwen3", vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, initializer_range=0.2)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def test_what_a_draft_kept_of_transformers_modules_is_counted_where_a_fused_form_was_tried(monkeypatch: Any) -> None:
    """Nothing kept where everything fused; Qwen3's attentions (which the check refuses) counted; an early exit's
    attention, whose products it does not join, not counted as kept; and with every check failing, every module a
    fused form was tried on is counted."""
    llama = tiny_model("llama", vocab_size=V, seed=6)
    assert draft_layers.kept(target_drafts.build(llama, TargetDraft(4)), join_products=True) == {}
    assert draft_layers.kept(target_drafts.build(llama, TargetDraft(None, 1)), join_products=False) == {}
    assert draft_layers.kept(target_drafts.build(_qwen3(), TargetDraft(4)), join_products=True) == {
        "attentions": (2, 2)}
    monkeypatch.setattr(draft_layers, "agrees", lambda *args, **kwargs: False)
    assert draft_layers.kept(target_drafts.build(llama, TargetDraft(4)), join_products=True) == {
        "attentions": (2, 2), "MLPs": (2, 2), "norms": (5, 5)}


def test_a_draft_that_kept_transformers_modules_says_so_on_cuda_only() -> None:
    """The note that would have shown SmolLM2's 7 unfused attentions at once: on CUDA, where each kept module's
    kernels are most of its cost, and not on a CPU, nor for the benchmarks' unfused control, which keeps them on
    purpose."""
    from decode_tui.core.drafting.draft_models import _unfused_on

    qwen3 = target_drafts.build(_qwen3(), TargetDraft(4))
    note = _unfused_on("int4", TargetDraft(4), qwen3, torch.device("cuda"))
    assert note is not None and "the int4 draft keeps transformers' forward for 2 of its 2 attentions" in note
    assert _unfused_on("int4", TargetDraft(4), qwen3, torch.device("cpu")) is None
    llama = target_drafts.build(tiny_model("llama", vocab_size=V, seed=6), TargetDraft(4))
    assert _unfused_on("int4", TargetDraft(4), llama, torch.device("cuda")) is None


def phi3_wide(device: torch.device) -> Any:
    """Phi-3-mini's widths (3072, 32 heads), two layers, a small vocabulary, random weights in bf16 on ``device``."""
    from transformers import AutoModelForCausalLM, Phi3Config

    config = Phi3Config(vocab_size=512, hidden_size=3072, intermediate_size=8192, num_hidden_layers=2,
                        num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                        original_max_position_embeddings=4096, tie_word_embeddings=False,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    with device:
        return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()


def test_a_draft_at_phi3_minis_widths_is_fused_throughout_in_bf16() -> None:
    """Phi-3-mini's widths with random weights in bf16, two of its layers: the attentions' outputs reach 15, where
    a unit in bf16's last place is 0.0625, which an entry-by-entry check (0.02 and 2 %) refused, so the H200's
    Phi-3-mini-sized draft kept most attentions unfused (728 kernels a step where 530 are fused). Nothing is kept
    now."""
    draft = target_drafts.build(phi3_wide(torch.device("cpu")), TargetDraft(4))
    assert draft_layers.kept(draft, join_products=True) == {}
    assert all(isinstance(layer.self_attn, draft_layers.FusedAttention) for layer in cast(Any, draft).model.layers)
