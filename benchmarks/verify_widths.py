"""What a forward over 1 .. 8 positions costs on this machine, and what the matrix products in it cost two ways.

Speculative decoding assumes a verification over k + 1 positions costs about one decoding step. On a CPU that is
up to the matrix library. This prints, for the embedded model after a 60-token context (warm, widths in turn,
median of ``--rounds``):

- ``forward``: the whole target forward at each width, as the verifier runs it (``core/execution/widths.py`` pads a
  verification to a wider width where that is cheaper);
- ``linear``: every Linear layer's product at each width as the model computes it, ``x @ W.T``
  (``torch.nn.functional.linear``);
- ``transposed``: the same products computed as ``(W @ x.T).T`` (one row is fed as two: the library takes one row
  through a matrix-vector kernel);
- ``forward, transposed``: the whole forward with every Linear computed that way.

The last two are a measurement for a possible change, not what decode-tui does: the products give the same values
up to rounding, but the tokens would no longer be ``generate``'s bit for bit.

``--dtype bfloat16`` measures the model in bfloat16 (``decode-tui --dtype bfloat16``), whose products a CPU with AMX
computes in its tile unit; ``--widest`` goes past 8 positions (a token tree's budget on a GPU).

    python benchmarks/verify_widths.py [--rounds 8] [--dtype float32|bfloat16] [--widest 8]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from decode_tui.core.execution.forward import forward, new_cache, rollback
from decode_tui.core.model.embedded import pull
from decode_tui.core.model.loading import load_model
from decode_tui.core.model.registry import resolve

CONTEXT = 60


def transposed(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` computed as ``(W @ x.T).T``; a single row fed as two."""
    rows = x.reshape(-1, x.shape[-1])  # [n, in]
    fed = torch.cat([rows, rows]) if rows.shape[0] == 1 else rows
    out = (weight @ fed.T).T[: rows.shape[0]].reshape(*x.shape[:-1], weight.shape[0])
    return out if bias is None else out + bias


def timed(step: Callable[[int], Any], rounds: int, widths: list[int]) -> list[float]:
    """Median seconds of ``step(width)`` for each width, the widths in turn, after a round that warms up."""
    samples: dict[int, list[float]] = {w: [] for w in widths}
    for round_ in range(rounds + 1):
        for w in widths:
            started = time.perf_counter()
            step(w)
            if round_:
                samples[w].append(time.perf_counter() - started)
    return [statistics.median(samples[w]) for w in widths]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--widest", type=int, default=8)
    args = parser.parse_args()
    if args.rounds < 1 or args.widest < 1:
        parser.error("--rounds and --widest must be at least 1")
    widths = [*range(1, min(args.widest, 8) + 1), *(w for w in (12, 16, 24, 32) if 8 < w <= args.widest)]
    pull("smollm2")
    lm = load_model(resolve("smollm2"), device="cpu", dtype=args.dtype)
    model: Any = lm.model
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {w: {d: torch.randn(w, d, dtype=lm.dtype) for d in {m.in_features for m in linears}} for w in widths}
    cache = new_cache(model, rollback=True)
    ids = torch.randint(0, model.config.vocab_size, (1, CONTEXT + max(widths)))

    def whole(w: int) -> None:
        forward(model, ids[:, CONTEXT : CONTEXT + w], cache, keep=w)
        rollback(cache, CONTEXT)

    def products(product: Callable[..., torch.Tensor]) -> Callable[[int], None]:
        def step(w: int) -> None:
            for m in linears:
                product(inputs[w][m.in_features], m.weight)
        return step

    rows: dict[str, list[float]] = {}
    with torch.inference_mode():
        forward(model, ids[:, :CONTEXT], cache)
        rows["forward"] = timed(whole, args.rounds, widths)
        rows["linear"] = timed(products(F.linear), args.rounds, widths)
        rows["transposed"] = timed(products(transposed), args.rounds, widths)
        original = torch.nn.Linear.forward
        torch.nn.Linear.forward = lambda self, x: transposed(x, self.weight, self.bias)  # type: ignore[method-assign, assignment]
        try:
            rows["forward, transposed"] = timed(whole, args.rounds, widths)
        finally:
            torch.nn.Linear.forward = original  # type: ignore[method-assign]
    print(f"torch {torch.__version__}, {args.dtype}, {torch.get_num_threads()} threads; ms, median of {args.rounds} "
          "rounds")
    print(f"{'width':>20} " + " ".join(f"{w:>6}" for w in widths))
    for name, seconds in rows.items():
        print(f"{name:>20} " + " ".join(f"{1e3 * s:6.1f}" for s in seconds))
    print(f"{'forward in steps':>20} " + " ".join(f"{s / rows['forward'][0]:6.2f}" for s in rows["forward"]))


if __name__ == "__main__":
    main()
