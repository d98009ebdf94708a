"""The suffix trees of SuffixDecoding (core/drafting/suffix_tree.py): counts against a brute-force count of substrings,
and the draft trees grown from them against the paper's rules (longest match, best first, budget by match length,
a floor on probability)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decode_tui.core.drafting.suffix_tree import SuffixTree
from decode_tui.core.token_tree import ROOT

sequences = st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=30), min_size=1, max_size=4)


def brute_count(seqs: list[list[int]], pattern: list[int]) -> int:
    n = len(pattern)
    return sum(1 for seq in seqs for i in range(len(seq) - n + 1) if seq[i : i + n] == pattern)


@settings(max_examples=60, deadline=None)
@given(seqs=sequences, depth=st.integers(1, 6), data=st.data())
def test_every_substring_up_to_the_depth_is_counted_as_often_as_it_occurs(seqs: list[list[int]], depth: int,
                                                                        data: st.DataObject) -> None:
    tree = SuffixTree(depth)
    for seq in seqs:
        tree.add(seq)
    for _ in range(20):
        pattern = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=depth + 2))
        expected = brute_count(seqs, pattern) if len(pattern) <= depth else 0
        assert tree.count(pattern) == expected, (pattern, seqs)


@settings(max_examples=40, deadline=None)
@given(seq=st.lists(st.integers(0, 3), max_size=40), cuts=st.lists(st.integers(0, 40), max_size=5))
def test_a_sequence_grown_token_by_token_counts_as_one_added_whole(seq: list[int], cuts: list[int]) -> None:
    whole, grown = SuffixTree(5), SuffixTree(5)
    whole.add(seq)
    start = 0
    for cut in [*sorted(c for c in cuts if c <= len(seq)), len(seq)]:
        grown.extend(7, seq[start:cut])
        start = cut
    for i in range(len(seq)):
        for j in range(i + 1, min(i + 6, len(seq) + 1)):
            assert grown.count(seq[i:j]) == whole.count(seq[i:j])


def test_the_draft_follows_the_longest_match_best_first() -> None:
    # "a b c" is followed by "d f" twice (then "a", once) and by e once; "x a b c" never occurred, so the longest
    # match of the context "x a b c" is "a b c", 3 tokens: a budget of 3 nodes, the likeliest first.
    a, b, c, d, e, x, f = range(7)
    tree = SuffixTree()
    tree.add([a, b, c, d, f, a, b, c, e, a, b, c, d, f])
    spec = tree.speculate([x, a, b, c], max_tokens=10)
    assert spec.match_length == 3
    assert spec.tree.tokens == (d, f, a) and spec.tree.parents == (ROOT, 0, 1)
    assert spec.probs == pytest.approx((2 / 3, 2 / 3, 2 / 3)) and spec.score == pytest.approx(2.0)
    # With room for more, e (1/3) comes in as the root's second child, after every node of the likelier branch
    # (which goes on "a b c e a b c d f", as it did the first time, at 2/3 all along).
    wider = tree.speculate([x, a, b, c], max_tokens=30, max_spec_factor=10.0)
    at = list(zip(wider.tree.tokens, wider.tree.parents, strict=True)).index((e, ROOT))
    assert wider.probs[at] == pytest.approx(1 / 3) and all(p == pytest.approx(2 / 3) for p in wider.probs[:at])
    assert [wider.tree.tokens[i] for i in wider.tree.path_to(at - 1)] == [d, f, a, b, c, e, a, b, c, d, f]
    assert len(tree.speculate([x, a, b, c], max_tokens=2).tree) == 2, "max_tokens caps it"
    assert len(tree.speculate([c], max_tokens=10).tree) == 1, "a match of one token drafts one node"
    assert len(tree.speculate([x], max_tokens=10).tree) == 0, "nothing follows x: no draft"
    assert len(tree.speculate([x, a, b, c], max_tokens=10, min_token_prob=0.9).tree) == 0, "under the floor"


def test_a_pattern_that_fills_the_depth_gives_way_to_a_shorter_one_with_room_after_it() -> None:
    """In a tree 6 deep a pattern of 5 tokens has room for one more; a pattern of 2 leaves room for 4, and its
    draft expects more tokens accepted."""
    tree = SuffixTree(6)
    text = list(range(10))
    tree.add(text)
    spec = tree.speculate(text[:5], max_tokens=10, max_spec_factor=2.0)
    assert spec.match_length < 5 and len(spec.tree) > 1
    assert spec.tree.tokens[:2] == (5, 6)


@settings(max_examples=60, deadline=None)
@given(seqs=sequences, context=st.lists(st.integers(0, 3), min_size=1, max_size=10), max_tokens=st.integers(1, 12),
       factor=st.sampled_from([0.5, 1.0, 2.0]), floor=st.sampled_from([0.0, 0.1, 0.3]))
def test_every_draft_keeps_the_papers_rules(seqs: list[list[int]], context: list[int], max_tokens: int, factor: float,
                                            floor: float) -> None:
    tree = SuffixTree(6)
    for seq in seqs:
        tree.add(seq)
    spec = tree.speculate(context, max_tokens, max_spec_factor=factor, min_token_prob=floor)
    n = len(spec.tree)
    assert n <= max_tokens and n <= int(factor * spec.match_length)
    if spec.match_length:  # a suffix of the context the tree holds
        pattern = context[len(context) - spec.match_length :]
        assert tree.count(pattern) > 0
    for length in range(1, len(context)):  # no shorter suffix's draft scores more
        shorter = tree.speculate(context[len(context) - length :], max_tokens, factor, floor)
        assert shorter.score <= spec.score + 1e-12
    for i in range(n):
        assert spec.probs[i] >= floor
        parent = spec.tree.parents[i]
        if parent != ROOT:
            assert spec.probs[i] <= spec.probs[parent] + 1e-12
        path = [spec.tree.tokens[j] for j in spec.tree.path_to(i)]
        assert tree.count([*context[len(context) - spec.match_length :], *path]) > 0 or \
            spec.match_length + len(path) > 6, "a drafted path occurred after the pattern"
    assert list(spec.probs) == sorted(spec.probs, reverse=True), "best first"
