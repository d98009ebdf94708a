"""Prompt lookup, every match (core/drafting/lookup_tree.py): the tree holds the chain prompt lookup drafts as its first
branch, and what followed every other match of the same n-gram."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from decode_tui.core.drafting.lookup_tree import lookup_tree
from decode_tui.core.drafting.prompt_lookup import PromptLookup
from decode_tui.core.token_tree import ROOT


def test_every_match_of_the_n_gram_gives_a_branch() -> None:
    # "1 2" occurs three times before the end: followed by 3 4, 3 5 and 6 9.
    context = [1, 2, 3, 4, 9, 1, 2, 3, 5, 9, 1, 2, 6, 9, 1, 2]
    found = lookup_tree(context, max_ngram_size=2, num_pred_tokens=2, budget=10)
    assert found.ngram == 2
    assert found.tree.tokens == (3, 4, 5, 6, 9) and found.tree.parents == (ROOT, 0, 0, ROOT, 3)
    assert found.sources == (0, 0, 5, 10, 10), "each node says which match put it there first"
    chain = PromptLookup(2, 2).propose(context, 2, [], True, None).token_ids
    assert [found.tree.tokens[i] for i in found.tree.path_to(1)] == chain, "the chain is the first branch"
    assert len(lookup_tree(context, 2, 2, budget=3).tree) == 3, "the budget caps the nodes"
    assert len(lookup_tree([1, 2, 3], 2, 2, budget=10).tree) == 0, "no earlier occurrence: no draft"


def test_a_continuation_stops_before_an_end_of_text_token() -> None:
    found = lookup_tree([1, 2, 0, 7, 1, 2, 8, 1, 2], 2, 3, budget=10, eos_token_ids=frozenset({0}))
    assert found.tree.tokens == (8, 1, 2) and found.sources == (4, 4, 4)


@settings(max_examples=80, deadline=None)
@given(context=st.lists(st.integers(0, 4), min_size=1, max_size=40), ngram=st.integers(1, 3), k=st.integers(1, 6),
       budget=st.integers(1, 30))
def test_the_tree_holds_prompt_lookups_chain_and_every_other_continuation(context: list[int], ngram: int, k: int,
                                                                          budget: int) -> None:
    found = lookup_tree(context, ngram, k, budget)
    chain = PromptLookup(ngram, k).propose(context, k, [], True, None).token_ids
    assert (len(found.tree) == 0) == (not chain)
    assert len(found.tree) <= budget
    paths = {tuple(found.tree.tokens[j] for j in found.tree.path_to(i)) for i in range(len(found.tree))}
    assert tuple(chain[: min(len(chain), budget)]) in paths | {()}, "the chain, as far as the budget goes"
    for path in paths:  # every path was a continuation of the n-gram somewhere earlier in the context
        n, g = len(context), found.ngram
        assert any(context[s : s + g] == context[n - g :] and context[s + g : s + g + len(path)] == list(path)
                   for s in range(n - g))


def test_a_greedy_loop_verifying_lookup_trees_emits_plain_greedys_tokens() -> None:
    """The pieces compose: each round drafts every match's continuation as a tree, verifies it in one forward,
    follows the target's choice and keeps that path's keys and values. The tokens are plain greedy's, on a prompt
    whose n-grams recur with different continuations."""
    import torch

    from decode_tui.core.execution.forward import forward, new_cache
    from decode_tui.core.execution.tree_attention import keep_path, tree_forward
    from decode_tui.core.token_tree import greedy_path

    from .conftest import tiny_model

    model = tiny_model("llama", vocab_size=420, seed=9)
    g = torch.Generator().manual_seed(9)
    words = torch.randint(3, 400, (6,), generator=g).tolist()
    prompt = [t for _ in range(4) for t in (words + torch.randint(3, 400, (2,), generator=g).tolist())]
    with torch.inference_mode():
        ids = list(prompt)
        for _ in range(24):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
        expected = ids[len(prompt) :]
        cache = new_cache(model, rollback=True)
        out = [int(forward(model, torch.tensor([prompt]), cache)[0, -1].argmax())]
        trees = 0
        while len(out) < 24:
            context = prompt + out
            found = lookup_tree(context, 3, 4, budget=12)
            trees += len(found.tree.children(-1)) > 1
            logits = tree_forward(model, cache, out[-1], found.tree)
            path, extra = greedy_path(found.tree, logits.argmax(-1).tolist())
            keep_path(cache, len(context) - 1, path)
            out += [found.tree.tokens[node] for node in path] + [extra]
    assert out[:24] == expected
    assert trees, "some round drafted more than one continuation"
