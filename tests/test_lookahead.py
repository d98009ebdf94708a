"""Lookahead decoding (core/drafting/lookahead.py): the window and the pool as the paper keeps them, one tree per
forward, greedy lookahead is transformers' greedy token for token, and sampling through its trees keeps the target's
distribution (a chi-square test; its negative control is the tree verifier's, tests/test_tree_verification.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch

from decode_tui.core.drafting.lookahead import LookaheadDrafter, Shape, shape_for, shape_of
from decode_tui.core.errors import UsageError
from decode_tui.core.params import DraftParams
from decode_tui.core.record.events import DraftProposed, DraftVerified, Finished
from decode_tui.core.token_tree import ROOT

from .conftest import tiny_model
from .test_speculative import SAMPLING, V, chi_square_p_value, exact_distribution, run, transformers_greedy_case

EOS = V - 1


def test_a_shape_fills_its_budget_and_never_passes_it() -> None:
    assert Shape(5, 4, 5).nodes == 4 + 10 + 15  # llama.cpp's W = 5, N = 4, G = 5 example: 29 nodes and the input
    for budget in (1, 4, 8, 16, 32, 64, 512):
        shape = shape_for(budget)
        assert shape.nodes <= budget and shape.window >= 2 and shape.guesses == min(shape.window, budget - 1)
        assert Shape(shape.window + 1, shape.ngram, shape.window + 1).nodes > budget or budget < 3, "the widest"
    assert shape_for(4).ngram == 2 and shape_for(16).ngram == 3 and shape_for(64).ngram == 4


def test_the_first_tree_is_the_window_read_from_the_context() -> None:
    d = LookaheadDrafter(Shape(3, 3, 2))
    draft = d.propose([10, 11, 12, 13, 14], 8, [], True, None)
    tree = draft.tree
    assert tree is not None and draft.sources is not None and len(draft.sources) == len(tree)
    # levels[j][i] = the context's last W + N - 2 tokens from i + j on: [12, 13, 14], [13, 14, ...]
    assert d.levels == [[11, 12, 13], [12, 13, 14]]
    # level 0 past the pending token is a chain (the trunk); level 1 of column i hangs off level 0's column i
    assert tree.tokens[0] == 12 and tree.parents[0] == ROOT
    assert all(p < i for i, p in enumerate(tree.parents))


def test_the_next_level_is_the_targets_argmax_and_every_column_goes_to_the_pool() -> None:
    d = LookaheadDrafter(Shape(2, 2, 2))  # one level: level 0's column 0 is the pending token, column 1 one node
    context = [5, 6, 7]
    draft = d.propose(context, 4, [], True, None)
    assert draft.token_ids == [7]  # the window starts as the context's last tokens: [6 (stands for 7), 7]
    logits = torch.zeros(2, V)
    logits[0, 40] = 1.0  # after the pending token 7
    logits[1, 41] = 1.0  # after node 0 (token 7 at position 1)
    d.observed([7, *draft.token_ids], logits)
    assert d.levels == [[40, 41]]
    assert d.pool == {7: [(41,), (40,)]} and d.harvested == [(7, 40), (7, 41)]  # newest first
    # The round kept the target's 40 (no draft accepted): the context gained one token, as the window counted.
    again = d.propose([5, 6, 7, 40], 4, [], True, None)
    assert again.token_ids == [41], "level 0's column 1 guesses the next token; no n-gram starts with 40 yet"
    assert again.rows == (("level 1", (40, 41)), ("harvested", (7, 40)), ("harvested", (7, 41))), again.rows


def test_the_pool_keeps_the_newest_g_and_none_twice() -> None:
    d = LookaheadDrafter(Shape(2, 3, 2))
    for ngram in ([1, 2, 3], [1, 4, 5], [1, 2, 3], [1, 6, 7]):
        d._keep(ngram)
    assert d.pool[1] == [(6, 7), (4, 5)]
    draft = d.propose([9, 9, 1], 8, [], True, None)
    assert draft.sources is not None and draft.sources.count("n-gram from the pool") == 4  # two n-grams of N - 1


def test_nothing_grows_after_an_end_of_text_nor_past_the_round_length() -> None:
    d = LookaheadDrafter(Shape(4, 3, 0), frozenset({EOS}))
    assert d.propose([1, 2, EOS], 8, [], True, None).token_ids == []
    d = LookaheadDrafter(Shape(4, 3, 0), frozenset({EOS}))
    draft = d.propose([1, EOS, 3, 4, 5], 8, [], True, None)
    tree = draft.tree
    assert tree is not None and all(tree.tokens[p] != EOS for p in tree.parents if p != ROOT)
    short = LookaheadDrafter(Shape(4, 3, 0)).propose([1, 2, 3, 4, 5], 1, [], True, None).tree
    assert short is not None and short.depth == 1


@pytest.mark.parametrize("seed", range(8))
def test_greedy_lookahead_is_transformers_greedy(byte_bpe: Any, seed: int) -> None:
    max_new = 32
    model, prompt, expected = transformers_greedy_case(seed, 200, max_new)
    d = LookaheadDrafter([Shape(2, 2, 1), Shape(3, 3, 3), Shape(5, 4, 5), Shape(1, 5, 2)][seed % 4], frozenset({EOS}))
    events = run(model, byte_bpe, d, prompt, max_new, k=8)
    result = events[-1]
    assert isinstance(result, Finished) and list(result.token_ids) == expected
    assert any(isinstance(e, DraftProposed) and e.drafter == "lookahead" for e in events)


def test_a_jacobi_window_on_a_repeating_text_keeps_several_tokens_a_forward(byte_bpe: Any) -> None:
    """A random tiny model falls into a loop: the window converges on it, the pool holds its n-grams, and rounds
    keep more than one token, with greedy's text."""
    model = tiny_model("llama", vocab_size=V, seed=4)
    prompt = [3, 4, 5, 6]
    d = LookaheadDrafter(Shape(5, 4, 5), frozenset({EOS}))
    events = run(model, byte_bpe, d, prompt, 96, k=8)
    result = events[-1]
    assert isinstance(result, Finished)
    accepted = sum(e.accepted for e in events if isinstance(e, DraftVerified))
    assert accepted > 0 and result.target_forwards < len(result.token_ids), (accepted, result.target_forwards)


@pytest.mark.slow
def test_lookahead_trees_keep_the_target_distribution_when_sampling(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=21, initializer_range=0.08)
    prompt = [7, 8, 9]
    counts: Counter[tuple[int, ...]] = Counter()
    d = LookaheadDrafter(Shape(3, 3, 3))  # one window and pool for every run: filled by earlier draws
    for seed in range(1000):
        result = run(model, byte_bpe, d, prompt, 3, params=SAMPLING, k=2, sample=True, seed=seed)[-1]
        assert isinstance(result, Finished)
        counts[tuple(result.token_ids)] += 1
    assert chi_square_p_value(counts, exact_distribution(model, prompt, SAMPLING, 3)) > 1e-3


def test_bad_window_sizes_are_refused_by_the_settings() -> None:
    for field, value in (("lookahead_window", 0), ("lookahead_ngram", 1), ("lookahead_ngram", 9),
                         ("lookahead_guesses", -1), ("lookahead_window", 65)):
        given: dict[str, Any] = {field: value}
        with pytest.raises(UsageError, match=f"--{field.replace('_', '-')}"):
            DraftParams(**given)
    with pytest.raises(UsageError, match="895 nodes"):
        DraftParams(lookahead_window=64, lookahead_ngram=8)  # G as many as the columns: refused before loading
    with pytest.raises(UsageError, match="nodes"):
        shape_of(DraftParams(lookahead_ngram=8), 512)  # W and G sized for n-grams of 4
    assert shape_of(DraftParams(lookahead_ngram=5), 16) == Shape(4, 5, 4), "the others sized to the budget"
    assert shape_of(DraftParams(lookahead_guesses=0), 16).guesses == 0
    with pytest.raises(UsageError, match="one column"):
        DraftParams(lookahead_window=1, lookahead_ngram=2)
    with pytest.raises(UsageError, match="one column"):
        shape_of(DraftParams(lookahead_window=1), 4)  # N = 2 from a small budget
    assert shape_of(DraftParams(lookahead_window=6), 16) == Shape(6, 3, 6), "G as many as the columns asked"
