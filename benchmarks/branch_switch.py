"""Benchmark: how long switching to a stored branch takes to paint, in the app (no model: a scripted decoder).

Two branches of ``--tokens`` tokens each (the first run, and a branch forced at its middle), then ``--repeats``
switches back and forth through the branch control, as `B` then `enter` does. Each is timed from the switch to
the end of the next screen refresh (the new text, panel and stats painted). Medians with the range.

    python benchmarks/branch_switch.py [--tokens 1000] [--repeats 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decode_tui.tui.app import DecodeApp
from decode_tui.tui.screens.branch_here import Choice
from decode_tui.tui.settings import Settings, with_mode
from tests.fake_decoder import FakeDecoder


async def measure(tokens: int, repeats: int) -> list[float]:
    words = [f" w{i % 50}" for i in range(tokens)]
    fake = FakeDecoder(words)
    app = DecodeApp(with_mode(Settings(), "greedy"), fake.source)
    async with app.run_test(size=(130, 40)) as pilot:
        async def finished() -> None:
            while not (app.pump is not None and app.pump.finished.is_set() and app.pump.events.empty()):
                await pilot.pause(0.05)
            await pilot.pause(0.2)

        await finished()
        app.branching.fork(tokens // 2, Choice(" forked"))
        await pilot.pause(0.1)
        await finished()
        times = []
        for i in range(repeats):
            started = time.perf_counter()
            app.branching.show(i % 2)
            await pilot.pause()  # the refresh that paints it
            times.append(time.perf_counter() - started)
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    times = asyncio.run(measure(args.tokens, args.repeats))
    ms = [t * 1000 for t in times]
    print(f"switching between two branches of {args.tokens} tokens, {args.repeats} switches: median "
          f"{statistics.median(ms):.0f} ms (range {min(ms):.0f}-{max(ms):.0f} ms)")


if __name__ == "__main__":
    main()
