"""Loading leaves the collector with little to walk, and a model that is replaced is still freed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from decode_tui.core.loading import load_model
from decode_tui.core.registry import resolve


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # leave the rest of the session as it was


def test_a_loaded_model_is_out_of_the_collectors_sight(tiny_model_dir: Path, unfrozen: None) -> None:
    assert gc.get_freeze_count() == 0
    lm = load_model(resolve(str(tiny_model_dir)), device="cpu", dtype="float32")
    assert gc.get_freeze_count() > 0
    # A full collection no longer visits the model's modules and parameters.
    tracked = {id(o) for o in gc.get_objects()}
    assert id(lm.model) not in tracked and id(next(lm.model.parameters())) not in tracked


def test_loading_another_model_lets_the_first_be_collected(tiny_model_dir: Path, unfrozen: None) -> None:
    first = load_model(resolve(str(tiny_model_dir)), device="cpu", dtype="float32")
    # A reference cycle (hooks and tied modules can make one) keeps it from being freed by reference
    # counting alone: only the collector can free it, and the collector never looks at frozen objects.
    first.model.__dict__["loop"] = [first.model]
    gone = weakref.ref(first.model)
    del first
    second = load_model(resolve(str(tiny_model_dir)), device="cpu", dtype="float32")
    assert gone() is None, "the replaced model was frozen in place and leaked"
    assert gc.get_freeze_count() > 0 and second.model is not None
