"""The streaming pane wraps only the tail of its text; it must always equal wrapping all of it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rich._wrap import words
from rich.console import Console
from rich.text import Text

from decode_tui.tui.widgets.text_pane import _last_word_start, rewrap, tail, wrap_from

# Token-like pieces: letters, spaces, newlines, wide and accented characters, words longer than a line.
PIECES = st.lists(st.one_of(st.text(alphabet="ab \n日é", max_size=6), st.sampled_from(["xyzzy", "loooooooooong"])),
                  max_size=40)


@given(pieces=PIECES, width=st.integers(1, 12))
def test_wrap_from_the_start_is_rich_s_own_wrap(pieces: list[str], width: int) -> None:
    text = Text("".join(pieces))
    lines, starts = wrap_from(text, 0, width)
    assert [line.plain for line in lines] == [line.plain for line in text.wrap(Console(), width)]
    assert starts == sorted(starts) and (not starts or starts[0] == 0)


@given(pieces=PIECES, data=st.data())
def test_the_tail_of_the_pane_s_text_is_rich_s_slice(pieces: list[str], data: st.DataObject) -> None:
    text = Text(justify="left")
    for i, piece in enumerate(pieces):
        text.append(piece, style=("bold", "italic", None)[i % 3])
    start = data.draw(st.integers(0, len(text)))
    expected, got = text[start:], tail(text, start)
    assert (got.plain, got.spans, got.justify) == (expected.plain, expected.spans, expected.justify)


@given(plain=st.text(alphabet="ab \n\t日é\u3000", max_size=30), data=st.data())
def test_the_last_word_starts_where_rich_s_words_say(plain: str, data: st.DataObject) -> None:
    end = data.draw(st.integers(0, len(plain)))
    paragraph = plain.rfind("\n", 0, end) + 1
    starts = [start for start, _, _ in words(plain[paragraph:end])]
    assert _last_word_start(plain, end) == paragraph + (starts[-1] if starts else 0)


@settings(max_examples=300)
@given(pieces=PIECES, width=st.integers(1, 12), cuts=st.lists(st.integers(0, 40), max_size=8))
def test_appending_in_any_batches_wraps_like_wrapping_everything(pieces: list[str], width: int,
                                                                  cuts: list[int]) -> None:
    text, wrapped = Text(), 0
    lines: list[Text] = []
    starts: list[int] = []
    for a, b in zip([0, *sorted(cuts)], [*sorted(cuts), len(pieces)], strict=True):
        for piece in pieces[a:b]:
            text.append(piece, style="bold" if len(text) % 2 else "italic")
        lines, starts = rewrap(text, lines, starts, wrapped, width)
        wrapped = len(text)
        full, full_starts = wrap_from(text, 0, width)
        assert [line.plain for line in lines] == [line.plain for line in full]
        assert [line.spans for line in lines] == [line.spans for line in full]
        assert starts == full_starts


def test_a_growing_last_word_moves_to_the_next_line() -> None:
    text = Text("the quick bro")
    lines, starts = wrap_from(text, 0, 12)
    assert [line.plain.rstrip() for line in lines] == ["the quick", "bro"]
    text.append("wn fox")
    lines, starts = rewrap(text, lines, starts, len("the quick bro"), 12)
    assert [line.plain.rstrip() for line in lines] == ["the quick", "brown fox"]


def test_a_line_that_starts_inside_a_folded_word_is_not_where_rewrapping_starts() -> None:
    # "loooooooooonga " is folded into "loooooo" / "oooonga" / " "; the space then owns the third line's start.
    text = Text("loooooooooonga aa")
    lines, starts = wrap_from(text, 0, 7)
    text.append("xyzzy")
    lines, starts = rewrap(text, lines, starts, len("loooooooooonga aa"), 7)
    assert [line.plain for line in lines] == [line.plain for line in wrap_from(text, 0, 7)[0]]
    assert lines[-1].plain == "aaxyzzy"
