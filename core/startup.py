"""What a process pays before decode-tui does anything: importing torch, said as it happens.

torch's own start-up (loading its libraries) takes seconds (BENCHMARKS.md, "Time to first token"); a progress
display names it, so the wait is not taken for the model's. This
module does not import torch itself until asked: ``decode-tui --help`` must not pay for it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Generator


def importing_torch() -> Generator[str, None, float]:
    """Import torch: yields a line for a progress display first where this process has not imported it yet, and
    returns the seconds the import took (0.0 if it was already in)."""
    if "torch" in sys.modules:
        return 0.0
    yield "importing torch (its own start-up, once a process)"
    started = time.perf_counter()
    import torch  # noqa: F401

    return time.perf_counter() - started
