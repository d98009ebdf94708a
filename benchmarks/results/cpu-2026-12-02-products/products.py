"""A whole forward of the embedded model over 1 .. 8 positions, its Linear products computed four ways (a
measurement for a possible change, not what decode-tui does; issue 73's closing note of 2026-12-02).

- ``linear``: as the model computes them, ``F.linear(x, W)`` (``x @ W.T``);
- ``head``: the LM head alone as ``(W @ x.T).T``, one row fed as two; every other product as ``linear``;
- ``left``: every product as ``(W @ x.T).T``, one row fed as two (``benchmarks/verify_widths.py``'s "transposed");
- ``mkldnn``: every product through oneDNN (``torch._C._nn.mkldnn_linear``) on weights reordered once.

Each forward after a 60-token context, rolled back; the four ways in turn, the widths in turn, ``ROUNDS`` rounds
after one that warms up; the median. The products give the same values up to rounding, not bit for bit.

    python benchmarks/results/cpu-2026-12-02-products/products.py [THREADS]
"""

from __future__ import annotations

import statistics
import sys
import time
import types
from typing import Any

import torch
import torch.nn.functional as F

from decode_tui.core.execution.forward import forward, new_cache, rollback
from decode_tui.core.model.embedded import pull
from decode_tui.core.model.loading import load_model
from decode_tui.core.model.registry import resolve

CONTEXT, ROUNDS, WIDTHS, WAYS = 60, 8, range(1, 9), ("linear", "head", "left", "mkldnn")


def left(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    rows = x.reshape(-1, x.shape[-1])  # [n, in]
    fed = torch.cat([rows, rows]) if rows.shape[0] == 1 else rows
    return (weight @ fed.T).T[: rows.shape[0]].reshape(*x.shape[:-1], weight.shape[0])


def main() -> None:
    if len(sys.argv) > 1:
        torch.set_num_threads(int(sys.argv[1]))
    pull("smollm2")
    model: Any = load_model(resolve("smollm2"), device="cpu", dtype="float32").model
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    with torch.inference_mode():
        reordered = {id(m): m.weight.to_mkldnn() for m in linears}
    way = {"now": "linear"}

    def product(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        now = way["now"]
        if now == "left" or (now == "head" and self is model.lm_head):
            out = left(x, self.weight)
        elif now == "mkldnn":
            rows = x.reshape(-1, x.shape[-1]).to_mkldnn()
            out = torch._C._nn.mkldnn_linear(rows, reordered[id(self)], None).to_dense().reshape(
                *x.shape[:-1], self.weight.shape[0])
        else:
            return F.linear(x, self.weight, self.bias)
        return out if self.bias is None else out + self.bias

    for m in linears:
        m.forward = types.MethodType(product, m)  # type: ignore[method-assign]  # this process's model only
    cache = new_cache(model, rollback=True)
    ids = torch.randint(0, model.config.vocab_size, (1, CONTEXT + max(WIDTHS)))
    seconds: dict[str, dict[int, list[float]]] = {w: {n: [] for n in WIDTHS} for w in WAYS}
    with torch.inference_mode():
        forward(model, ids[:, :CONTEXT], cache)
        for round_ in range(ROUNDS + 1):
            for w in WAYS:
                way["now"] = w
                for n in WIDTHS:
                    started = time.perf_counter()
                    forward(model, ids[:, CONTEXT : CONTEXT + n], cache, keep=n)
                    if round_:
                        seconds[w][n].append(time.perf_counter() - started)
                    rollback(cache, CONTEXT)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; ms, median of {ROUNDS} rounds")
    print(f"{'width':>8} " + " ".join(f"{n:>6}" for n in WIDTHS))
    for w in WAYS:
        print(f"{w:>8} " + " ".join(f"{1e3 * statistics.median(seconds[w][n]):6.1f}" for n in WIDTHS))


if __name__ == "__main__":
    main()
