"""Greedy in float32 (the control's default on a CPU) against greedy in bfloat16 as ``--dtype auto`` now loads it on
a CPU with AMX (packed weights, the exact attention), in one process, alternated, on the three open-ended prompts:
tok/s of each run and the rounds' ratios. From the repository root with the venv active:

    python benchmarks/results/cpu-2026-12-06-bf16/greedy_by_dtype.py [--rounds 5] [--max-new-tokens 96]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from decode_tui.core.model.loading import load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.params import DecodeConfig
from decode_tui.core.record.events import Finished
from decode_tui.core.run import Run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    args = parser.parse_args()
    prompts = [json.loads(line)["prompt"] for line in (Path(__file__).parent / "open.jsonl").open()]
    models = {dtype: load_model(resolve("smollm2"), device="cpu", dtype=dtype) for dtype in ("float32", "bfloat16")}
    config = DecodeConfig(mode="greedy", max_new_tokens=args.max_new_tokens, seed=0)
    for prompt in prompts:
        rates: dict[str, list[float]] = {dtype: [] for dtype in models}
        for _ in range(args.rounds + 1):  # the first round warms up and is dropped
            for dtype, lm in models.items():
                start = time.perf_counter()
                done = list(Run(lm, prompt, config, None).events())[-1]
                assert isinstance(done, Finished)
                rates[dtype].append(len(done.token_ids) / (time.perf_counter() - start))
        ratios = [b / f for f, b in zip(rates["float32"][1:], rates["bfloat16"][1:], strict=True)]
        print(f"{prompt[:40]!r}: float32 {statistics.median(rates['float32'][1:]):.1f} tok/s "
              f"({min(rates['float32'][1:]):.1f}-{max(rates['float32'][1:]):.1f}), bfloat16 "
              f"{statistics.median(rates['bfloat16'][1:]):.1f} ({min(rates['bfloat16'][1:]):.1f}-"
              f"{max(rates['bfloat16'][1:]):.1f}); bfloat16 over float32 {statistics.median(ratios):.3f}x "
              f"({min(ratios):.3f}-{max(ratios):.3f})", flush=True)


if __name__ == "__main__":
    main()
