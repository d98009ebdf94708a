"""A bfloat16 model made ready for a CPU with bfloat16 products in hardware: weights packed once for them, and an
attention whose wide passes give the bits of one-token steps.

On a CPU whose cores multiply bfloat16 in hardware, in AMX tiles (Intel Xeon since Sapphire Rapids) or with
AVX-512's bfloat16 dot products (``avx512_bf16``: AMD since Zen 4, Intel since Cooper Lake), a bfloat16 product of 1
to 16 rows takes about the time of one row, where a float32 one of 8 rows takes one and a half to twice a row's
(BENCHMARKS.md, "Width in float32 and in bfloat16 on the Intel CPU" and "bfloat16 by default on the AMD CPU"): the
width that drafting verifies is nearly free there. Two things stand in the way, and this module removes both:

- **Speed.** torch's bfloat16 ``linear`` on a CPU hands oneDNN the weight as it is, and oneDNN reorders it into its
  blocked layout on every call, so a one-token step in bfloat16 is slower than in float32. :class:`PackedLinear`
  reorders each weight once, at load (``torch.ops.mkldnn._reorder_linear_weight``, what Inductor's freezing pass
  does for the same reason), and calls oneDNN's product on it (``torch.ops.mkldnn._linear_pointwise``).
- **Exactness.** Drafting gives greedy's text only where a forward over k positions computes what k one-token
  steps would. The packed product does, row for row, up to :data:`ROWS` rows (wider products take another
  kernel), so a wider pass is split into blocks of that many rows; and only over sums of up to :data:`INPUTS`
  terms (AVX-512's kernel blocks a longer sum by the number of rows), so a wider layer is split into products over
  that many inputs, their float32 sums added in order and rounded once. PyTorch's SDPA kernel does not: over a cache
  that grows, a step's keys and a wide pass's differ in number, and its bfloat16 result with them, enough to tip a
  near-tie (BENCHMARKS.md, "Width in float32 and in bfloat16 on the Intel CPU"); nor does a float32 attention
  built of matrix products, whose kernels order a sum by the number of rows and keys on some CPUs (AMD's: "bfloat16
  by default on the AMD CPU"). :func:`attention` (registered as :data:`EXACT_ATTENTION`) is the same SDPA kernel in
  float64: a float64 sum of a few thousand terms errs by about 2^-40 of its size whichever order a kernel takes them
  in, where the bfloat16 result is rounded at 2^-8, so the rounded result is the same bits, short of a tie at odds
  of about 2^-32. A token tree's node then gets its one-token step's bits whatever its cousins, and a chain's pass
  its steps' bits.

A model copied (``copy.deepcopy``, as a draft made from the target is) gets plain ``nn.Linear`` layers back: a
copy is made to change its weights, and the packed ones would no longer match; :func:`unprepare` gives it
transformers' SDPA back.

It knows transformers' attention registry and oneDNN's packed products; nothing of caches, drafts or decoding.
"""

from __future__ import annotations

import copy
from typing import Any, cast

import torch
from torch import nn

EXACT_ATTENTION = "decode_tui_cpu_bf16"  # SDPA in float64 (:func:`attention`, registered by :func:`prepare`)
ROWS = 32  # the widest product whose every row is the one-row product's bits (tests/test_cpu_bf16.py)
INPUTS = 1024  # the longest sum per output that every kernel runs alike at every row count (tests/test_cpu_bf16.py)
PACKED_FOR = 16  # the rows oneDNN lays a packed weight out for; the widths drafting verifies on a CPU


def bf16_products() -> bool:
    """Whether this CPU multiplies bfloat16 in hardware (AMX tiles, or AVX-512's bfloat16 dot products), and torch
    can reach them through oneDNN. Without either, oneDNN widens bfloat16 to float32 in software, which is slower than
    float32 throughout."""
    supported = [getattr(torch.cpu, name, None) for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported")]
    return bool(torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]
                and any(check is not None and check() for check in supported))


class PackedLinear(nn.Linear):
    """``nn.Linear`` whose product runs on a weight packed once for oneDNN; ``weight`` stays, for whoever reads it.
    A layer of more than :data:`INPUTS` inputs is packed as several, one per block of that many inputs."""

    packed: list[torch.Tensor]  # each [out, <=INPUTS] in oneDNN's opaque layout, the inputs' blocks in order

    def pack(self) -> None:
        """Pack ``weight`` for oneDNN, in blocks of at most :data:`INPUTS` inputs."""
        self.packed = [torch.ops.mkldnn._reorder_linear_weight(block, PACKED_FOR)
                       for block in torch.split(self.weight.detach(), INPUTS, dim=1)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [..., in]
        rows = x.reshape(-1, x.shape[-1])  # [N, in]
        products = [self._product(block) for block in torch.split(rows, ROWS)]  # each [<=ROWS, out]
        y = products[0] if len(products) == 1 else torch.cat(products)  # [N, out]
        return y.reshape(*x.shape[:-1], y.shape[-1])

    def _product(self, rows: torch.Tensor) -> torch.Tensor:  # rows [<=ROWS, in] -> [<=ROWS, out]
        if len(self.packed) == 1:
            one: torch.Tensor = torch.ops.mkldnn._linear_pointwise(rows, self.packed[0], self.bias, "none", [], "")
            return one
        # float32, [<=ROWS, out]: the blocks' products added in order, rounded to bfloat16 once
        total = torch.zeros(rows.shape[0], self.out_features) if self.bias is None else self.bias.float().expand(
            rows.shape[0], -1).clone()
        for block, packed in zip(torch.split(rows, INPUTS, dim=1), self.packed, strict=True):
            total += torch.ops.mkldnn._linear_pointwise(block, packed, None, "none", [], "")
        return total.to(rows.dtype)

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
    """transformers' attention interface over torch's SDPA in float64, so that a token's result is the same bits
    whether its pass is a one-token step, a chain or a token tree (where a node's ancestors sit among its masked
    cousins, which add exact zeros). query [B, H, T, D]; key, value [B, Hkv, S, D]; attention_mask [B, 1, T, >=S]
    additive, or None."""
    mask = None if attention_mask is None else attention_mask[:, :, :, : key.shape[2]].double()
    out = torch.nn.functional.scaled_dot_product_attention(query.double(), key.double(), value.double(),
                                                           attn_mask=mask, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).to(query.dtype), None  # [B, T, H, D]


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
        cast(PackedLinear, linear).pack()
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
