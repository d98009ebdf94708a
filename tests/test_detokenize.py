"""The incremental detokeniser: pieces never hold half a character and add up to the reference decode."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decode_tui.core.record.detokenize import REPLACEMENT, Detokenizer, token_label

HARD_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("abc xyz\n\t.,!?")),
        st.sampled_from(["👋", "🏽", "🇫", "🇷", "\u200d", "👨", "👩", "🎉", "❤", "\ufe0f", "😀"]),  # emoji parts
        st.sampled_from(list("東京日本語中文测试한국어")),  # CJK and Hangul
        st.sampled_from(["\u0301", "\u0303", "\u0308", "e", "n", "a"]),  # combining marks
        st.characters(min_codepoint=0x20, max_codepoint=0x2FFFF, exclude_categories=["Cs"],
                      exclude_characters=REPLACEMENT),
    ),
    max_size=40,
)


def pieces_for(tokenizer: Any, ids: list[int], use_stream: bool | None, skip: bool = True) -> tuple[Any, list[Any]]:
    detok = Detokenizer(tokenizer, skip_special_tokens=skip, use_stream=use_stream)
    pieces = [detok.add(t, final=(i == len(ids) - 1)) for i, t in enumerate(ids)]
    return detok, pieces


def check_pieces(detok: Detokenizer, pieces: list[Any], ids: list[int], text_is_valid: bool) -> None:
    # the reference decode, less the U+FFFD of a character the ids end inside
    assert "".join(p.text for p in pieces) == detok.decode(ids).rstrip(REPLACEMENT)
    position = 0
    for p in pieces:  # spans tile the text with no gaps or overlaps
        assert p.start == position and p.end == p.start + len(p.text)
        position = p.end
    if text_is_valid:
        assert all(REPLACEMENT not in p.text for p in pieces)
    else:  # an unfinished character is never shown before the final flush
        assert all(not p.text.endswith(REPLACEMENT) for p in pieces[:-1])


@pytest.mark.parametrize("use_stream", [None, False], ids=["DecodeStream", "prefix-diff"])
@pytest.mark.parametrize("kind", ["byte_bpe", "sp_bpe"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=HARD_TEXT)
def test_pieces_of_real_text(request: pytest.FixtureRequest, kind: str, use_stream: bool | None,
                             text: str) -> None:
    tokenizer = request.getfixturevalue(kind)
    ids = tokenizer.encode(text, add_special_tokens=False)
    if not ids:
        return
    detok, pieces = pieces_for(tokenizer, ids, use_stream)
    check_pieces(detok, pieces, ids, text_is_valid=True)


@pytest.mark.parametrize("use_stream", [None, False], ids=["DecodeStream", "prefix-diff"])
@pytest.mark.parametrize("kind", ["byte_bpe", "sp_bpe"])
@pytest.mark.parametrize("skip", [True, False], ids=["skip-special", "keep-special"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_pieces_of_arbitrary_ids(request: pytest.FixtureRequest, kind: str, use_stream: bool | None, skip: bool,
                                 data: st.DataObject) -> None:
    """Any id sequence a model might emit, including stray byte tokens and special tokens."""
    tokenizer = request.getfixturevalue(kind)
    ids = data.draw(st.lists(st.integers(0, len(tokenizer) - 1), min_size=1, max_size=30))
    detok, pieces = pieces_for(tokenizer, ids, use_stream, skip)
    check_pieces(detok, pieces, ids, text_is_valid=False)


@pytest.mark.parametrize("kind", ["byte_bpe", "sp_bpe"])
@pytest.mark.parametrize("skip", [True, False], ids=["skip-special", "keep-special"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_reference_decode_is_the_tokenizers_own(request: pytest.FixtureRequest, kind: str, skip: bool,
                                                    data: st.DataObject) -> None:
    """Detokenizer.decode goes to the fast tokenizer's backend directly: the text transformers' decode gives."""
    tokenizer = request.getfixturevalue(kind)
    ids = data.draw(st.lists(st.integers(0, len(tokenizer) - 1), max_size=30))
    expected = tokenizer.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False)
    assert Detokenizer(tokenizer, skip_special_tokens=skip).decode(ids) == expected


def test_byte_level_shows_a_split_character_with_the_token_that_completes_it(byte_bpe: Any) -> None:
    ids = byte_bpe.encode("x 東 y", add_special_tokens=False)
    detok = Detokenizer(byte_bpe)
    texts = [detok.add(t).text for t in ids]
    holder = next(i for i, t in enumerate(texts) if "東" in t)
    prefix = byte_bpe.decode(ids[: holder + 1])
    assert prefix.endswith("東") and "\ufffd" not in prefix  # this token completes 東 ...
    assert byte_bpe.decode(ids[:holder]).endswith("\ufffd")  # ... the one before left it unfinished
    assert all(t == "" for t in texts[holder - 1 : holder]), "bytes of 東 before the last carry no text"


def test_byte_fallback_holds_a_byte_run_until_the_next_token_closes_it(sp_bpe: Any) -> None:
    ids = sp_bpe.encode("x 東 y", add_special_tokens=False)
    tokens = sp_bpe.convert_ids_to_tokens(ids)
    run = [i for i, t in enumerate(tokens) if t.startswith("<0x")]
    assert len(run) >= 2, "the test tokenizer has no token for 東: it must fall back to byte tokens"
    detok = Detokenizer(sp_bpe)
    texts = [detok.add(t).text for t in ids]
    assert all(texts[i] == "" for i in run)
    assert "東" in texts[run[-1] + 1]  # shown with the token that closes the run
    assert "".join(texts) == sp_bpe.decode(ids)


@pytest.mark.parametrize("use_stream", [None, False], ids=["DecodeStream", "prefix-diff"])
def test_a_run_cut_inside_a_character_ends_before_it_not_with_a_replacement(byte_bpe: Any,
                                                                           use_stream: bool | None) -> None:
    ids = byte_bpe.encode("a東", add_special_tokens=False)[:-1]  # cut inside 東's bytes (the length limit)
    assert byte_bpe.decode(ids).endswith(REPLACEMENT), "the reference decode ends in U+FFFD"
    detok, pieces = pieces_for(byte_bpe, ids, use_stream)
    assert detok.text == "a" and all(REPLACEMENT not in p.text for p in pieces)


def test_special_tokens_are_skipped_or_kept_as_asked(byte_bpe: Any) -> None:
    end = byte_bpe.convert_tokens_to_ids("<|im_end|>")
    ids = [*byte_bpe.encode("Hi", add_special_tokens=False), end]
    assert pieces_for(byte_bpe, ids, None, skip=True)[0].text == "Hi"
    assert pieces_for(byte_bpe, ids, None, skip=False)[0].text == "Hi<|im_end|>"


def test_candidate_labels_show_the_bytes_of_partial_characters(sp_bpe: Any, byte_bpe: Any) -> None:
    byte_token = sp_bpe.convert_tokens_to_ids("<0xE6>")
    assert token_label(sp_bpe, byte_token) == "⟨E6⟩"
    cut = byte_bpe.encode(" 東", add_special_tokens=False)
    partial = [t for t in cut if "\ufffd" in byte_bpe.decode([t])]
    assert partial and all("⟨" in token_label(byte_bpe, t) for t in partial), "a byte token's label is its bytes"
    hello = byte_bpe.encode(" Hello", add_special_tokens=False)
    assert "".join(token_label(byte_bpe, t) for t in hello) == " Hello"


@pytest.mark.real_model
def test_real_tokenizer_streams_emoji_cjk_and_combining_marks(smollm2: Any) -> None:
    tokenizer = smollm2.tokenizer
    text = "Hi 👋🏽 東京 — café e\u0301 🇫🇷 👨‍👩‍👧<|im_end|>"
    ids = tokenizer.encode(text, add_special_tokens=False)
    for skip in (True, False):
        detok, pieces = pieces_for(tokenizer, ids, None, skip)
        check_pieces(detok, pieces, ids, text_is_valid=True)
