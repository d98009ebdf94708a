"""Drafts made from the target itself: no second checkpoint, no download, the same tokenizer by construction.

A spec names what the draft keeps of the target, parts joined by ``+``:

- ``int4``: every Linear layer, the head included, as 4-bit weights in groups
  of 32 along the input, each group with a scale and an offset (the layout of
  the embedded GGUF's Q4_1 blocks, which the embedded model was de-quantised
  from), multiplied in bf16 by torch's own CPU kernel. About a quarter of a
  target step on a 2-core CPU, and the argmax agrees with the target's at
  about 98 % of positions (BENCHMARKS.md, the draft candidates).
- ``int8``: the same with 8-bit weights, one scale per output row.
- ``layers:N``: the target's first N decoder layers, then its final norm and
  head (early exit, as in LayerSkip and transformers' ``assistant_early_exit``).
  It shares the target's weights, so it costs no memory; a model not trained
  to exit early agrees with itself rarely this way (SmolLM2: under half the
  positions at 26 of 30 layers).

``self`` (the target verbatim) is not built here. Everything that is not
quantised is shared with the target: the embedding, the norms' weights are cast
copies of a few KB, the tokenizer is the target's.

Why by hand: torchao's int4 CPU layout is gone from its current release and
its int8 weight-only path has no fast eager CPU kernel (0.76 of a target step
against 0.39 here); ``torch.ao.quantization.quantize_dynamic`` is deprecated and
quantises each call's activations per tensor, which costs acceptance (61 % on
the open-ended story). The kernels below, ``_weight_int4pack_mm_for_cpu`` and
``_weight_int8pack_mm``, are the ones torchao and gpt-fast call on the CPU.

It knows how to build a draft module; nothing of drafting or verifying.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import gc
from typing import TYPE_CHECKING, Any

import torch

from .errors import UsageError
from .params import TargetDraft

if TYPE_CHECKING:
    from transformers import PreTrainedModel

GROUP = 32  # int4: weights per group sharing a scale and an offset (the GGUF's Q4_1 block)
ROWS = 1024  # rows quantised at a time (a multiple of the int4 layout's 64-row blocks)
# The int4 packing's "inner k tiles": how many 16-wide tiles of the input dimension the CUDA kernel interleaves
# (gpt-fast uses 8). The CPU packing keeps the rows as they are, two 4-bit values a byte, and ignores it (its
# output is [N, K/2] whatever the value), so it is 1: no tiling.
INNER_K_TILES = 1
COMPUTE = torch.bfloat16  # the quantised kernels' fast input type on the CPU (fp32 input: 25x slower)
def check(draft: TargetDraft, model: PreTrainedModel, spec: str) -> None:
    """A UsageError when ``model`` cannot give this draft: too many or too few layers, or a quantised draft of a
    model that is not on the CPU (the kernels are CPU kernels), or a torch that lacks them."""
    total = len(_layers(model))
    if draft.layers is not None and not 1 <= draft.layers <= total - 1:
        raise UsageError(f"--draft {spec}: the target has {total} decoder layers, so N must be between 1 and "
                         f"{total - 1} (all {total} would be the target itself: use --draft self).")
    if draft.bits is not None:
        device = next(model.parameters()).device
        if device.type != "cpu":
            raise UsageError(f"The int{draft.bits} draft uses a CPU kernel, and the target is on {device}. Pass "
                             "--draft layers:N, --draft self or --draft with a smaller model of the same family.")
        if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu" if draft.bits == 4 else "_weight_int8pack_mm"):
            raise UsageError(f"This torch ({torch.__version__}) has no int{draft.bits} CPU kernel. Install "
                             "torch>=2.6, or pass --draft layers:N or --draft self.")


def build(model: PreTrainedModel, draft: TargetDraft) -> PreTrainedModel:
    """The draft module: a new module tree over the target's own tensors, with quantised copies where asked.

    The tree is a deep copy whose memo maps every parameter and buffer to itself, so nothing of the target's
    weights is copied; only the quantised Linear layers (and the cast norm weights) are new memory."""
    shared: dict[int, Any] = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    clone: PreTrainedModel = copy.deepcopy(model, memo=shared)
    if draft.layers is not None:
        _keep_layers(clone, draft.layers)
    if draft.bits is not None:
        _quantise(clone, draft.bits)
    clone.eval()
    gc.collect()
    _trim_heap()
    return clone


def kv_dtype(model: PreTrainedModel, draft: TargetDraft) -> torch.dtype:
    """The dtype of the keys and values the draft ``build`` makes of ``model`` computes: a quantised draft's
    layers compute in COMPUTE."""
    return COMPUTE if draft.bits is not None else model.dtype


def _trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's malloc_trim). Quantising frees its temporaries,
    but glibc keeps freed pages below its mmap threshold in the process, where they count as resident for
    good: about 150 MB with the int4 draft of the embedded model. No library call does this; elsewhere than
    glibc it is a no-op."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _layers(model: PreTrainedModel) -> torch.nn.ModuleList:
    base = getattr(model, model.base_model_prefix, model)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList):
        raise UsageError(f"{type(model).__name__} keeps its decoder layers where decode-tui does not look "
                         "(model.layers), so it cannot draft with its first layers. Pass --draft int4 or self.")
    return layers


def _keep_layers(clone: PreTrainedModel, n: int) -> None:
    base = getattr(clone, clone.base_model_prefix, clone)
    base.layers = torch.nn.ModuleList(list(_layers(clone))[:n])  # the first n, their layer_idx already 0..n-1
    for config in {id(c): c for c in (clone.config, getattr(base, "config", clone.config))}.values():
        config.num_hidden_layers = n
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[:n]


def _quantise(clone: PreTrainedModel, bits: int) -> None:
    """Every Linear to ``bits``, every other floating tensor the draft owns to bf16; the embedding stays the
    target's, its rows cast as they are looked up."""
    linear = Int4Linear if bits == 4 else Int8Linear
    for module in list(clone.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear) and linear.fits(child):
                setattr(module, name, linear(child))
            elif isinstance(child, torch.nn.Embedding):
                setattr(module, name, CastEmbedding(child))
    for module in clone.modules():
        if isinstance(module, (_QuantisedLinear, CastEmbedding)):
            continue
        for name, param in list(module.named_parameters(recurse=False)):
            # Norm weights (and any Linear left whole): small, and bf16 keeps every activation in one dtype.
            setattr(module, name, torch.nn.Parameter(param.detach().to(COMPUTE), requires_grad=False))
    clone.config.dtype = COMPUTE  # what the masks and the rotary tables are built in


class CastEmbedding(torch.nn.Module):
    """The target's embedding table, shared, with the looked-up rows cast to the draft's compute dtype."""

    def __init__(self, embedding: torch.nn.Embedding) -> None:
        super().__init__()
        self.inner = [embedding]  # a list: not registered as a submodule, so it is not quantised nor cast
        self.weight = embedding.weight  # get_input_embeddings().weight, as callers expect: the target's own

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows: torch.Tensor = self.inner[0](ids)
        return rows.to(COMPUTE)


class _QuantisedLinear(torch.nn.Module):
    """What the quantised layers share: the bias in bf16, and inputs flattened to [M, K] in bf16 for the kernel."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().to(COMPUTE), False)

    def matmul(self, flat: torch.Tensor) -> torch.Tensor:
        """[M, K] bf16 -> [M, N]: the kernel's product with the quantised W^T."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.matmul(x.reshape(-1, x.shape[-1]).to(COMPUTE)).reshape(*x.shape[:-1], -1)
        return y if self.bias is None else y + self.bias


class Int4Linear(_QuantisedLinear):
    """y = x W^T with W in 4 bits: w = (q - 8) * scale + zero per group of 32 inputs (torch's int4 CPU layout;
    a Q4_1 block's w = d q + m is the same with scale = d, zero = m + 8 d)."""

    @staticmethod
    def fits(linear: torch.nn.Linear) -> bool:
        return linear.in_features % GROUP == 0 and linear.out_features % 16 == 0

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__(linear)
        packed, scales_and_zeros = [], []
        # By slices of rows, so what quantising allocates in passing stays a few MB (the 49k-row head at once
        # would be four 113 MB temporaries). The packed layout is row-blocked: slices of a multiple of 64 rows
        # pack to the whole's bytes.
        for rows in torch.split(linear.weight.detach(), ROWS):
            n, k = rows.shape
            w = rows.float().reshape(n, k // GROUP, GROUP)  # [n, K/G, G]
            low, high = w.amin(-1), w.amax(-1)  # [n, K/G]
            scale = ((high - low) / 15).clamp(min=1e-8)
            q = torch.round((w - low[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).reshape(n, k)
            packed.append(torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, INNER_K_TILES))
            scales_and_zeros.append(torch.stack([scale, low + 8 * scale], -1).to(COMPUTE))  # [n, K/G, 2]
        self.register_buffer("packed", torch.cat(packed))
        # [K/G, N, 2]: (scale, zero) per group and output, as the kernel wants them.
        self.register_buffer("scales_and_zeros", torch.cat(scales_and_zeros).transpose(0, 1).contiguous())

    def matmul(self, flat: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, GROUP, self.scales_and_zeros)
        return y


class Int8Linear(_QuantisedLinear):
    """y = x W^T with W in 8 bits, one scale per output row (symmetric)."""

    @staticmethod
    def fits(linear: torch.nn.Linear) -> bool:
        return True

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__(linear)
        weights, scales = [], []
        for rows in torch.split(linear.weight.detach(), ROWS):  # by slices, as Int4Linear does
            w = rows.float()  # [n, K]
            scale = w.abs().amax(1).clamp(min=1e-12) / 127  # [n]
            weights.append(torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
            scales.append(scale.to(COMPUTE))
        self.register_buffer("weight_int8", torch.cat(weights))
        self.register_buffer("scales", torch.cat(scales))

    def matmul(self, flat: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = torch.ops.aten._weight_int8pack_mm(flat, self.weight_int8, self.scales)
        return y
