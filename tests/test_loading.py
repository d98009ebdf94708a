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


def test_every_loading_phase_is_named_as_it_starts_and_timed(tiny_model_dir: Path, unfrozen: None) -> None:
    """The loading generator says each phase before it starts, in order, and times each: what transformers
    imports for the model, the tokenizer, the weights."""
    from decode_tui.core.loading import loading

    steps = loading(resolve(str(tiny_model_dir)), device="cpu")
    lines = []
    while True:
        try:
            lines.append(next(steps))
        except StopIteration as done:
            lm = done.value
            break
    name = lm.name
    assert lines[-3:] == [f"Loading {name}: importing transformers' model code for it", f"Loading {name}: tokenizer",
                          f"Loading {name}: weights onto cpu in float32"]
    assert {"transformers", "model code", "tokenizer", "weights"} <= set(lm.timings)


def test_a_fresh_generate_names_torch_and_transformers_start_up_apart_from_the_model(
        tiny_model_dir: Path, isolated_env: dict[str, str]) -> None:
    """In a fresh process the first seconds are torch's and transformers' own imports: the progress lines say so,
    before the model's phases, so nobody takes them for the model's."""
    from .test_cli import cli

    done = cli("generate", "--model", str(tiny_model_dir), "-p", "hello", "--max-new-tokens", "2", env=isolated_env)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("Loading ")]
    phases = [line.split(": ", 1)[1] for line in lines if ": " in line]
    assert phases[:2] == ["importing torch (its own start-up, once a process)",
                          "importing transformers (its own start-up, once a process)"], lines
    assert phases.index("tokenizer") < phases.index("weights onto cpu in float32")
