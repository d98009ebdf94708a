"""The CPU's thread count for forwards, timed in the warm-up (core/execution/threads.py).

Which count is faster is the machine's (BENCHMARKS.md, "Threads on a busy CPU", measures it beside a CPU hog); what
is checked here is the choice made from given timings, that it is made once, first in the warm-up, and that a run
decoding on another thread than the warm-up's runs its forwards on the count chosen.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from decode_tui.core.execution import threads as threads_module
from decode_tui.core.execution.model_state import state_of
from decode_tui.core.execution.threads import TIE, WIDTHS, ThreadChoice, choose_threads, offered
from decode_tui.core.params import DecodeConfig
from decode_tui.core.run import Run
from decode_tui.core.warmup import warming

from .conftest import tiny_model
from .test_autoregressive import loaded

PROMPT = "ab ab ab cd ab ab ab cd ab ab ab cd"


@pytest.fixture
def lm(byte_bpe: Any) -> Any:
    return loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4), byte_bpe, 2)


@pytest.fixture
def two_threads() -> Any:
    """A process on two threads for the test (a test worker may have been given one), as it was after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def timer(seconds_by_count: dict[int, float], calls: list[tuple[int, int]]) -> Any:
    """A fake timer: a forward on ``n`` threads takes ``seconds_by_count[n]`` split over WIDTHS alike."""
    def timed(threads: int, width: int) -> float:
        calls.append((threads, width))
        return seconds_by_count[threads] / len(WIDTHS)
    return timed


def test_the_counts_offered_are_every_core_half_and_one() -> None:
    assert offered(1) == [1]
    assert offered(2) == [1, 2]
    assert offered(8) == [1, 4, 8]
    assert offered(3) == [1, 3]


@pytest.mark.parametrize(("seconds", "chosen"), [
    ({1: 0.20, 2: 0.16}, 2),  # quiet: a verification splits well over two threads
    ({1: 0.18, 2: 0.70}, 1),  # beside a hog on one core: every op waits for the thread that runs by turns
    ({1: 0.20 * (1 + TIE / 2), 2: 0.20}, 1),  # within TIE: the fewer, leaving a core to the host's work
])
def test_the_fastest_count_is_chosen_and_the_fewer_on_a_near_tie(lm: Any, two_threads: Any,
                                                                   seconds: dict[int, float], chosen: int) -> None:
    calls: list[tuple[int, int]] = []
    choice = choose_threads(lm.model, timer(seconds, calls))
    assert choice is not None and choice.threads == chosen
    assert torch.get_num_threads() == chosen
    assert choice.seconds == pytest.approx(seconds)
    # Every count timed at every width, in turn, more than once (the first round is not kept).
    assert {c for c in calls} == {(n, w) for n in (1, 2) for w in WIDTHS}
    assert calls[: 2 * len(WIDTHS)] != calls[2 * len(WIDTHS): 4 * len(WIDTHS)], "alternated, not one count first"
    assert f"{chosen} thread" in choice.said() and "ms on 1" in choice.said() and "ms on 2" in choice.said()
    assert state_of(lm.model).threads is None, "a given timer's choice is not kept as the model's"


def test_a_choice_is_timed_once_per_model_and_process(lm: Any, two_threads: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(threads_module, "_timer", lambda model: timer({1: 0.1, 2: 0.3}, calls))
    first = choose_threads(lm.model)
    timed = len(calls)
    torch.set_num_threads(2)  # another thread's count, say
    assert choose_threads(lm.model) == first and len(calls) == timed, "timed again"
    assert torch.get_num_threads() == 1, "the kept choice is set again"


def test_nothing_is_timed_off_the_cpu_or_on_one_thread(lm: Any) -> None:
    gpu = SimpleNamespace(device=torch.device("meta"))
    assert choose_threads(gpu) is None  # type: ignore[arg-type]
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        calls: list[tuple[int, int]] = []
        choice = choose_threads(lm.model, timer({1: 0.1}, calls))
        assert choice is not None and choice.threads == 1 and not calls
        assert choice.said() == "1 thread, the process's own count (nothing to choose from)"
    finally:
        torch.set_num_threads(before)


def test_the_warm_up_chooses_first_and_a_run_on_another_thread_decodes_on_the_count(
        lm: Any, two_threads: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The app decodes each run on a thread of its own: torch keeps a count per thread, so the run sets the count
    the warm-up chose on the thread it decodes on."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(threads_module, "_timer", lambda model: timer({1: 0.1, 2: 0.3}, calls))
    lines = list(warming(lm, PROMPT, DecodeConfig(mode="pld", max_new_tokens=16, seed=3)))
    assert lines[0] == "warming up pld: timing forwards on 1 and 2 threads, for the count to decode on", lines
    assert lines.index(lines[0]) < next(i for i, line in enumerate(lines) if "timing verifications" in line), \
        "the widths are timed at the count chosen, after it"
    assert state_of(lm.model).threads == ThreadChoice(1, {1: 0.1, 2: 0.3})
    assert not any("threads" in line for line in warming(lm, PROMPT, DecodeConfig(mode="greedy", max_new_tokens=4))), \
        "chosen once"
    torch.set_num_threads(2)
    seen: list[int] = []
    hook = lm.model.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))

    def decode() -> None:
        torch.set_num_threads(2)  # a thread whose count is not the choice
        list(Run(lm, PROMPT, DecodeConfig(mode="greedy", max_new_tokens=6)).events())

    worker = threading.Thread(target=decode)
    worker.start()
    worker.join()
    hook.remove()
    assert seen and set(seen) == {1}, seen


def test_counts_within_the_tie_are_offered_and_one_may_be_settled_on(lm: Any, two_threads: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """whatif keeps timings per thread count: on a near tie, the count whose timings are saved is settled on
    instead of timing the other's again (a tie decided by noise flipped from run to run)."""
    from decode_tui.core.execution.threads import settle_on

    assert ThreadChoice(2, {}).tied() == [2]
    assert ThreadChoice(1, {1: 0.20 * (1 + TIE / 2), 2: 0.20}).tied() == [1, 2]
    assert ThreadChoice(1, {1: 0.18, 2: 0.70}).tied() == [1]
    monkeypatch.setattr(threads_module, "_timer", lambda model: timer({1: 0.20 * (1 + TIE / 2), 2: 0.20}, []))
    chosen = choose_threads(lm.model)
    assert chosen is not None and chosen.threads == 1
    settled = settle_on(lm.model, 2)
    assert settled.threads == 2 and state_of(lm.model).threads == settled and torch.get_num_threads() == 2
    assert settled.seconds == chosen.seconds
    with pytest.raises(ValueError, match="not a count tied"):
        settle_on(lm.model, 4)
