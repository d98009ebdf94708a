"""The one thread every run of the app decodes in: an executor that a quit never waits for.

Two reasons for one long-lived thread instead of the standard ``ThreadPoolExecutor``:

- torch's OpenMP keeps a thread team per calling thread; a second team on a
  small machine oversubscribes the cores, and libgomp then throttles its
  spin-waits for every team, which cost 12-25 % of decoding speed on 2 cores
  (measured). Runs never overlap anyway: a restart stops the old run first.
- ``ThreadPoolExecutor`` joins its threads when the event loop shuts down and
  again at interpreter exit. A run stops at its next step boundary, but a run
  that is *loading a model* is inside ``from_pretrained`` for seconds (minutes
  for a big model), so ``q`` or Ctrl-C would wait for it. This thread is a
  daemon and ``shutdown`` waits for it at most ``QUIT_WAIT_S``: a quit ends the
  process within a second whatever the run is doing; a load in flight is
  abandoned with the process (it writes nothing).

The standard library's executors all join their threads on shutdown, hence this one.
It knows threads and futures, nothing about decoding or widgets.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

QUIT_WAIT_S = 0.5  # how long shutdown waits for a run to reach its step boundary before leaving it behind


class DecoderThread(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` by type (asyncio's default executor must be one), with its own single daemon
    thread: the base class's workers are never started."""

    def __init__(self, name: str = "decode-tui-decoder") -> None:
        super().__init__(max_workers=1, thread_name_prefix=name)
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self._closed:
            raise RuntimeError("the decoder thread is shut down")
        future: Future[Any] = Future()
        self._jobs.put((future, functools.partial(fn, *args, **kwargs)))
        return future

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, call = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to whoever awaits the future, as ThreadPoolExecutor does
                future.set_exception(exc)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed = True
        self._jobs.put(None)
        if wait:
            self._thread.join(QUIT_WAIT_S)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
