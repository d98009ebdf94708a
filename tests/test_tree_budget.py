"""The tree budget per device: the widest tree whose verification costs at most TREE_COST plain forwards, measured
on the CPU once per model; the widest offered on a GPU."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from decode_tui.core.execution import tree_budget as budget_module
from decode_tui.core.execution.tree_budget import CANDIDATES, TREE_COST, tree_budget
from decode_tui.core.execution.widths import width_costs

from .conftest import tiny_model


def costs(by_width: dict[int, float]) -> Any:
    return lambda width: by_width[width]


@pytest.mark.parametrize(("by_width", "expected"), [
    # 2 cores in float32: a 16-position forward about two 1-position ones, a 32-position one about three.
    ({1: 1.0, 4: 1.2, 8: 1.5, 16: 1.9, 32: 3.0, 64: 5.5}, 15),
    ({1: 1.0, 4: 1.1, 8: 1.1, 16: 1.2, 32: 1.4, 64: 1.9}, 63),  # many cores: wide forwards nearly free
    ({1: 1.0, 4: 2.5, 8: 3.0, 16: 4.0, 32: 6.0, 64: 9.0}, 3),  # none fits: the narrowest
    ({1: 1.0, 4: 1.2, 8: TREE_COST, 16: 2.1, 32: 3.0, 64: 5.5}, 7),  # at the limit it still fits
])
def test_the_widest_budget_whose_forward_costs_at_most_two_plain_ones(by_width: dict[int, float],
                                                                      expected: int) -> None:
    model = tiny_model("llama", vocab_size=64, seed=0)
    assert tree_budget(model, timer=costs(by_width)) == expected


def test_off_the_cpu_the_widest_budget_without_timing_anything() -> None:
    def never(width: int) -> float:
        raise AssertionError("a GPU's budget is not timed")

    gpu = SimpleNamespace(device=torch.device("cuda"))
    assert tree_budget(gpu, timer=never) == CANDIDATES[-1]  # type: ignore[arg-type]


def test_a_cpu_budget_is_timed_on_the_model_once_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model("llama", vocab_size=64, seed=1)
    timers = []
    real = budget_module.forward_timer

    def counted(m: Any) -> Any:
        timers.append(m)
        return real(m)

    monkeypatch.setattr(budget_module, "forward_timer", counted)
    first = tree_budget(model)
    assert first in CANDIDATES and len(timers) == 1
    assert tree_budget(model) == first and len(timers) == 1, "kept for the model's life in the process"
    wide = width_costs(model).wide
    assert wide[1] == 1.0 and {b + 1 for b in CANDIDATES if b <= first} <= set(wide), \
        "its forwards are kept, in one-position forwards, to price wide trees"
    other = tiny_model("llama", vocab_size=64, seed=2)
    tree_budget(other)
    assert len(timers) == 2, "each model is measured on its own"


def test_a_sliding_window_model_is_measured_too() -> None:
    """Phi-3 and Mistral forget what slides out of their window unless told to keep it: the timing cache is built as
    the verifier's is, so cropping it back after each timed forward works there too."""
    from .test_fast_path import sliding_phi3

    assert tree_budget(sliding_phi3(7)) in CANDIDATES
