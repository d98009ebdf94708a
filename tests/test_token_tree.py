"""Token trees (core/token_tree.py): the trie of drafts, its attention mask and positions, one forward over the
whole tree that gives each node the logits of its own path, and the kept path's keys and values.

The checks are against the plain path: a node's logits equal those of a forward over its path alone, the target's
greedy walk down the tree accepts exactly what plain greedy decoding would emit, and after the path is kept the
cache decodes on as if the accepted tokens had been fed one by one.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decode_tui.core.execution.forward import forward, new_cache
from decode_tui.core.execution.tree_attention import keep_path, tree_forward, tree_mask
from decode_tui.core.token_tree import ROOT, TokenTree, greedy_path

from .conftest import tiny_model

V = 420
ARCHS = ["llama", "qwen2", "phi3"]


def test_chains_that_start_alike_share_their_nodes() -> None:
    tree = TokenTree.from_chains([[5, 6, 7], [5, 6, 9], [5, 8], [4]])
    assert tree.tokens == (5, 6, 7, 9, 8, 4)
    assert tree.parents == (ROOT, 0, 1, 1, 0, ROOT)
    assert tree.depths() == [1, 2, 3, 3, 2, 1]
    assert tree.children(ROOT) == [0, 5] and tree.children(1) == [2, 3]
    assert tree.path_to(3) == [0, 1, 3]
    assert TokenTree.from_chains([[1, 2, 3]]).is_chain() and not tree.is_chain()


@pytest.mark.parametrize(("tokens", "parents"), [((1, 2), (ROOT,)), ((1, 2), (ROOT, 1)), ((1,), (3,))])
def test_a_malformed_tree_is_refused(tokens: tuple[int, ...], parents: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        TokenTree(tokens, parents)


def test_each_row_sees_the_cache_the_pending_token_and_its_own_ancestors() -> None:
    tree = TokenTree.from_chains([[5, 6], [7]])  # node 0 (5), node 1 (6, under 5), node 2 (7)
    mask = tree_mask(tree, past=2, key_length=7, dtype=torch.float32, device=torch.device("cpu"))[0, 0]
    seen = (mask == 0).int().tolist()
    assert seen == [[1, 1, 1, 0, 0, 0, 0],   # the pending token
                    [1, 1, 1, 1, 0, 0, 0],   # 5
                    [1, 1, 1, 1, 1, 0, 0],   # 6 after 5
                    [1, 1, 1, 0, 0, 1, 0]]   # 7, a sibling of 5; the static cache's unused end hidden from all


def plain_logits(model: Any, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        logits: torch.Tensor = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    return logits


def random_tree(g: torch.Generator, spine: list[int], width: int) -> TokenTree:
    """Chains that branch off ``spine`` (the greedy continuation) at random depths with random tokens, and the
    spine itself somewhere among them."""
    chains = []
    for _ in range(width):
        at = int(torch.randint(0, len(spine) + 1, (1,), generator=g))
        tail = torch.randint(1, V - 2, (int(torch.randint(1, 4, (1,), generator=g)),), generator=g).tolist()
        chains.append(spine[:at] + tail)
    chains.insert(int(torch.randint(0, width + 1, (1,), generator=g)), spine)
    return TokenTree.from_chains(chains)


def greedy_tokens(model: Any, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(plain_logits(model, ids).argmax()))
    return ids[len(prompt) :]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_one_tree_forward_gives_each_node_its_own_paths_logits_and_the_walk_is_greedy(
        arch: str, seed: int, static: bool) -> None:
    model = tiny_model(arch, vocab_size=V, seed=seed)
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(1, V - 2, (7 + seed,), generator=g).tolist()
    expected = greedy_tokens(model, prompt, 6)
    tree = random_tree(g, expected[1:5], width=4)  # expected[0] is the pending token: the prefill's choice
    cache = new_cache(model, rollback=True) if not static else new_cache(model, fast=True, max_len=64)
    with torch.inference_mode():
        forward(model, torch.tensor([prompt]), cache)  # the prompt: the pending token is expected[0]
        past = len(prompt)
        logits = tree_forward(model, cache, expected[0], tree)  # [1 + n, V]
        for i in range(len(tree)):
            path = [tree.tokens[j] for j in tree.path_to(i)]
            torch.testing.assert_close(logits[1 + i], plain_logits(model, [*prompt, expected[0], *path]),
                                       rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(logits[0], plain_logits(model, [*prompt, expected[0]]), rtol=1e-4, atol=1e-4)
        path, extra = greedy_path(tree, logits.argmax(-1).tolist())
        accepted = [tree.tokens[node] for node in path]
        assert accepted == expected[1:5], "the spine is in the tree: all four accepted"
        assert extra == expected[5]
        # Keep the path and decode on from the cache: the next logits are plain greedy's after the same tokens.
        keep_path(cache, past, path)
        assert int(cache.get_seq_length()) == past + 1 + len(path)
        after = forward(model, torch.tensor([[extra]]), cache)[0, -1]
    torch.testing.assert_close(after, plain_logits(model, [*prompt, *expected[:6]]), rtol=1e-4, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), spine_len=st.integers(0, 4), width=st.integers(0, 5))
def test_the_tree_walk_accepts_what_plain_greedy_emits_wherever_the_tree_strays(
        seed: int, spine_len: int, width: int) -> None:
    """Random trees around the greedy continuation, cut short at a random depth: the walk accepts the longest
    prefix of it the tree holds and then gives the target's token, exactly plain greedy's tokens, and the kept
    cache decodes on as greedy does."""
    model = MODEL
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(1, V - 2, (5,), generator=g).tolist()
    expected = greedy_tokens(model, prompt, 7)
    tree = random_tree(g, expected[1 : 1 + spine_len], width) if spine_len or width else TokenTree((), ())
    cache = new_cache(model, rollback=True)
    with torch.inference_mode():
        forward(model, torch.tensor([prompt]), cache)
        logits = tree_forward(model, cache, expected[0], tree)
        path, extra = greedy_path(tree, logits.argmax(-1).tolist())
        emitted = [tree.tokens[node] for node in path] + [extra]
        assert emitted == expected[1 : 1 + len(emitted)]
        assert len(path) >= spine_len, "every token of the spine in the tree is accepted"
        keep_path(cache, len(prompt), path)
        after = forward(model, torch.tensor([[extra]]), cache)[0, -1]
    assert int(after.argmax()) == expected[1 + len(emitted)]


MODEL = tiny_model("llama", vocab_size=V, seed=21)


def test_the_control_a_causal_mask_gives_a_sibling_the_wrong_logits() -> None:
    """Without the tree mask (plain causal attention over the nodes laid in a row), a node after its sibling
    sees the sibling as if it came before it: its logits are not its path's. The mask is what makes them right."""
    model = tiny_model("llama", vocab_size=V, seed=3)
    prompt = [5, 6, 7, 8]
    tree = TokenTree.from_chains([[10, 11], [12]])
    with torch.inference_mode():
        cache = new_cache(model)
        forward(model, torch.tensor([prompt]), cache)
        causal = model(input_ids=torch.tensor([[9, *tree.tokens]]), cache=cache, use_cache=True).logits[0].float()
    right = plain_logits(model, [*prompt, 9, 12])
    assert not torch.allclose(causal[1 + 2], right, rtol=1e-4, atol=1e-4)
