"""Loading leaves the collector with little to walk, and a model that is replaced is still freed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerBase

from decode_tui.core.model.loading import configured_context_length, encode_prompt, load_model
from decode_tui.core.model.registry import TEMPLATE_SLACK, declared_context_length, resolve, surely_fits


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
    from decode_tui.core.model.loading import loading

    from .test_cli import auto_cpu_dtype

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
                          f"Loading {name}: weights onto cpu in {auto_cpu_dtype()}"]
    assert {"transformers", "model code", "tokenizer", "weights"} <= set(lm.timings)


def test_a_fresh_generate_names_torch_and_transformers_start_up_apart_from_the_model(
        tiny_model_dir: Path, isolated_env: dict[str, str]) -> None:
    """In a fresh process the first seconds are torch's and transformers' own imports: the progress lines say so,
    before the model's phases, so nobody takes them for the model's."""
    from .test_cli import auto_cpu_dtype, cli

    done = cli("generate", "--model", str(tiny_model_dir), "-p", "hello", "--max-new-tokens", "2", env=isolated_env)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("Loading ")]
    phases = [line.split(": ", 1)[1] for line in lines if ": " in line]
    assert phases[:2] == ["importing torch (its own start-up, once a process)",
                          "importing transformers (its own start-up, once a process)"], lines
    assert phases.index("tokenizer") < phases.index(f"weights onto cpu in {auto_cpu_dtype()}")


def test_the_context_read_from_config_json_is_the_one_transformers_reads(tiny_model_dir: Path) -> None:
    resolved = resolve(str(tiny_model_dir))
    assert declared_context_length(resolved) == configured_context_length(resolved) == 4096


def prompt_tokens_within_the_bound(tokenizer: PreTrainedTokenizerBase, prompt: str) -> None:
    """What surely_fits rests on: a prompt of n UTF-8 bytes is at most n tokens, its chat template included but for
    TEMPLATE_SLACK, so a prompt it lets through unread fits."""
    for chat in (True, False):
        tokens = len(encode_prompt(tokenizer, prompt, chat))
        assert tokens <= len(prompt.encode("utf-8")) + TEMPLATE_SLACK
        if surely_fits(prompt, tokens):
            raise AssertionError(f"{tokens} tokens passed as fitting a context of {tokens}")


# Any text: letters of every script, emoji (four bytes each, up to four tokens: counted in characters the bound
# would not hold), controls, and the tokenizers' own special tokens written as text.
TEXT = st.characters(exclude_characters="\0", exclude_categories=["Cs"])  # a NUL and a lone surrogate: refused
PROMPTS = st.text(TEXT, min_size=1, max_size=300).filter(str.strip) | st.sampled_from(
    ["<|im_end|>" * 50, "😀" * 200, "a\n" * 150, " " * 300 + "x"])


@given(prompt=PROMPTS)
def test_a_prompt_has_no_more_tokens_than_bytes_and_a_templates_slack_byte_level(
        byte_bpe: PreTrainedTokenizerBase, prompt: str) -> None:
    prompt_tokens_within_the_bound(byte_bpe, prompt)


@given(prompt=PROMPTS)
def test_a_prompt_has_no_more_tokens_than_bytes_and_a_templates_slack_sentencepiece(
        sp_bpe: PreTrainedTokenizerBase, prompt: str) -> None:
    prompt_tokens_within_the_bound(sp_bpe, prompt)


def test_counted_in_characters_an_emoji_prompt_would_not_fit_the_bound(byte_bpe: PreTrainedTokenizerBase) -> None:
    """The control: why surely_fits counts bytes. Four-byte characters take more tokens than characters."""
    prompt = "😀" * 200
    assert len(encode_prompt(byte_bpe, prompt, False)) > len(prompt) + 1
    assert not surely_fits(prompt, len(prompt) + TEMPLATE_SLACK + 1), "800 bytes do not surely fit in 713 tokens"


def test_a_prompt_with_a_lone_surrogate_is_refused_in_words(byte_bpe: PreTrainedTokenizerBase) -> None:
    """A library caller's prompt decoded with surrogateescape reached the tokenizer, which raised a TypeError."""
    from decode_tui.core.errors import UsageError

    with pytest.raises(UsageError, match="lone surrogate \\(at character 3\\)"):
        encode_prompt(byte_bpe, "caf\udce9", True)


def test_surely_fits_lets_through_only_what_the_bound_proves() -> None:
    assert surely_fits("hello", 8192)
    assert not surely_fits("x" * (8192 - TEMPLATE_SLACK), 8192), "at the bound: only the tokenizer can tell"
    assert surely_fits("x" * (8192 - TEMPLATE_SLACK - 1), 8192)
    assert not surely_fits("é" * 4000, 8192), "two bytes a character"
    assert not surely_fits("hello", None), "a context nobody declared: the tokenizer decides"
