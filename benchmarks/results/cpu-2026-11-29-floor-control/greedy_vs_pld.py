"""Greedy against pld on the story, timed alone (4 alternated runs each after a warm-up), then one cProfile each:
does greedy do work per step that a drafting mode's plain steps do not? Prints ``greedy_vs_pld.txt``.

    python benchmarks/results/cpu-2026-11-29-floor-control/greedy_vs_pld.py
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import time

from decode_tui.cli.flags import ModeChoice
from decode_tui.cli.loads import load_models
from decode_tui.cli.options import DecodingOptions
from decode_tui.core.record.events import Event
from decode_tui.core.run import Run

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def main() -> None:
    options = DecodingOptions(max_new_tokens=96)
    configs = {m: options.for_mode(ModeChoice(m)).config() for m in ("greedy", "pld")}
    lm, _ = load_models(options, PROMPT, configs["greedy"], None)

    def run(mode: str) -> tuple[float, Event | None]:
        events = Run(lm, PROMPT, configs[mode]).events()
        started, last = time.perf_counter(), None
        for event in events:
            last = event
        return time.perf_counter() - started, last

    for mode in configs:
        run(mode)
    times: dict[str, list[float]] = {m: [] for m in configs}
    for i in range(4):
        for mode in configs if i % 2 == 0 else reversed(list(configs)):
            times[mode].append(run(mode)[0])
    for mode, values in times.items():
        print(mode, [round(x, 2) for x in values], "median", round(statistics.median(values), 2))
    for mode in configs:
        profile = cProfile.Profile()
        profile.enable()
        run(mode)
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(18)
        print("=====", mode)
        print(out.getvalue()[-4500:])


if __name__ == "__main__":
    main()
