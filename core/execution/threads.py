"""How many threads a CPU's forwards run on: of a few counts offered, the one whose forwards were timed fastest.

torch starts a process with a thread per core, and splits each operation among them; the operation ends when
its last share does. Where another process holds one of the cores (a build, a browser tab, a test run), the
thread on it runs by turns with that process, and every operation of every forward waits for it: a forward then
costs more than on fewer threads that all have a core, and a wide forward (a verification) more than a step does,
which tells a drafting policy that drafting loses where it would pay on fewer threads. Quiet, more threads split a
wide forward well and a step no worse. So the count is timed, not assumed: once a process, in the warm-up,
before any width or tree budget is timed (those are priced at the count chosen), a step and a verification's
width are timed on each count offered (every core, half of them, one), in turn, and the fastest pair wins; a
count within TIE of it with fewer threads wins instead, leaving a core to the host work beside the forwards (the
app's rendering, a lookup). llama.cpp asks the user for the same number (``--threads``); this measures it.
BENCHMARKS.md, "Threads on a busy CPU", has what it changed.

Off the CPU nothing is timed: a GPU's forwards run on the device. A process started on one thread (a test worker
given one core) keeps it.

It knows torch's thread count, forwards and the clock; nothing of modes, drafts or events. Written by hand: torch
offers ``set_num_threads``, not a choice of the number.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .model_state import state_of

if TYPE_CHECKING:
    from transformers import PreTrainedModel

WIDTHS = (1, 8)  # a plain step, and a verification as wide as the widest a chain is padded to (widths.MAX_WIDTH)
TRIES = 3  # rounds over the counts, the counts in turn; each count's median of them
TIE = 0.05  # a count with fewer threads within this share of the fastest's time is taken instead


@dataclass(frozen=True)
class ThreadChoice:
    """The threads chosen, and each count's timed seconds (a step plus a verification's width)."""

    threads: int
    seconds: dict[int, float]  # empty where there was one count to offer, and nothing was timed

    def said(self) -> str:
        """``1 thread of 2: a step and a forward of 8 positions took 183 ms on 1, 703 ms on 2``."""
        if not self.seconds:
            return f"{self.threads} thread{'s' * (self.threads > 1)}, the process's own count (nothing to choose from)"
        counts = ", ".join(f"{1e3 * s:.0f} ms on {n}" for n, s in sorted(self.seconds.items()))
        return (f"{self.threads} thread{'s' * (self.threads > 1)} of {max(self.seconds)}: a step and a forward of "
                f"{WIDTHS[-1]} positions took {counts}")

    def tied(self) -> list[int]:
        """The counts timed within TIE of the fastest, fewest first (the one chosen first): any of them decodes as
        fast as the others."""
        return _tied(self.seconds) if self.seconds else [self.threads]


def _tied(seconds: dict[int, float]) -> list[int]:
    """The counts whose ``seconds`` are within TIE of the fastest's, fewest threads first."""
    fastest = min(seconds.values())
    return sorted(n for n, s in seconds.items() if s <= (1 + TIE) * fastest)


def settle_on(model: PreTrainedModel, threads: int) -> ThreadChoice:
    """Decode ``model`` on ``threads`` instead of the count chosen, where it is one of the counts the choice found
    tied (a caller that kept timings for that count, which would otherwise be timed again); set, and kept."""
    state = state_of(model)
    choice = state.threads
    if not isinstance(choice, ThreadChoice) or threads not in choice.tied():
        raise ValueError(f"{threads} threads is not a count tied with the one chosen")
    settled = ThreadChoice(threads, choice.seconds)
    state.threads = settled
    torch.set_num_threads(threads)
    return settled


def offered(threads: int) -> list[int]:
    """The counts timed for a process on ``threads`` threads: all of them, half, one; fewest first."""
    return sorted({threads, max(1, threads // 2), 1})


def offered_now() -> list[int]:
    """The counts :func:`choose_threads` would time now, from this thread's count."""
    return offered(torch.get_num_threads())


def choose_threads(model: PreTrainedModel, timer: Callable[[int, int], float] | None = None) -> ThreadChoice | None:
    """The thread count for ``model``'s forwards on a CPU, timed once per model and process, and set; None off the
    CPU. ``timer(threads, width)``: seconds of one forward of ``width`` positions on that many threads (by
    default, timed on the model after a short context). Every count is switched to once a round, so each pays
    the switch alike."""
    if model.device.type != "cpu":
        return None
    state = state_of(model)
    if isinstance(state.threads, ThreadChoice) and timer is None:
        use_threads(model)
        return state.threads
    counts = offered_now()
    if len(counts) == 1:
        choice = ThreadChoice(counts[0], {})
    else:
        time_on = timer or _timer(model)
        samples: dict[int, list[float]] = {n: [] for n in counts}
        for r in range(TRIES + 1):  # the first round warms each count's pool up, and is not kept
            for n in counts if r % 2 == 0 else reversed(counts):
                seconds = sum(time_on(n, w) for w in WIDTHS)
                if r:
                    samples[n].append(seconds)
        medians = {n: statistics.median(s) for n, s in samples.items()}
        choice = ThreadChoice(_tied(medians)[0], medians)
    if timer is None:
        state.threads = choice
    torch.set_num_threads(choice.threads)
    return choice


def use_threads(model: PreTrainedModel) -> None:
    """Run this thread's forwards on the count chosen for ``model``, if one was: torch keeps a count per thread
    (OpenMP's), and a front end may decode on another thread than the one that warmed up."""
    choice = state_of(model).threads
    if choice is not None and torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)


def _timer(model: PreTrainedModel) -> Callable[[int, int], float]:
    """Times a forward on a given number of threads (:func:`~.tree_budget.forward_timer`'s, after its context)."""
    from .tree_budget import forward_timer

    timed = forward_timer(model)

    def on(threads: int, width: int) -> float:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        return timed(width)

    return on
