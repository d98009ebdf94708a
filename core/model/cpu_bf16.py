"""A bfloat16 model made ready for a CPU with AMX: weights packed once for the matrix units, and an attention whose
wide passes give the bits of one-token steps.

On a CPU whose cores have AMX (Intel Xeon since Sapphire Rapids) a bfloat16 product of 1 to 16 rows takes about
the time of one row, where a float32 one of 8 rows takes nearly twice a row's (BENCHMARKS.md, "Width in float32
and in bfloat16 on the Intel CPU"): the width that drafting verifies is nearly free there. Two things stand in the
way, and this module removes both:

- **Speed.** torch's bfloat16 ``linear`` on a CPU hands oneDNN the weight as it is, and oneDNN reorders it into its
  blocked layout on every call, so a one-token step in bfloat16 is slower than in float32. :class:`PackedLinear`
  reorders each weight once, at load (``torch.ops.mkldnn._reorder_linear_weight``, what Inductor's freezing pass
  does for the same reason), and calls oneDNN's product on it (``torch.ops.mkldnn._linear_pointwise``).
- **Exactness.** Drafting gives greedy's text only where a forward over k positions computes what k one-token
  steps would. The packed product does, row for row, up to :data:`ROWS` rows (wider products take another
  kernel), so a wider pass is split into blocks of that many rows. PyTorch's SDPA kernel does not: over a cache
  that grows, a step's keys and a wide pass's differ in number, and its bfloat16 result with them, enough to tip a
  near-tie (BENCHMARKS.md, "Width in float32 and in bfloat16 on the Intel CPU"). :func:`attention` (registered
  as :data:`EXACT_ATTENTION`) is grouped-query attention in float32 whose sums run in key order, so masked keys
  add exact zeros; its output is rounded to bfloat16 once. A token tree's node then gets its step's bits too,
  except where its ancestors straddle a block of :data:`KEYS` keys differently in the two (a rounding of the last
  float32 bit, which bfloat16's rounding of the output nearly always absorbs).

A model copied (``copy.deepcopy``, as a draft made from the target is) gets plain ``nn.Linear`` layers back: a
copy is made to change its weights, and the packed ones would no longer match; :func:`unprepare` gives it
transformers' SDPA back.

It knows transformers' attention registry and oneDNN's packed products; nothing of caches, drafts or decoding.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

EXACT_ATTENTION = "decode_tui_cpu_bf16"  # grouped-query attention in float32 (registered by :func:`prepare`)
ROWS = 32  # the widest product whose every row is the one-row product's bits (tests/test_cpu_bf16.py)
PACKED_FOR = 16  # the rows oneDNN lays a packed weight out for; the widths drafting verifies on a CPU
KEYS = 256  # the longest sum over keys that the CPU's float32 product runs in key order (tests/test_cpu_bf16.py)


def amx() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in AMX tiles, and torch can reach them through oneDNN."""
    is_amx = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(torch.backends.mkldnn.is_available() and is_amx is not None and is_amx())  # type: ignore[no-untyped-call]


class PackedLinear(nn.Linear):
    """``nn.Linear`` whose product runs on a weight packed once for oneDNN; ``weight`` stays, for whoever reads it."""

    packed: torch.Tensor  # [out, in] in oneDNN's opaque layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [..., in]
        rows = x.reshape(-1, x.shape[-1])  # [N, in]
        products = [torch.ops.mkldnn._linear_pointwise(block, self.packed, self.bias, "none", [], "")
                    for block in torch.split(rows, ROWS)]  # each [<=ROWS, out]
        y = products[0] if len(products) == 1 else torch.cat(products)  # [N, out]
        return y.reshape(*x.shape[:-1], y.shape[-1])

    def __deepcopy__(self, memo: dict[int, Any]) -> nn.Linear:
        plain = nn.Linear.__new__(nn.Linear)
        memo[id(self)] = plain
        for name, value in self.__dict__.items():
            if name != "packed":
                plain.__dict__[name] = copy.deepcopy(value, memo)
        return plain


def attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
              **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Softmax attention for transformers' attention interface, in float32, whose every sum over keys runs in key
    order, so that keys masked out add exact zeros wherever they sit: a token's result is then the same bits
    whether its pass is a one-token step, a chain or a token tree (where a node's ancestors sit among its
    masked cousins). query [B, H, T, D]; key, value [B, Hkv, S, D]; attention_mask [B, 1, T, >=S] additive, or None.

    The softmax's denominator is a running sum (``cumsum``: one pass in key order, where ``softmax``'s sum is
    vectorised across keys). The weighted sum of values is taken in blocks of :data:`KEYS` keys at fixed
    positions, added in order: the CPU's matrix product sums each block in key order, but splits a longer sum
    where its length falls."""
    B, H, T, D = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    scaling = D**-0.5 if scaling is None else scaling  # GPT-2 may leave it to the attention
    g = H // Hkv  # query heads per key head
    q = query.reshape(B, Hkv, g * T, D).float()  # [B, Hkv, g*T, D]: a group's heads as rows
    scores = torch.matmul(q, key.float().transpose(2, 3)) * scaling  # [B, Hkv, g*T, S]
    if attention_mask is not None:
        mask = attention_mask[:, :, None, :, :S].float()  # [B, 1, 1, T, S]
        scores = (scores.view(B, Hkv, g, T, S) + mask).view(B, Hkv, g * T, S)
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))  # [B, Hkv, g*T, S], 0 where masked
    z = e.cumsum(dim=-1)[..., -1:]  # [B, Hkv, g*T, 1]
    v = value.float()  # [B, Hkv, S, D]
    out = torch.matmul(e[..., :KEYS], v[:, :, :KEYS])  # [B, Hkv, g*T, D]
    for start in range(KEYS, S, KEYS):
        out += torch.matmul(e[..., start:start + KEYS], v[:, :, start:start + KEYS])
    return (out / z).view(B, H, T, D).transpose(1, 2).to(query.dtype), None  # [B, T, H, D]


def register() -> None:
    """Register :data:`EXACT_ATTENTION` with transformers, with eager attention's (additive, always built) mask."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(EXACT_ATTENTION, attention)
    AttentionMaskInterface.register(EXACT_ATTENTION, eager_mask)


def prepare(model: nn.Module) -> None:
    """Pack every linear layer of a bfloat16 ``model`` on the CPU and switch it from SDPA to :data:`EXACT_ATTENTION`."""
    register()
    for linear in [m for m in model.modules() if type(m) is nn.Linear and m.weight.dtype == torch.bfloat16]:
        linear.__class__ = PackedLinear
        linear.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), PACKED_FOR)
    # Only a model on transformers' SDPA, a plain softmax by construction: one whose attention is more (Gemma 2's
    # capped logits, gpt-oss's sinks) cannot run SDPA, so it loads on its own eager attention and keeps it.
    if getattr(getattr(model, "config", None), "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(EXACT_ATTENTION)  # type: ignore[operator]


def unprepare(model: nn.Module) -> None:
    """Switch a copy of a prepared model (whose layers are plain already) back to transformers' SDPA: a draft made
    from the target need not give a step's bits, and SDPA is the faster attention."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) == EXACT_ATTENTION:
        model.set_attn_implementation("sdpa")  # type: ignore[operator]
