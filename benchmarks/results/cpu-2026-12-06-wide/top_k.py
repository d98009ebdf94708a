"""torch.topk against recycling.top_ids (the blocked top-k) on logits of SmolLM2's vocabulary, as a recycling
round's observe() sees them: 1 row (a plain step) to 33 (a tree of 32 nodes), bfloat16 and float32, on the threads
the run uses. Rounds alternate the two, 200 calls each; median and range over 15 rounds, in ms a call.

    python benchmarks/results/cpu-2026-12-06-wide/top_k.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial

import torch

from decode_tui.core.drafting.recycling import top_ids

VOCAB, K, CALLS, ROUNDS = 49152, 8, 200, 15


def timed(f: Callable[[], torch.Tensor]) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        f()
    return (time.perf_counter() - started) / CALLS * 1e3


def main() -> None:
    torch.set_num_threads(2)
    for dtype in (torch.bfloat16, torch.float32):
        for rows in (1, 11, 17, 33):
            x = torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(rows)).to(dtype)
            assert torch.equal(x.gather(1, top_ids(x, K)), x.topk(K, dim=-1).values)
            calls: dict[str, Callable[[], torch.Tensor]] = {
                "torch.topk": partial(lambda t: t.topk(K, dim=-1).indices, x), "top_ids": partial(top_ids, x, K)}
            sides: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(ROUNDS):
                for name, call in calls.items():
                    sides[name].append(timed(call))
            shown = ", ".join(f"{name} {statistics.median(t):.3f} ({min(t):.3f}-{max(t):.3f})"
                              for name, t in sides.items())
            print(f"{dtype!s:15s} {rows:2d} rows: {shown} ms")


if __name__ == "__main__":
    main()
