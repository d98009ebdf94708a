"""Benchmark: what the app's plumbing costs the decoder thread, without the app.

The app decodes in a thread worker: ``Run.events()`` with live settings (re-read every step), through the
``EventPump`` (a queue put and the pause checks per event), drained by the UI thread at 30 Hz. Here each of
those is added in turn with no UI at all, and the decoder thread's CPU time a token and its tokens/s are
measured the way ``app_vs_headless.py`` measures them (its ``DecoderClock``), on its CPU stand-in for a GPU's
event rate: so that a loss in the app can be split into this plumbing and the UI thread beside it. Variants
alternate run by run; medians.

    python benchmarks/pump_cost.py [--proxy python-bound:8] [--mode greedy] [--prompt summarise]
                                   [--new-tokens 128] [--repeats 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from decode_tui.core.live import LiveParams
from decode_tui.core.params import DecodeConfig
from decode_tui.core.run import Run
from decode_tui.tui.app import DRAIN_HZ
from decode_tui.tui.pump import EventPump

sys.path.insert(0, str(Path(__file__).resolve().parent))
from app_vs_headless import DecoderClock, embedded, proxy_name
from decode_vs_hf import PROMPTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--proxy", type=proxy_name, default="python-bound:8")
    parser.add_argument("--mode", default="greedy")
    parser.add_argument("--prompt", default="summarise", choices=list(PROMPTS))
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    lm = embedded(args.proxy)
    prompt, config = PROMPTS[args.prompt], DecodeConfig(mode=args.mode, max_new_tokens=args.new_tokens)

    def run(live: bool) -> Run:
        return Run(lm, prompt, config, live=LiveParams(config.sampling, config.draft) if live else None)

    def headless(live: bool) -> DecoderClock:
        clock = DecoderClock()
        for _ in clock.watch(run(live).events()):
            pass
        return clock

    def pumped(live: bool) -> DecoderClock:
        """In a thread, through the pump, drained at the app's rate by this (otherwise idle) thread."""
        clock = DecoderClock()
        pump = EventPump(lambda: clock.watch(run(live).events()))
        worker = threading.Thread(target=pump.run)
        worker.start()
        while not pump.finished.is_set():
            time.sleep(1 / DRAIN_HZ)
            pump.drain()
        worker.join()
        return clock

    variants: dict[str, Callable[[], DecoderClock]] = {
        "headless": lambda: headless(False), "live settings": lambda: headless(True),
        "pump": lambda: pumped(False), "pump, live settings (the app's plumbing)": lambda: pumped(True)}
    for measure in variants.values():  # warm-up
        measure()
    clocks: dict[str, list[DecoderClock]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, measure in variants.items():
            clocks[name].append(measure())
    for name, measured in clocks.items():
        print(f"{name:>42}: decoder CPU a token {statistics.median(c.cpu_per_token_us for c in measured):6.0f} us, "
              f"{statistics.median(c.tokens / c.wall_s for c in measured):6.1f} tok/s, waiting "
              f"{statistics.median(c.waiting for c in measured):.1%}", flush=True)


if __name__ == "__main__":
    main()
