"""Benchmark: token recycling's matrix on disk, as a run starts and ends with it (issue 74's memory figures).

For SmolLM2's vocabulary (49,152 ids) and k = 8 guesses a token, a full matrix is written with
``core/drafting/recycled_state.save`` and read back with ``load`` (the format check and the copy into the run's
rows included), ``--repeats`` times each; prints the file's size, the tensor's bytes against V x k x 4, and the
median and range of each in milliseconds.

    python benchmarks/recycled_load.py [--repeats 20] [--vocab 49152] [--k 8]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from decode_tui.core.drafting.recycled_state import load, save


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--k", type=int, default=8)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, args.vocab, (args.vocab, args.k), generator=g, dtype=torch.int32)  # every row filled
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "smollm2.pt"
        saves, loads = [], []
        for _ in range(args.repeats):
            started = time.perf_counter()
            save(path, rows, "smollm2")
            saves.append(time.perf_counter() - started)
            started = time.perf_counter()
            loaded = load(path, args.vocab, args.k, "smollm2")
            loads.append(time.perf_counter() - started)
            assert loaded.rows is not None and torch.equal(loaded.rows, rows)
        size = path.stat().st_size
    print(f"V = {args.vocab}, k = {args.k}: tensor {rows.numel() * rows.element_size():,} bytes "
          f"(V x k x 4 = {args.vocab * args.k * 4:,}), file {size:,} bytes")
    for name, times in (("save", saves), ("load", loads)):
        ms = sorted(t * 1000 for t in times)
        print(f"{name}: median {statistics.median(ms):.1f} ms ({ms[0]:.1f}-{ms[-1]:.1f}), {args.repeats} repeats")


if __name__ == "__main__":
    main()
