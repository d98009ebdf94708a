"""The suffix array (core/drafting/suffix_array.py) against the suffix tree it stands in for: the same counts and the
same draft trees, node for node, on random sequences; and its memory, a few bytes a token."""

from __future__ import annotations

from pathlib import Path

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


def _trace_lines(tokens: int, finished: bool = True) -> list[str]:
    """A `generate --format jsonl` trace of ``tokens`` emitted tokens, as its lines."""
    import json

    lines = [json.dumps({"event": "started", "mode": "greedy", "model": "m", "prompt_token_ids": [1, 2],
                         "prompt_text": "p", "params": {}})]
    lines += [json.dumps({"event": "token_emitted", "index": i, "token_id": 5 + i % 50, "text": " word", "start": i,
                          "end": i + 1, "source": "target", "target_forwards": i + 1}) for i in range(tokens)]
    if finished:
        lines.append(json.dumps({"event": "finished", "mode": "greedy", "prompt_token_ids": [1, 2],
                                 "token_ids": [5 + i % 50 for i in range(tokens)], "text": " word" * tokens,
                                 "finish_reason": "length", "new_tokens": tokens, "target_forwards": tokens,
                                 "elapsed_s": 1.0, "tokens_per_s": 1.0}))
    return lines


def test_reading_a_big_history_says_how_far_along_it_is_as_a_bar(tmp_path: Path) -> None:
    """A 20 MB history said one line, then nothing for most of a minute: reading a trace says the MB read every
    2,000 lines, a text the MB tokenised every quarter MB, each with a bar; then each sort of the index."""
    from decode_tui.core.drafting.suffix_drafting import reading_history

    trace, text = tmp_path / "big.jsonl", tmp_path / "big.txt"
    trace.write_text("\n".join(_trace_lines(9000)) + "\n", encoding="utf-8")
    text.write_text("the quick brown fox\n" * 60_000, encoding="utf-8")  # 1.1 MB
    said: list[str] = []
    files = drive(reading_history([trace, text], lambda t: [len(w) for w in t.split()], "m"), said.append)
    read = [line for line in said if "MB read" in line]
    tokenised = [line for line in said if "MB tokenised" in line]
    assert len(read) == 4 and all("▕" in line and "▏" in line for line in read), read  # lines 2,000 ... 8,000
    assert len(tokenised) == 5 and tokenised[-1].endswith("1.1 of 1.1 MB tokenised"), tokenised
    assert any("sorting" in line for line in said) and files.origins == ("big.jsonl", "big.txt")


def test_a_big_trace_without_its_end_is_refused_before_the_model_loads_without_parsing_it(tmp_path: Path) -> None:
    """Over PARSED_AT_ONCE a trace is only searched for its `finished` line before the model loads; under it each
    line is checked then too."""
    import pytest

    from decode_tui.core.drafting import suffix_drafting
    from decode_tui.core.errors import UsageError

    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(_trace_lines(30_000, finished=False)) + "\n", encoding="utf-8")
    whole = tmp_path / "whole.jsonl"
    whole.write_text("\n".join(_trace_lines(30_000)) + "\n", encoding="utf-8")
    assert cut.stat().st_size > suffix_drafting.PARSED_AT_ONCE
    with pytest.raises(UsageError, match="no `finished` event"):
        suffix_drafting.check_history_files([cut])
    suffix_drafting.check_history_files([whole])
