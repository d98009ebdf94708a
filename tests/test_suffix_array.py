"""The suffix array (core/drafting/suffix_array.py) against the suffix tree it stands in for: the same counts and the
same draft trees, node for node, on random sequences; and its memory, a few bytes a token."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from decode_tui.core.drafting.suffix_array import build, built
from decode_tui.core.drafting.suffix_tree import SuffixTree
from decode_tui.core.model.acquire import drive

sequences = st.lists(st.lists(st.integers(0, 4), min_size=0, max_size=40), min_size=1, max_size=4)


def both(seqs: list[list[int]], depth: int) -> tuple[SuffixTree, object]:
    tree = SuffixTree(depth)
    for seq in seqs:
        tree.add(seq)
    return tree, built([np.array(s, dtype=np.int32) for s in seqs], depth)


@settings(max_examples=80, deadline=None)
@given(seqs=sequences, depth=st.integers(1, 8), data=st.data())
def test_every_count_equals_the_trees(seqs: list[list[int]], depth: int, data: st.DataObject) -> None:
    tree, array = both(seqs, depth)
    for _ in range(20):
        pattern = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=depth + 2))
        assert array.count(pattern) == tree.count(pattern), (pattern, seqs)  # type: ignore[attr-defined]


@settings(max_examples=120, deadline=None)
@given(seqs=sequences, depth=st.integers(2, 10), data=st.data())
def test_every_draft_equals_the_trees_node_for_node(seqs: list[list[int]], depth: int, data: st.DataObject) -> None:
    tree, array = both(seqs, depth)
    for _ in range(10):
        context = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=12))
        max_tokens = data.draw(st.integers(1, 20))
        factor = data.draw(st.sampled_from([1.0, 2.0, 4.0]))
        floor = data.draw(st.sampled_from([0.0, 0.1, 0.3]))
        ours = array.speculate(context, max_tokens, factor, floor)  # type: ignore[attr-defined]
        theirs = tree.speculate(context, max_tokens, factor, floor)
        assert (ours.tree, ours.match_length) == (theirs.tree, theirs.match_length), (context, seqs)
        assert ours.probs == theirs.probs


def test_building_says_each_sort_and_a_common_token_is_searched_in_a_few_probes() -> None:
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 50, 20_000).astype(np.int32) for _ in range(3)]
    said: list[str] = []
    array = drive(build(seqs), said.append)
    assert len(said) == 5 and all("60,000 tokens" in s for s in said), said
    assert len(array) == 60_000 and array.nbytes <= 8 * 60_100 + 8 * 51, "int32 tokens and suffixes"
    tree = SuffixTree()
    for seq in seqs:
        tree.add(seq.tolist())
    for context in ([1], [3, 4, 5], list(seqs[0][100:130])):
        assert array.speculate(context, 30, 4.0, 0.01).tree == tree.speculate(context, 30, 4.0, 0.01).tree
