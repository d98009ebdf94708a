"""Times `decode-tui whatif TRACE` twice: when its exact forward counts print, when its estimates print, and the end.

The first run passes --recalibrate (it times this machine's forwards and saves them), the second reuses them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def main(trace: str) -> None:
    env = dict(os.environ, COLUMNS="120")
    for label, extra in (("first, --recalibrate (measures and saves)", ["--recalibrate"]), ("second (reuses)", [])):
        t0 = time.perf_counter()
        command = ["decode-tui", "whatif", trace, *extra]
        p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        assert p.stdout is not None
        first = costs = float("nan")
        for line in p.stdout:
            now = time.perf_counter() - t0
            if first != first and "PLD: target forwards (exact)" in line:
                first = now
            if costs != costs and "Costs measured here" in line:
                costs = now
        p.wait()
        done = time.perf_counter() - t0
        print(f"{label}: exact forwards printed at {first:.1f} s, estimates at {costs:.1f} s, done at {done:.1f} s, "
              f"exit {p.returncode}")


if __name__ == "__main__":
    main(sys.argv[1])
