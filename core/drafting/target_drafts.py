"""Drafts made from the target itself: no second checkpoint, no download, the same tokenizer by construction.

A spec names what the draft keeps of the target, parts joined by ``+``:

- ``int4``: every Linear layer, the head included, as 4-bit weights in groups
  of 32 along the input, each group with a scale and an offset (the layout of
  the embedded GGUF's Q4_1 blocks, which the embedded model was de-quantised
  from), multiplied in bf16 by torch's own CPU kernel: a fraction of a target
  step, and its argmax mostly agrees with the target's (BENCHMARKS.md, "Each
  mode on the CPU").
- ``int8``: the same with 8-bit weights, one scale per output row. Exact on
  CUDA too, but no draft there: torch's int8 weight-only CUDA kernel is many
  times slower than a bf16 product, and the draft says so.
- ``layers:N``: the target's first N decoder layers, then its final norm and
  head (early exit, as in LayerSkip and transformers' ``assistant_early_exit``).
  It shares the target's weights, so it costs no memory; a model not trained
  to exit early agrees with itself rarely this way (SmolLM2: under half the
  positions at 26 of 30 layers).

``self`` (the target verbatim) is not built here. Everything that is not
quantised is shared with the target: the embedding, the norms' weights are cast
copies of a few KB, the tokenizer is the target's.

Every draft built here also computes its layers with fewer kernels than transformers' own
(:mod:`.draft_layers`: fused RMS norms, the rotary embedding in one pass, a quantised draft's query, key and value
products joined into one, and its gate and up products): a draft's step on a GPU is mostly small kernels, which it
pays as the target does whatever its weights' precision, so they are where a draft gets cheaper than its target
(BENCHMARKS.md). The target keeps transformers' own modules, whose tokens ``generate`` defines.

Why by hand: torchao's int4 CPU layout is gone from its current release and
its int8 weight-only path has no fast eager CPU kernel (0.76 of a target step
against 0.39 here); ``torch.ao.quantization.quantize_dynamic`` is deprecated and
quantises each call's activations per tensor, which costs acceptance (61 % on
the open-ended story). The kernels below, ``_weight_int4pack_mm_for_cpu`` and
``_weight_int8pack_mm``, are the ones torchao and gpt-fast call on the CPU;
``_weight_int4pack_mm`` is the one gpt-fast calls on CUDA.

Whether a device can run a quantised draft is not guessed from its name:
:func:`unavailable` multiplies a small matrix whose 4- or 8-bit form is exact
with the device's kernel and compares it with the plain product. A device with
no kernel, a torch that lacks one, a GPU the kernel does not support, or a
packing that came out wrong all fail that check, and the draft is refused (or,
when nobody named it, replaced: :func:`decode_tui.core.drafting.draft_models.load_draft`).

It knows how to build a draft module; nothing of drafting or verifying.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import gc
from typing import TYPE_CHECKING, Any

import torch

from ..errors import UsageError, first_line
from ..model import cpu_bf16
from ..params import TargetDraft
from . import draft_layers

if TYPE_CHECKING:
    from transformers import PreTrainedModel

GROUP = 32  # int4: weights per group sharing a scale and an offset (the GGUF's Q4_1 block)
ROWS = 1024  # rows quantised at a time (a multiple of the int4 layout's 64-row blocks)
# The int4 packing's "inner k tiles": how many 16-wide tiles of the input dimension the CUDA kernel interleaves
# for one wide load (gpt-fast uses 8). The CPU packing keeps the rows as they are, two 4-bit values a byte, and
# ignores it (its output is [N, K/2] whatever the value), so it is 1 there: no tiling. On CUDA the count must
# divide the input's tiles: SmolLM2's 576 inputs are 36 tiles, so 4 (:func:`inner_k_tiles`).
INNER_K_TILES = 1
COMPUTE = torch.bfloat16  # the quantised kernels' input type: the CUDA kernels' only one, the CPU's fast one
# torch's kernels by device type: (pack int4, multiply int4, multiply int8).
KERNELS: dict[str, tuple[str, str, str]] = {
    "cpu": ("_convert_weight_to_int4pack_for_cpu", "_weight_int4pack_mm_for_cpu", "_weight_int8pack_mm"),
    "cuda": ("_convert_weight_to_int4pack", "_weight_int4pack_mm", "_weight_int8pack_mm"),
}


def inner_k_tiles(in_features: int, device: torch.device) -> int:
    """The CUDA packing's inner k tiles for an input of ``in_features``: the most of 8, 4, 2 that divides its
    16-wide tiles (the kernel needs the tiles to be a multiple of it). INNER_K_TILES on the CPU."""
    if device.type == "cpu":
        return INNER_K_TILES
    tiles = in_features // 16
    return next(t for t in (8, 4, 2) if tiles % t == 0)  # GROUP (32) divides in_features: 2 always does


def check(draft: TargetDraft, model: PreTrainedModel, spec: str) -> None:
    """A UsageError when ``model`` cannot give this draft: too many or too few layers, or a quantised draft on a
    device whose kernel is missing or fails (:func:`unavailable`)."""
    total = len(_layers(model))
    if draft.layers is not None and not 1 <= draft.layers <= total - 1:
        raise UsageError(f"--draft {spec}: the target has {total} decoder layers, so N must be between 1 and "
                         f"{total - 1} (all {total} would be the target itself: use --draft self).")
    why = unavailable(draft, model)
    if why is not None:
        raise UsageError(f"--draft {spec}: {why}. Pass --draft layers:N, --draft self or --draft with a smaller "
                         "model of the same family.")


_WORKS: dict[tuple[int, str], str | None] = {}  # (bits, device): why its kernel cannot serve, None if it can


def unavailable(draft: TargetDraft, model: PreTrainedModel) -> str | None:
    """Why this draft's quantised layers cannot run where ``model`` is, in words for a message; None if they can
    (or the draft is not quantised). Checked once per device by a product whose quantised form is exact."""
    if draft.bits is None:
        return None
    device = next(model.parameters()).device
    key = (draft.bits, str(device))
    if key not in _WORKS:
        _WORKS[key] = _probe(draft.bits, device)
    return _WORKS[key]


def _probe(bits: int, device: torch.device) -> str | None:
    names = KERNELS.get(device.type)
    if names is None:
        return f"torch has no int{bits} kernel for {device.type} (the target is on {device})"
    needed = names[:2] if bits == 4 else names[2:]
    if not all(hasattr(torch.ops.aten, name) for name in needed):
        return f"this torch ({torch.__version__}) has no int{bits} kernel for {device.type}"
    # Weights the quantisation keeps exactly: small integers, each group's (or row's) range from 0 to 15 (int4)
    # or reaching 127 (int8), so scale 1 and zero 0; inputs small integers. The kernel's product must then be the
    # plain one, up to bf16 rounding; a wrong packing or a kernel the device lacks gives something else or raises.
    generator = torch.Generator().manual_seed(0)
    n, k = 32, 128
    if bits == 4:
        w = torch.randint(0, 16, (n, k), generator=generator).float()
        w[:, ::GROUP], w[:, 1::GROUP] = 0, 15
    else:
        w = torch.randint(-127, 128, (n, k), generator=generator).float()
        w[:, 0] = 127
    x = torch.randint(-2, 3, (3, k), generator=generator).float()
    try:
        linear = torch.nn.Linear(k, n, bias=False)
        linear.weight.data = w.to(device)
        quantised = (Int4Linear if bits == 4 else Int8Linear)(linear)
        got = quantised(x.to(device)).float().cpu()
    except Exception as exc:  # whatever the kernel raised, the message names it; nothing else depends on it
        return f"torch's int{bits} kernel does not run on {device} ({first_line(exc, 160)})"
    if not torch.allclose(got, x @ w.T, rtol=1e-2, atol=1.0):
        return f"torch's int{bits} kernel gives wrong products on {device}"
    return None


def tree_over(model: PreTrainedModel, draft: TargetDraft) -> PreTrainedModel:
    """A deep copy of ``model``'s module tree whose memo maps every parameter and buffer to itself (nothing of the
    target's weights is copied), cut to the draft's layers: what :func:`build` fuses and quantises."""
    shared: dict[int, Any] = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    clone: PreTrainedModel = copy.deepcopy(model, memo=shared)
    cpu_bf16.unprepare(clone)  # a draft need not give a step's bits: transformers' faster attention
    if draft.layers is not None:
        _keep_layers(clone, draft.layers)
    return clone


def build(model: PreTrainedModel, draft: TargetDraft) -> PreTrainedModel:
    """The draft module: a new module tree over the target's own tensors, with quantised copies where asked.

    The tree is a deep copy whose memo maps every parameter and buffer to itself, so nothing of the target's
    weights is copied; only the quantised Linear layers (and the cast norm weights) are new memory."""
    clone = tree_over(model, draft)
    # Fused before quantising, so that the products it joins are quantised as one.
    draft_layers.fuse(clone, join_products=draft.bits is not None)
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
    """y = x W^T with W in 4 bits: w = (q - 8) * scale + zero per group of 32 inputs (torch's int4 layout, on
    the CPU and on CUDA; a Q4_1 block's w = d q + m is the same with scale = d, zero = m + 8 d)."""

    @staticmethod
    def fits(linear: torch.nn.Linear) -> bool:  # CUDA's layout wants rows in eights; the CPU's in sixteens
        return linear.in_features % GROUP == 0 and linear.out_features % 16 == 0

    def __init__(self, linear: torch.nn.Linear, group: int = GROUP) -> None:
        # ``group`` other than GROUP is for benchmarks/gpu.py, which times the products at gpt-fast's 128 too.
        super().__init__(linear)
        self.group = group
        packed, scales_and_zeros = [], []
        device = linear.weight.device
        pack_name, mm_name, _ = KERNELS.get(device.type, KERNELS["cpu"])
        self.mm = getattr(torch.ops.aten, mm_name)
        tiles = inner_k_tiles(linear.in_features, device)
        # By slices of rows, so what quantising allocates in passing stays a few MB (the 49k-row head at once
        # would be four 113 MB temporaries). The packed layout is row-blocked: slices of a multiple of 64 rows
        # pack to the whole's bytes.
        for rows in torch.split(linear.weight.detach(), ROWS):
            n, k = rows.shape
            w = rows.float().reshape(n, k // group, group)  # [n, K/G, G]
            low, high = w.amin(-1), w.amax(-1)  # [n, K/G]
            scale = ((high - low) / 15).clamp(min=1e-8)
            q = torch.round((w - low[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).reshape(n, k)
            if device.type != "cpu":  # CUDA packs bytes: two values a byte, the even column in the high nibble
                q = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)  # [n, K/2]
            packed.append(getattr(torch.ops.aten, pack_name)(q, tiles))
            scales_and_zeros.append(torch.stack([scale, low + 8 * scale], -1).to(COMPUTE))  # [n, K/G, 2]
        self.register_buffer("packed", torch.cat(packed))
        # [K/G, N, 2]: (scale, zero) per group and output, as the kernel wants them.
        self.register_buffer("scales_and_zeros", torch.cat(scales_and_zeros).transpose(0, 1).contiguous())

    def matmul(self, flat: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.mm(flat.contiguous(), self.packed, self.group, self.scales_and_zeros)
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
