"""SIGTERM ends an app as Ctrl-C does, through the app's own exit, so the terminal is given back as it was.

Killed by the default handler, Python stops where it is, and the terminal stays in the alternate screen with
mouse tracking on. Here the event loop takes the signal (``loop.add_signal_handler``), between two callbacks,
and calls the app's ending, which stops the decoder and leaves the application mode as a quit does. It knows
signals and the event loop, nothing about what an app shows.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable


def on_sigterm(end: Callable[[], None]) -> Callable[[], None]:
    """Call ``end`` on SIGTERM while the running loop lives; returns what puts the previous handling back.
    Does nothing off the main thread, where no signal arrives (an app under test in a worker)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        loop.add_signal_handler(signal.SIGTERM, end)
    except (NotImplementedError, RuntimeError):  # no signal handling in this loop (Windows' proactor)
        return lambda: None

    def restore() -> None:
        loop.remove_signal_handler(signal.SIGTERM)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)

    return restore
