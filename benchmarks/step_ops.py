"""Benchmark: the ops a strategy launches in a step besides its model's pass, counted on the CPU for a GPU.

On the default CUDA path a step's forward pass is one replayed graph, and everything else a strategy does in the
step (the processors, the figures a viewer shows, beam search's bookkeeping and the reorder of its cache rows, the
one copy to the host) is an op launched from Python, each costing the host a launch or more: for a small model
that is most of a step. This runs each mode on the graph path with the tests' eager stand-in for CUDA graphs
(``tests/test_graphs.py``), so the bookkeeping is what it is on a GPU, and counts with a dispatch mode every op
outside the replays (views and other ops that launch nothing left out; the prefill, which runs eagerly, is spread
over the steps): the count a step, then the commonest ops, and with ``--where`` the lines that launch them.
The stand-in is the embedded model's tokenizer on narrow random layers (``app_vs_headless.py``'s
``python-bound:N``; 30 layers, as SmolLM2 has, by default). ``--eager-reorder``: beam search's reorder of its cache
rows as its four eager ops a layer (``StaticKV.reorder_rows`` in place of the replayed graph), the control for it.

    python benchmarks/step_ops.py [--modes greedy,sample,pld,beam,speculative] [--layers 30] [--new-tokens 64]
                                  [--eager-reorder] [--where]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from decode_tui.core.drafting.draft_models import load_draft
from decode_tui.core.execution import forward
from decode_tui.core.params import DecodeConfig
from decode_tui.core.record.events import BeamStepped, TokenEmitted
from decode_tui.core.run import Run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from app_vs_headless import embedded
from decode_vs_hf import PROMPTS
from step_kernels import FREE

CORE = str(Path(forward.__file__).resolve().parent)


class Census(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts every op outside a replay by name and, with ``where``, by the line of decode-tui's core that ran it."""

    def __init__(self, where: bool) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.counts: collections.Counter[str] = collections.Counter()
        self.lines: collections.Counter[str] = collections.Counter()
        self.where = where
        self.replaying = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.__name__.split(".")[0]
        if not self.replaying and name not in FREE:
            self.counts[name] += 1
            if self.where:
                frames = [f for f in traceback.extract_stack() if f.filename.startswith(CORE)]
                if frames:
                    self.lines[f"{Path(frames[-1].filename).name}:{frames[-1].lineno} {name}"] += 1
        return func(*args, **(kwargs or {}))


CENSUS = Census(where=False)


class StandInGraphs:
    """The tests' eager stand-in for CUDA graphs: a replay runs the recorded pass again, uncounted."""

    @staticmethod
    def capture(model: Any, run: Callable[[], torch.Tensor], put_back: Callable[[], None],
                ) -> tuple[Callable[[], None], torch.Tensor]:
        warm = run()
        put_back()
        out = torch.full_like(warm, float("nan"))

        def replay() -> None:
            CENSUS.replaying += 1
            try:
                out.copy_(run())
            finally:
                CENSUS.replaying -= 1

        return replay, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="greedy,sample,pld,beam,speculative")
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompt", default="summarise", choices=list(PROMPTS))
    parser.add_argument("--eager-reorder", action="store_true")
    parser.add_argument("--where", action="store_true")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    forward.GRAPH_DEVICES = frozenset({"cpu"})
    forward.GraphBackend = StandInGraphs
    CENSUS.where = args.where
    lm = embedded(f"python-bound:{args.layers}")
    for mode in args.modes.split(","):
        config = DecodeConfig(mode=mode, max_new_tokens=args.new_tokens)
        reorders = mock.patch.object(forward.StaticKV, "reorder_cache", forward.StaticKV.reorder_rows) \
            if args.eager_reorder else contextlib.nullcontext()
        draft = load_draft(lm, config.draft.draft) if mode == "speculative" else None  # built once, as the app does
        with reorders:
            for _ in Run(lm, PROMPTS[args.prompt], config, draft).events():  # captures its graphs, uncounted
                pass
            CENSUS.counts.clear()
            CENSUS.lines.clear()
            steps = 0
            with CENSUS:
                for event in Run(lm, PROMPTS[args.prompt], config, draft).events():
                    # A step: a beam step, else a token (a drafting mode's step is a token of it, its round's share)
                    steps += isinstance(event, BeamStepped) if mode == "beam" else isinstance(event, TokenEmitted)
        total = sum(CENSUS.counts.values())
        print(f"{mode}: {total / steps:.1f} ops a step outside the replayed pass ({steps} steps); "
              + ", ".join(f"{name} {n / steps:.1f}" for name, n in CENSUS.counts.most_common(args.top)), flush=True)
        for line, n in CENSUS.lines.most_common(args.top * 2):
            print(f"    {n / steps:6.2f}  {line}")


if __name__ == "__main__":
    main()
