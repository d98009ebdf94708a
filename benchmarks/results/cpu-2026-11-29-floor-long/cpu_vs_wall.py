"""Is process CPU time a quieter measure than wall time here? greedy against greedy (or a mode), alternated.

    python benchmarks/results/cpu-2026-11-29-floor-long/cpu_vs_wall.py [MODE] [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys
import time

from decode_tui.cli.flags import ModeChoice
from decode_tui.cli.loads import load_models, with_draft_model
from decode_tui.cli.options import DecodingOptions
from decode_tui.core.params import DecodeConfig
from decode_tui.core.run import Run

mode = sys.argv[1] if len(sys.argv) > 1 else "greedy"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
prompt = "Write a short story about a lighthouse keeper who finds a message in a bottle."
options = DecodingOptions(max_new_tokens=96)
g = options.for_mode(ModeChoice("greedy")).config()
m = options.for_mode(ModeChoice(mode)).config()
lm, draft = load_models(options, prompt, g, with_draft_model(g, m))


def one(config: DecodeConfig) -> tuple[float, float]:
    """Wall and process CPU seconds of one run."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in Run(lm, prompt, config, draft).events():
        pass
    return time.perf_counter() - wall, time.process_time() - cpu


one(g)
one(m)
by_wall: list[float] = []
by_cpu: list[float] = []
for i in range(rounds):
    if i % 2 == 0:
        a, b = one(g), one(m)
    else:
        b, a = one(m), one(g)
    by_wall.append(a[0] / b[0])
    by_cpu.append(a[1] / b[1])
    print(f"round {i}: wall {a[0]:.3f} {b[0]:.3f} ratio {by_wall[-1]:.3f}   cpu {a[1]:.3f} {b[1]:.3f} "
          f"ratio {by_cpu[-1]:.3f}", flush=True)
for name, ratios in (("wall", by_wall), ("cpu", by_cpu)):
    print(name, "median", round(statistics.median(ratios), 3), "sd", round(statistics.stdev(ratios), 3), "range",
          round(min(ratios), 3), round(max(ratios), 3))
