"""Benchmark: what adaptive prompt lookup's replays cost a run, at a GPU's pace.

The adaptive policy of a copying drafter replays the run so far under every draft length, on the host between
rounds, while the device idles (``ReplayedLength.fastest``). Their time is kept to ``REPLAY_SHARE`` of
the run; here it is counted directly, at a twentieth (the old share, the control) and at the current share, on
``app_vs_headless.py``'s CPU stand-in for a GPU's captured graphs (``--proxy device-wait``: the real model's text,
3.3 ms a step), with the target forwards each run took (the same decisions take the same forwards). Each setting
runs twice; the second is printed.

    python benchmarks/replay_share.py [--prompts open-ended,code-edit,summarise] [--new-tokens 128]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from decode_tui.core.params import DecodeConfig, DraftParams
from decode_tui.core.run import Run
from decode_tui.core.strategies import replayed_length
from decode_tui.core.strategies.replayed_length import Prices, ReplayedLength

sys.path.insert(0, str(Path(__file__).resolve().parent))
from app_vs_headless import embedded
from decode_vs_hf import PROMPTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="open-ended,code-edit,summarise")
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    lm = embedded("device-wait")
    spent = {"s": 0.0, "n": 0}
    fastest = ReplayedLength.fastest

    def counted(self: ReplayedLength, prices: Prices) -> int:
        started = time.perf_counter()
        try:
            return fastest(self, prices)
        finally:
            spent["s"] += time.perf_counter() - started
            spent["n"] += 1

    ReplayedLength.fastest = counted  # type: ignore[method-assign]
    config = DecodeConfig(mode="pld", max_new_tokens=args.new_tokens, draft=DraftParams(adaptive=True))
    current = replayed_length.REPLAY_SHARE
    for name in args.prompts.split(","):
        for share in (1 / 20, current):
            replayed_length.REPLAY_SHARE = share
            for _ in range(2):
                spent["s"], spent["n"] = 0.0, 0
                started = time.perf_counter()
                final = list(Run(lm, PROMPTS[name], config).events())[-1]
                elapsed = time.perf_counter() - started
            print(f"{name:>10} replays kept to 1/{round(1 / share):<3}: {spent['n']:2d} replays, "
                  f"{spent['s'] * 1e3:5.1f} ms of {elapsed * 1e3:5.0f} ms ({spent['s'] / elapsed:.1%}); target "
                  f"forwards {getattr(final, 'target_forwards', None)}", flush=True)


if __name__ == "__main__":
    main()
