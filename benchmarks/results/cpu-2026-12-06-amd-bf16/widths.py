"""The price of a forward over n positions on this CPU, in plain steps, the embedded model in float32 (the control's
default here) and in bfloat16 as ``--dtype auto`` now loads it on a CPU with AVX512-BF16 (packed weights, the
float64 attention): both models in one process, every width of both in turn, alternated, after 94 and 400 tokens of
context. From the repository root with the venv active:

    python benchmarks/results/cpu-2026-12-06-amd-bf16/widths.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from decode_tui.core.execution.forward import forward, new_cache, rollback
from decode_tui.core.model.loading import load_model
from decode_tui.core.model.registry import resolve

WIDTHS = (1, 2, 3, 4, 8, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    models = {dtype: load_model(resolve("smollm2"), device="cpu", dtype=dtype).model
              for dtype in ("float32", "bfloat16")}
    for context in (94, 400):
        ids = torch.randint(0, 49152, (1, context + max(WIDTHS)), generator=torch.Generator().manual_seed(context))
        caches = {dtype: new_cache(model, rollback=True) for dtype, model in models.items()}
        cells = [(dtype, w) for dtype in models for w in WIDTHS]
        samples: dict[tuple[str, int], list[float]] = {cell: [] for cell in cells}
        with torch.inference_mode():
            for dtype, model in models.items():
                forward(model, ids[:, :context], caches[dtype])
            for r in range(args.rounds + 1):  # the first round warms up and is dropped
                for dtype, w in cells if r % 2 == 0 else reversed(cells):
                    started = time.perf_counter()
                    forward(models[dtype], ids[:, context : context + w], caches[dtype], keep=w)
                    if r:
                        samples[(dtype, w)].append(time.perf_counter() - started)
                    rollback(caches[dtype], context)
        for dtype in models:
            step = statistics.median(samples[(dtype, 1)])
            print(f"context {context}, {dtype}: " + "  ".join(
                f"{w}: {statistics.median(samples[(dtype, w)]) * 1e3:.1f} ms "
                f"({statistics.median(samples[(dtype, w)]) / step:.2f})" for w in WIDTHS), flush=True)


if __name__ == "__main__":
    main()
