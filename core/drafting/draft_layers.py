"""A draft's layers with fewer kernels than transformers' own: the same arithmetic, fused where torch has one
kernel for it or where one weight product can do the work of several.

On a GPU, a small model's decoding step, and the part of a big one's that is not a weight product, costs about a
kernel's launch and tail per op, which a draft pays just as its target does whatever its weights' precision
(BENCHMARKS.md). So a draft made from the target (:mod:`.target_drafts`) replaces, where a check finds the
replacement computing what the original computes:

- each RMS norm by :class:`FusedRMSNorm`: ``F.rms_norm``, one kernel on CUDA where transformers' norm launches
  eight (a cast up, the square, the mean, the epsilon, the reciprocal root, the scaling, a cast down, the weight);
- each self-attention by :class:`FusedAttention`: the rotary embedding applied to the queries and the keys in one
  pass (three ops where transformers' takes ten, twelve with Phi-3's split for a partial rotary), and, when the
  draft quantises its products anyway, the query, key and value projections joined into one product;
- each gated MLP by :class:`FusedMLP`, when the draft quantises: the gate and up projections as one product;
- the boolean attention mask, which torch's attention converts to floats in every layer, by the same float mask built
  once a pass (:func:`float_masks`).

``python benchmarks/step_kernels.py`` counts what a layer launches: a Llama layer's int4 draft 16 ops where its target
launches 42, a Phi-3 layer's 16 where its target launches 41 (both on decode-tui's static cache).

Every replacement is checked once, on a random input at the module's own device and dtype, against the module it
replaces (:func:`agrees`). A module that computes something else keeps transformers' forward: Gemma's norm, which
scales by 1 + w; an attention that normalises its queries and keys (Qwen3's) or rotates interleaved pairs.
:func:`kept` counts those, and a draft on CUDA says in a note when there are any. The
draft's numbers move by at most a rounding, which a draft may do: the target checks every token it proposes, and
the target's own modules are never touched, so its tokens stay ``generate``'s.

Why by hand: transformers fuses none of these in eager mode (its hub kernels need a download), and compiling the
draft instead costs most of a minute on a GPU (BENCHMARKS.md, the background compile). This module knows modules'
shapes and forwards; nothing of quantising, drafting or verifying.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
from torch import nn

from ..execution.float_mask import FLOAT_MASK_SDPA, additive_mask, both_logits, on_sdpa, register


def fuse(model: nn.Module, join_products: bool) -> None:
    """Replace, in ``model`` (a draft's own module tree), every norm, attention and MLP that a fused form computes
    the same as, and let its passes build one float mask for all their layers. ``join_products``: also join the
    attention's and the MLP's products (new memory: only for a draft that is about to quantise them, whose weights
    are new memory anyway)."""
    float_masks(model)
    base = getattr(model, getattr(model, "base_model_prefix", ""), model)
    rotary = getattr(base, "rotary_emb", None)
    sines = PassSines()
    for layer in getattr(base, "layers", []):
        attention = getattr(layer, "self_attn", None)
        if attention is not None and rotary is not None:
            fused_attention = FusedAttention.of(attention, rotary, join_products, sines)
            if fused_attention is not None:
                layer.self_attn = fused_attention
        mlp = getattr(layer, "mlp", None)
        if mlp is not None and join_products and (fused_mlp := FusedMLP.of(mlp)) is not None:
            layer.mlp = fused_mlp
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child).__name__.endswith("RMSNorm") and (fused := fusable(child)) is not None:
                setattr(module, name, fused)


def kept(model: nn.Module, join_products: bool) -> dict[str, tuple[int, int]]:
    """Which modules of a draft that :func:`fuse` went over kept transformers' forward though a fused form was
    tried on them: {kind: (kept, of)} for each kind with any kept (``attentions``, ``MLPs``, ``norms``), read
    from the module tree. A module no fused form is tried on (an early exit's attention with three products,
    which it does not join) is not counted. A fallback is silent where it happens, so this is how a caller can
    say that one did."""
    counts = {"attentions": [0, 0], "MLPs": [0, 0], "norms": [0, 0]}
    base = getattr(model, getattr(model, "base_model_prefix", ""), model)
    for layer in getattr(base, "layers", []):
        attention = getattr(layer, "self_attn", None)
        if isinstance(attention, FusedAttention) or hasattr(attention, "qkv_proj") or \
                (join_products and hasattr(attention, "q_proj")):
            counts["attentions"][0] += not isinstance(attention, FusedAttention)
            counts["attentions"][1] += 1
        mlp = getattr(layer, "mlp", None)
        if join_products and (isinstance(mlp, FusedMLP) or hasattr(mlp, "gate_proj")):
            counts["MLPs"][0] += not isinstance(mlp, FusedMLP)
            counts["MLPs"][1] += 1
    for module in model.modules():
        if isinstance(module, FusedRMSNorm) or type(module).__name__.endswith("RMSNorm"):
            counts["norms"][0] += not isinstance(module, FusedRMSNorm)
            counts["norms"][1] += 1
    return {kind: (k, n) for kind, (k, n) in counts.items() if k}


def float_masks(model: nn.Module) -> bool:
    """Have ``model`` (a draft's own copy, with its own config) build each pass's attention mask as floats, once,
    if that gives its logits; whether it does now (:mod:`.float_mask`: the conversion torch's attention makes in
    every layer, once a pass). Checked on one pass over a seeded random prompt; a model whose logits move keeps
    transformers' SDPA (as does one on another attention, flash or eager)."""
    if not on_sdpa(model):
        return False
    register(additive_mask)  # by this module's name for it, which a test replaces
    both = both_logits(model)
    if both is None or not _close(both[1], both[0]):
        return False
    cast(Any, model).set_attn_implementation(FLOAT_MASK_SDPA)
    return True


def agrees(original: nn.Module, fused: nn.Module, *args: Any, **kwargs: Any) -> bool:
    """Whether ``fused`` gives ``original``'s output on these inputs, up to bf16's rounding (the draft may move by
    that much); False where either raises, so a module the fused form cannot take keeps its own forward."""
    try:
        with torch.inference_mode():
            expected, got = original(*args, **kwargs), fused(*args, **kwargs)
        if isinstance(expected, tuple):  # an attention's (output, weights): the output is what the layer uses
            expected, got = expected[0], got[0]
        return _close(got, expected)
    except Exception:
        return False


def _close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Equal up to bf16's rounding, in dtype and shape too: each entry within 2 % of itself, plus 0.02, plus 5 %
    of the output's root mean square.

    The last term is for outputs whose entries are sums of large products, as an attention's are: with real
    weights they reach a few hundred, and an entry near zero carries its terms' rounding (a unit in bf16's last
    place is 2 at 400). SmolLM2's attentions in bf16 differ from their fused forms by up to 1.3 % of their output's
    root mean square, and failed a check without that term. A wrong form is off by the output's own size. It is
    the root mean square, not the largest entry, so that one large channel (a norm's outlier weight) does not let
    every other channel be wrong, as Gemma's norm, which scales by 1 + w, would be."""
    if expected.dtype != got.dtype or expected.shape != got.shape:
        return False
    g, e = got.float(), expected.float()
    spread = float(e.pow(2).mean().sqrt()) if e.numel() else 0.0
    return bool(torch.allclose(g, e, rtol=2e-2, atol=2e-2 + 5e-2 * spread))


def _random(shape: tuple[int, ...], like: torch.Tensor, scale: float = 3.0) -> torch.Tensor:
    """A seeded random input on ``like``'s device and dtype: the check is the same on every build."""
    x = scale * torch.randn(shape, generator=torch.Generator().manual_seed(0))
    return x.to(device=like.device, dtype=like.dtype)


def fusable(norm: nn.Module) -> FusedRMSNorm | None:
    """``norm`` as a FusedRMSNorm, if it computes what ``F.rms_norm`` computes on a random row; else None."""
    weight = getattr(norm, "weight", None)
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or not weight.is_floating_point() or \
            not isinstance(eps, float):
        return None
    fused = FusedRMSNorm(weight, eps)
    return fused if agrees(norm, fused, _random((1, 2, weight.shape[0]), weight)) else None


class FusedRMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * w over the last dimension, as ``F.rms_norm``: one kernel on CUDA, the same
    arithmetic in float with one rounding at the end, where transformers' norm rounds before it scales by w.
    The weight is the norm's own tensor (shared with the target, or the draft's cast copy)."""

    def __init__(self, weight: torch.Tensor, eps: float) -> None:
        super().__init__()
        self.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight, False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The fused kernel wants the weight in the input's dtype (else torch warns and runs its slow composite).
        return nn.functional.rms_norm(x, self.weight.shape, self.weight.to(x.dtype), self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def joined(*linears: Any) -> nn.Linear | None:
    """One Linear whose output is the given Linears' outputs side by side (their weights stacked by rows); None
    unless they are plain Linears over the same input, all with a bias or none."""
    first = linears[0]
    if not all(type(linear) is nn.Linear and linear.in_features == first.in_features and
               linear.weight.dtype == first.weight.dtype and (linear.bias is None) == (first.bias is None)
               for linear in linears):
        return None
    out = sum(linear.out_features for linear in linears)
    # Built on the meta device, so that only the stacked weight is allocated, once.
    product = nn.Linear(first.in_features, out, bias=first.bias is not None, device="meta")
    product.weight = nn.Parameter(torch.cat([linear.weight.detach() for linear in linears]), requires_grad=False)
    if first.bias is not None:
        product.bias = nn.Parameter(torch.cat([linear.bias.detach() for linear in linears]), requires_grad=False)
    return product


def rotated(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """The rotary embedding of x [B, T, H, D] at cos [B, T, 1, d] and ``signed(sin)`` (RoPE, Su et al.'s RoFormer,
    in the half-split layout transformers' Llama uses): x cos + rotate_half(x) sin on the first d features, the
    rest as they are. rotate_half(x) sin = [-x2, x1] sin = [x2, x1] [-s1, s2]: the halves swapped (one flip) times
    the sines with their first half negated, which a pass computes once for all its layers (:class:`PassSines`).
    Over the queries and keys side by side, three ops (a product, the flip, a fused multiply-add; the slices and
    reshapes are views) where transformers' takes ten, five for each of the two."""
    d = cos.shape[-1]
    x_rot = x if d == x.shape[-1] else x[..., :d]
    swapped = x_rot.reshape(*x_rot.shape[:-1], 2, d // 2).flip(-2).reshape(x_rot.shape)  # [x2, x1]: views but the flip
    out = torch.addcmul(x_rot * cos, swapped, signed_sin)
    return out if d == x.shape[-1] else torch.cat((out, x[..., d:]), -1)


def signed(sin: torch.Tensor) -> torch.Tensor:
    """``sin`` [..., d] with its first half negated (see :func:`rotated`)."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), -1)


class PassSines:
    """The signed sines of the pass under way, computed by its first layer's attention and read by the others.

    transformers computes a pass's rotary cosines and sines once and hands every layer the same two tensors, so
    a new sine tensor is a new pass. On a replayed CUDA graph this ran when the graph was captured, and the
    graph recomputes it in its first layer each replay, as it does everything else."""

    def __init__(self) -> None:
        self.sin: torch.Tensor | None = None
        self.signed: torch.Tensor | None = None

    def __call__(self, sin: torch.Tensor) -> torch.Tensor:
        if sin is not self.sin or self.signed is None:
            self.sin, self.signed = sin, signed(sin)
        return self.signed


class FusedAttention(nn.Module):
    """Self-attention as transformers' Llama computes it, with the queries, keys and values from one product
    (``qkv_proj``, its rows the queries', then the keys', then the values') and the rotary embedding applied to
    the queries and the keys together. The cache, the mask and the attention kernel are transformers' own."""

    # What transformers' attention functions and its cache read from the attention module they are given.
    KEPT = ("config", "layer_idx", "head_dim", "num_key_value_groups", "scaling", "is_causal", "attention_dropout")
    config: Any
    layer_idx: int
    head_dim: int
    num_key_value_groups: int
    scaling: float
    is_causal: bool
    attention_dropout: float

    def __init__(self, attention: nn.Module, qkv_proj: nn.Module, sines: PassSines | None = None) -> None:
        """``sines``: shared by the attention modules of one model, so that a pass signs its sines once."""
        super().__init__()
        self.sines = sines or PassSines()
        for name in self.KEPT:
            setattr(self, name, getattr(attention, name, None))
        config: Any = attention.config
        self.query_heads = config.num_attention_heads
        self.key_heads = getattr(config, "num_key_value_heads", None) or self.query_heads
        self.sliding_window = getattr(attention, "sliding_window", getattr(config, "sliding_window", None))
        self.qkv_proj = qkv_proj
        self.o_proj = cast(nn.Module, attention.o_proj)
        # transformers' attention kernels by name (sdpa, eager, flash...), looked up each call as its own modules
        # do; imported here, not at the module's top, so that nothing imports transformers before it must.
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        from transformers.models.llama.modeling_llama import eager_attention_forward

        self.kernels, self.eager = ALL_ATTENTION_FUNCTIONS, eager_attention_forward

    @classmethod
    def of(cls, attention: nn.Module, rotary: nn.Module, join_products: bool, sines: PassSines | None = None
           ) -> FusedAttention | None:
        """``attention`` fused, if it has the projections this needs and computes what the fused form computes on
        a random input; else None."""
        qkv_proj: Any
        if hasattr(attention, "qkv_proj"):  # Phi-3's: already one product, shared with the target
            qkv_proj = attention.qkv_proj
        elif join_products:
            qkv_proj = joined(*(getattr(attention, f"{x}_proj", None) for x in "qkv"))
        else:
            qkv_proj = None
        if qkv_proj is None or not isinstance(getattr(attention, "o_proj", None), nn.Module) or \
                not hasattr(attention, "config") or not hasattr(attention, "head_dim"):
            return None
        fused = cls(attention, qkv_proj, sines)
        try:  # a model whose rotary embedding wants more than an input and its positions (Gemma 3's, by layer type)
            weight = next(attention.parameters())
            hidden = _random((1, 3, cast(Any, attention).config.hidden_size), weight)
            with torch.inference_mode():
                cos, sin = rotary(hidden, torch.arange(3, device=weight.device)[None])
        except Exception:
            return None
        same = agrees(attention, fused, hidden_states=hidden, position_embeddings=(cos, sin), attention_mask=None,
                      cache=None)
        return fused if same else None

    def forward(self, hidden_states: torch.Tensor, position_embeddings: tuple[torch.Tensor, torch.Tensor],
                attention_mask: torch.Tensor | None, cache: Any = None, **kwargs: Any
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        shape = hidden_states.shape[:-1]  # [B, T]
        qkv = self.qkv_proj(hidden_states)  # [B, T, (Hq + 2 Hkv) D]
        split = (self.query_heads + self.key_heads) * self.head_dim
        cos, sin = position_embeddings  # [B, T, d]
        qk = rotated(qkv[..., :split].view(*shape, -1, self.head_dim), cos.unsqueeze(2),
                     self.sines(sin).unsqueeze(2))
        query = qk[:, :, :self.query_heads].transpose(1, 2)  # [B, Hq, T, D]
        key = qk[:, :, self.query_heads:].transpose(1, 2)  # [B, Hkv, T, D]
        value = qkv[..., split:].view(*shape, -1, self.head_dim).transpose(1, 2)  # [B, Hkv, T, D]
        if cache is not None:
            key, value = cache.update(key, value, self.layer_idx, kwargs=kwargs)
        attend: Callable[..., tuple[torch.Tensor, torch.Tensor | None]] = self.kernels.get_interface(
            self.config._attn_implementation, self.eager)
        out, weights = attend(self, query, key, value, attention_mask, dropout=0.0, scaling=self.scaling,
                              sliding_window=self.sliding_window, **kwargs)
        return self.o_proj(out.reshape(*shape, -1).contiguous()), weights


class FusedMLP(nn.Module):
    """down(act(gate(x)) * up(x)) with the gate and up projections as one product (``gate_up_proj``, the gate's
    rows first), as Phi-3's MLP computes it."""

    def __init__(self, gate_up_proj: nn.Linear, down_proj: nn.Module, act_fn: Callable[[torch.Tensor], Any]) -> None:
        super().__init__()
        self.gate_up_proj = gate_up_proj
        self.down_proj = down_proj
        self.act_fn = act_fn

    @classmethod
    def of(cls, mlp: nn.Module) -> FusedMLP | None:
        """``mlp`` with its gate and up products joined, if it has them and computes what this does; else None."""
        gate_up = joined(getattr(mlp, "gate_proj", None), getattr(mlp, "up_proj", None))
        down, act = getattr(mlp, "down_proj", None), getattr(mlp, "act_fn", None)
        if gate_up is None or not isinstance(down, nn.Module) or not callable(act):
            return None
        fused = cls(gate_up, down, act)
        return fused if agrees(mlp, fused, _random((1, 3, gate_up.in_features), gate_up.weight)) else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        out: torch.Tensor = self.down_proj(self.act_fn(gate) * up)
        return out
