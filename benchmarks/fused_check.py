"""Probe: which of a draft's modules kept transformers' forward, and by how much each check missed.

A draft made from the target replaces its norms, attentions and MLPs by fused forms only where a check, run once
at the draft's build, finds the fused form computing what the original computes (``core/drafting/draft_layers.py``). A
module that fails the check silently keeps its slower forward. This builds the default draft (int4) of a model on
a device and dtype, as a speculative run does, and prints each layer's modules, and for every check the largest
difference, the output's largest value, and whether an entry-by-entry tolerance (atol and rtol 0.02, the rule
before the current one) would have passed it.

On the H200 (2026-11-27), SmolLM2 in bf16: 7 of its 30 attentions failed that entry-by-entry rule (outputs up to
560, differences of one or two units in bf16's last place at that size) and kept transformers' forward, as they do
on the CPU in bf16. The current rule adds 5 % of the output's root mean square to the tolerance and fuses all 30.

The Phi-3-mini-sized model's attentions failed that rule too (a difference of 0.0625 in outputs up to 15), which the
H200 showed only as 728 kernels a step where a fused draft launches 530.

    python benchmarks/fused_check.py --device cuda --dtype bfloat16
    python benchmarks/fused_check.py --model phi3-sized --layers 2
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from decode_tui.core.drafting import draft_layers

sys.path.insert(0, str(Path(__file__).resolve().parent))


@dataclass(frozen=True)
class Check:
    passed: bool  # under the current rule
    shape: tuple[int, ...]
    largest_difference: float
    largest_value: float
    entrywise: bool  # under atol = rtol = 0.02 entry by entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="a model spec, or phi3-sized: benchmarks/gpu.py's "
                        "Phi-3-mini-sized model with random weights, --layers of its 32 layers")
    parser.add_argument("--layers", type=int, default=2, help="phi3-sized: how many layers (each alike)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()

    checks: list[Check] = []
    close = draft_layers._close

    def recorded(got: torch.Tensor, expected: torch.Tensor) -> bool:
        # Wraps the check's comparison to see its numbers; the draft's build is otherwise the app's own.
        passed = close(got, expected)
        g, e = got.float(), expected.float()
        checks.append(Check(passed, tuple(expected.shape), float((g - e).abs().max()), float(e.abs().max()),
                            bool(torch.allclose(g, e, rtol=2e-2, atol=2e-2))))
        return passed

    draft_layers._close = recorded
    from decode_tui.core.drafting import target_drafts
    from decode_tui.core.params import DraftParams, target_draft

    made = target_draft(DraftParams().draft)  # the default draft, as a speculative run builds it
    assert made is not None
    draft = target_drafts.build(target(args.model, args.layers, args.device, args.dtype), made)
    for i, layer in enumerate(cast(Any, draft).model.layers):
        print(f"layer {i:2}: {type(layer.self_attn).__name__}, {type(layer.mlp).__name__}, "
              f"{type(layer.input_layernorm).__name__}")
    for c in checks:
        if not (c.passed and c.entrywise):
            print(f"check {c.shape}: passed {c.passed}, entry by entry {c.entrywise}, largest difference "
                  f"{c.largest_difference:.3g} of values up to {c.largest_value:.3g}")
    print(f"checks {len(checks)}, failed {sum(not c.passed for c in checks)}, "
          f"failed entry by entry {sum(not c.entrywise for c in checks)}; "
          f"kept of transformers' modules {draft_layers.kept(draft, made.bits is not None) or 'none'}")


def target(spec: str, layers: int, device: str, dtype: str) -> Any:
    """The target model: ``spec`` loaded as the app loads it, or the Phi-3-mini-sized one of ``gpu.py``."""
    if spec == "phi3-sized":
        from gpu import phi3_sized

        return phi3_sized(torch.device(device), getattr(torch, dtype), tiny=False, layers=layers).model
    from decode_tui.core.model.embedded import pull
    from decode_tui.core.model.loading import load_model
    from decode_tui.core.model.registry import resolve

    if spec == "smollm2":
        pull("smollm2")
    return load_model(resolve(spec), device=device, dtype=dtype).model


if __name__ == "__main__":
    main()
