"""Benchmark: what one decoding step launches, layer by layer: the target's ops against a draft made from it.

On a GPU every op of a step (but a view) is a kernel, and a decoding step of a small model, or the part of a
big one's step that is not a weight product, costs about a kernel's launch and tail each: so the count is the
cost a draft pays whatever its weights' precision. This counts the ops of one step (one token, a static cache)
with a dispatch mode, which sees what the device would launch, on a model of the architecture built small from
its config (the count does not depend on the width), by kind: the weight products, the RMS norms and the rest.
A draft's layers are fused (``decode_tui.core.drafting.draft_layers``): its norms are ``F.rms_norm``, on CUDA one kernel
each (torch's fused RMS norm), which the CPU decomposes, so a fused norm counts as one op here, as it launches on
CUDA; its rotary runs over queries and keys at once, its q/k/v and gate/up products are joined, and its passes build
their attention mask as floats, once, where torch's attention converts a boolean one in every layer (two ops, counted
here though they run inside the attention's one op). The step runs on decode-tui's static cache, whose layers share
one write position (``--hf-cache``: transformers' StaticCache; ``--bool-masks``: the draft's masks as its target's).

    python benchmarks/step_kernels.py [--arch phi3,llama] [--whole] [--hf-cache] [--bool-masks]
"""

from __future__ import annotations

import argparse
import collections
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoConfig, AutoModelForCausalLM, StaticCache

from decode_tui.core.drafting import draft_layers, target_drafts
from decode_tui.core.execution.forward import new_cache
from decode_tui.core.params import TargetDraft

# Ops that launch nothing: views and metadata, and dropout in eval mode (it returns its input).
FREE = {"view", "_unsafe_view", "t", "transpose", "unsqueeze", "expand", "slice", "select", "reshape", "permute",
        "alias", "split", "chunk", "split_with_sizes", "squeeze", "detach", "detach_", "as_strided", "narrow",
        "_reshape_alias", "unbind", "dropout", "lift_fresh", "lift_fresh_copy"}
HF_CACHE = False  # count the step on transformers' StaticCache instead of decode-tui's StaticKV
BOOL_MASKS = False  # the draft on transformers' SDPA and its boolean masks, as its target
PRODUCTS = {"linear", "mm", "addmm", "matmul", "bmm", "_weight_int4pack_mm_for_cpu", "_weight_int4pack_mm",
            "_weight_int8pack_mm"}


class Census(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts each op by kind; inside a norm module only that norm is counted (once if fused, else op by op)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.counts: collections.Counter[str] = collections.Counter()
        self.in_norm: str | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.overloadpacket.__name__
        out = func(*args, **(kwargs or {}))
        # A cast to the dtype a tensor already has returns it as it is: nothing launched.
        cast_to_itself = name == "to" and out is args[0]
        if name == "scaled_dot_product_attention" and self.in_norm is None:
            mask = args[3] if len(args) > 3 else (kwargs or {}).get("attn_mask")
            if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
                # torch's attention turns a boolean mask into an additive one inside the call, where this mode does
                # not see it (convert_boolean_attn_mask): a scalar tensor filled on the device and a where.
                self.counts["other"] += 2
        if name not in FREE and not cast_to_itself:
            if self.in_norm == "fused":
                pass  # counted once, when the norm was entered
            elif self.in_norm == "norm":
                self.counts["norms"] += 1
            else:
                self.counts["products" if name in PRODUCTS else "other"] += 1
        return out


def watch_norms(model: torch.nn.Module, census: Census) -> None:
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            fused = isinstance(module, draft_layers.FusedRMSNorm)

            def enter(m: Any, a: Any, fused: bool = fused) -> None:
                census.in_norm = "fused" if fused else "norm"
                census.counts["norms"] += fused  # one kernel on CUDA

            def leave(m: Any, a: Any, out: Any) -> None:
                census.in_norm = None

            module.register_forward_pre_hook(enter)
            module.register_forward_hook(leave)


def step_ops(model: Any) -> collections.Counter[str]:
    # The static cache that CUDA graphs replay on (as StaticKV's layers share one write position, a pass
    # advances it once, where transformers' StaticCache does so in every layer); ``--hf-cache`` counts that one.
    cache = StaticCache(config=model.config, max_cache_len=32) if HF_CACHE else new_cache(model, graphs=True,
                                                                                          max_len=32)
    with torch.inference_mode():
        model(input_ids=torch.tensor([[5, 6, 7, 8]]), cache=cache, use_cache=True, cache_position=torch.arange(4))
        census = Census()
        watch_norms(model, census)
        with census:
            model(input_ids=torch.tensor([[9]]), cache=cache, use_cache=True, cache_position=torch.tensor([4]),
                  logits_to_keep=1)
    return census.counts


# Whole models' shapes, but narrow (the count does not depend on the width): layers, query heads, key/value heads.
# SmolLM2-135M's 9 query heads share 3 key/value heads, which transformers repeats for each layer's attention.
WHOLE = {"smollm2": ("llama", 30, 9, 3), "phi3-mini": ("phi3", 32, 4, 4)}


def built(arch: str, spec: TargetDraft | None, layers: int, heads: int = 4, kv_heads: int = 4) -> Any:
    config = AutoConfig.for_model(arch, vocab_size=32064, hidden_size=32 * heads, intermediate_size=256,
                                  num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                                  max_position_embeddings=256)
    torch.manual_seed(0)
    model: Any = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    if spec is not None:
        model = target_drafts.build(model, spec)
        if BOOL_MASKS:
            model.set_attn_implementation("sdpa")
    return model


def per_layer(arch: str, spec: TargetDraft | None) -> dict[str, float]:
    """Ops a decoder layer launches (the difference between three layers and two), by kind."""
    counts = [step_ops(built(arch, spec, layers)) for layers in (2, 3)]
    return {kind: counts[1][kind] - counts[0][kind] for kind in ("products", "norms", "other")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="phi3,llama", help="transformers model types, comma-separated")
    parser.add_argument("--hf-cache", action="store_true",
                        help="count a step on transformers' StaticCache (the control) instead of decode-tui's")
    parser.add_argument("--bool-masks", action="store_true",
                        help="the draft on transformers' SDPA and boolean masks (the control) instead of float ones")
    parser.add_argument("--whole", action="store_true", help="also count a whole step of SmolLM2's and Phi-3-mini's "
                                                               "shapes (layers and heads)")
    args = parser.parse_args()
    global HF_CACHE, BOOL_MASKS
    HF_CACHE, BOOL_MASKS = args.hf_cache, args.bool_masks
    drafts = (("target", None), ("int4 draft", TargetDraft(4)))
    for arch in args.arch.split(","):
        for name, spec in drafts:
            ops = per_layer(arch, spec)
            total = sum(ops.values())
            print(f"{arch:>6} {name:>10}: {total:g} ops a layer: {ops['products']:g} weight products, "
                  f"{ops['norms']:g} in the two RMS norms, {ops['other']:g} others "
                  f"({total - ops['products']:g} not products)", flush=True)
    if args.whole:
        for shape, (arch, layers, heads, kv_heads) in WHOLE.items():
            steps = {name: sum(step_ops(built(arch, spec, layers, heads, kv_heads)).values()) for name, spec in drafts}
            target, draft = steps["target"], steps["int4 draft"]
            print(f"{shape:>10}, a whole step ({layers} layers, {heads}/{kv_heads} heads): target {target} ops, "
                  f"int4 draft {draft} ({draft / target:.3f} of the target's)", flush=True)


if __name__ == "__main__":
    main()
