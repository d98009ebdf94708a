"""What the exact attention adds to a wide forward on this CPU: the embedded model in bfloat16 as ``--dtype auto``
loads it here (packed products, the float64 attention of ``core/model/cpu_bf16.py``), a forward over n positions
timed with that attention and with transformers' SDPA in bfloat16 (faster, not a step's bits), both in one process,
the cells alternated, after 94 and 200 tokens of context. From the repository root with the venv active:

    python benchmarks/results/cpu-2026-12-07-amd-history/attention_price.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from decode_tui.core.execution.forward import forward, new_cache, rollback
from decode_tui.core.model import cpu_bf16
from decode_tui.core.model.loading import load_model
from decode_tui.core.model.registry import resolve

WIDTHS = (1, 4, 8, 12, 16)
ATTENTIONS = (cpu_bf16.EXACT_ATTENTION, "sdpa")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    model = load_model(resolve("smollm2"), device="cpu", dtype="bfloat16").model
    assert model.config._attn_implementation == cpu_bf16.EXACT_ATTENTION, "not a CPU with bfloat16 products"
    for context in (94, 200):
        ids = torch.randint(0, 49152, (1, context + max(WIDTHS)), generator=torch.Generator().manual_seed(context))
        cache = new_cache(model, rollback=True)
        cells = [(a, w) for a in ATTENTIONS for w in WIDTHS]
        samples: dict[tuple[str, int], list[float]] = {cell: [] for cell in cells}
        with torch.inference_mode():
            forward(model, ids[:, :context], cache)
            for r in range(args.rounds + 1):  # the first round warms up and is dropped
                for attention, w in cells if r % 2 == 0 else reversed(cells):
                    model.set_attn_implementation(attention)
                    started = time.perf_counter()
                    forward(model, ids[:, context : context + w], cache, keep=w)
                    if r:
                        samples[(attention, w)].append(time.perf_counter() - started)
                    rollback(cache, context)
        model.set_attn_implementation(cpu_bf16.EXACT_ATTENTION)
        step = statistics.median(samples[(cpu_bf16.EXACT_ATTENTION, 1)])  # both priced in the exact model's steps
        for attention in ATTENTIONS:
            print(f"context {context}, {attention}: " + "  ".join(
                f"{w}: {statistics.median(samples[(attention, w)]) * 1e3:.1f} ms "
                f"({statistics.median(samples[(attention, w)]) / step:.2f})" for w in WIDTHS), flush=True)


if __name__ == "__main__":
    main()
