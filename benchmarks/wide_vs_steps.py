"""Whether a forward over several positions gives the same logits as one-position steps, by dtype, attention and cache.

Greedy-mode drafting gives greedy's text only where the target's verification of k positions computes what k
decoding steps would have, up to a rounding that never tips a near-tie. This measures it directly for the embedded
model on this machine: after a 60-token context, one forward over the next 8 tokens (a chain's verification) against
8 one-token steps over the same tokens, and prints the largest difference of any logit at each position (0: the same
bits) and whether the top tokens agree.

Found on the Intel CPU of 2026-12-06 (`results/cpu-2026-12-06-intel/`): in bfloat16 the matrix products are the same
bits at any width (AMX), and so is the whole forward with transformers' eager attention or a static cache; the
differences come from PyTorch's SDPA kernel over a cache that grows (transformers' default there).

    python benchmarks/wide_vs_steps.py [--dtypes float32,bfloat16]
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from transformers import AutoModelForCausalLM, DynamicCache, StaticCache

from decode_tui.core.model.embedded import pull
from decode_tui.core.model.registry import embedded_dir

CONTEXT, WIDTH = 60, 8


def differences(model: Any, static: bool) -> list[tuple[float, bool]]:
    """Per position of the wide pass: (largest |logit difference| to the step's, whether their top tokens agree)."""
    ids = torch.randint(0, model.config.vocab_size, (1, CONTEXT + WIDTH), generator=torch.Generator().manual_seed(1))

    def prefilled() -> Any:
        cache = StaticCache(config=model.config, max_cache_len=2 * (CONTEXT + WIDTH)) if static else DynamicCache()
        model(ids[:, :CONTEXT], past_key_values=cache, use_cache=True)
        return cache

    def run(cache: Any, start: int, end: int) -> torch.Tensor:
        logits: torch.Tensor = model(ids[:, start:end], past_key_values=cache, use_cache=True,
                                     cache_position=torch.arange(start, end)).logits
        return logits[0].float()  # [end - start, V]

    wide = run(prefilled(), CONTEXT, CONTEXT + WIDTH)
    cache = prefilled()
    steps = torch.cat([run(cache, CONTEXT + j, CONTEXT + j + 1) for j in range(WIDTH)])
    return [(float((wide[j] - steps[j]).abs().max()), bool(wide[j].argmax() == steps[j].argmax()))
            for j in range(WIDTH)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    args = parser.parse_args()
    pull("smollm2")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {CONTEXT}-token context, {WIDTH} positions")
    with torch.inference_mode():
        for dtype in args.dtypes.split(","):
            for attention in ("sdpa", "eager"):
                model = AutoModelForCausalLM.from_pretrained(embedded_dir("smollm2"), dtype=getattr(torch, dtype),
                                                             attn_implementation=attention).eval()
                for static in (False, True):
                    found = differences(model, static)
                    print(f"{dtype:>8} {attention:>5} {'static' if static else 'dynamic':>7} cache: largest "
                          f"difference {max(d for d, _ in found):.3g}, top tokens agree at "
                          f"{sum(a for _, a in found)} of {WIDTH}; by position "
                          + " ".join(f"{d:.2g}" for d, _ in found))


if __name__ == "__main__":
    main()
