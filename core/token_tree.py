"""Token trees: many drafted continuations verified in one forward pass (SpecInfer, Miao et al., 2023).

A drafter that has several guesses for what follows (every earlier match of an n-gram, a draft model's
runners-up) proposes them as a tree: continuations sharing their prefixes, each node one token. The target
reads the pending token and every node in one forward pass. Each node attends to the cache and to its own
ancestors only (a tree attention mask), at the position its depth gives it, so its logits are those the
target would give after the node's own path, as if that path alone had been fed. The verifier then follows
the target's choice down the tree from the root and keeps that path's keys and values, moved to where a chain's
would be: nothing is fed again.

A chain is the tree whose nodes each have one child: ``TokenTree.from_chains([draft])``.

Rows of a tree forward: row 0 is the pending token (depth 0, the root), row 1 + i is node i. Nodes are in
topological order (a parent before its children), as the papers' trees are laid out.

It knows trees, their attention mask, their positions and which keys and values to keep; nothing of drafters,
sampling or events. Written by hand: transformers verifies chains only (its assisted generation), and no library
offers a token tree over a transformers cache; the mask goes to the model as a prepared 4D mask, which
transformers takes as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .forward import StaticKV, rollback

if TYPE_CHECKING:
    from transformers import Cache, PreTrainedModel

ROOT = -1  # the parent of the root's children: the pending token


@dataclass(frozen=True)
class TokenTree:
    """Drafted tokens as a tree: node i holds ``tokens[i]`` and follows ``parents[i]`` (ROOT, or an earlier node)."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents):
            raise ValueError("a token tree needs one parent per token")
        for i, parent in enumerate(self.parents):
            if not ROOT <= parent < i:
                raise ValueError(f"node {i}'s parent {parent} is not an earlier node or the root (-1)")

    @classmethod
    def from_chains(cls, chains: Sequence[Sequence[int]]) -> TokenTree:
        """The trie of ``chains``: continuations that start alike share their nodes, in the order first met."""
        tokens: list[int] = []
        parents: list[int] = []
        child: dict[tuple[int, int], int] = {}  # (parent, token) -> node
        for chain in chains:
            parent = ROOT
            for token in chain:
                node = child.get((parent, token))
                if node is None:
                    node = child[(parent, token)] = len(tokens)
                    tokens.append(token)
                    parents.append(parent)
                parent = node
        return cls(tuple(tokens), tuple(parents))

    def __len__(self) -> int:
        return len(self.tokens)

    def depths(self) -> list[int]:
        """Each node's depth: 1 for the root's children (the pending token is depth 0)."""
        depth: list[int] = []
        for parent in self.parents:
            depth.append(1 if parent == ROOT else depth[parent] + 1)
        return depth

    def children(self, node: int) -> list[int]:
        """The nodes that follow ``node`` (ROOT: the pending token), in order."""
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def path_to(self, node: int) -> list[int]:
        """The nodes from the root's child down to ``node``, in order."""
        path = []
        while node != ROOT:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def kept(self, keep: Sequence[bool]) -> tuple[TokenTree, list[int]]:
        """The tree of the nodes ``keep`` marks whose ancestors are all kept (a node left out takes its subtree
        with it), and for each new node its index in this tree."""
        index: dict[int, int] = {ROOT: ROOT}
        tokens: list[int] = []
        parents: list[int] = []
        old: list[int] = []
        for i, (token, parent) in enumerate(zip(self.tokens, self.parents, strict=True)):
            if keep[i] and parent in index:
                index[i] = len(tokens)
                tokens.append(token)
                parents.append(index[parent])
                old.append(i)
        return TokenTree(tuple(tokens), tuple(parents)), old

    def is_chain(self) -> bool:
        return all(parent == i - 1 for i, parent in enumerate(self.parents))


def tree_mask(tree: TokenTree, past: int, key_length: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[1, 1, 1 + n, key_length] additive attention mask (0 where a row may look, the dtype's minimum elsewhere):
    every row sees the ``past`` cached positions; the pending token (row 0, at position ``past``) sees itself; node
    i sees the pending token, its ancestors and itself. Key positions past ``past + 1 + n`` (a static cache's
    unused end) are hidden from every row."""
    n = len(tree)
    allowed = torch.zeros((1 + n, key_length), dtype=torch.bool)
    allowed[:, :past] = True
    allowed[:, past] = True  # the pending token: every row's first ancestor
    for i, parent in enumerate(tree.parents):
        row = 1 + i
        if parent != ROOT:
            allowed[row, past + 1 : past + 1 + n] = allowed[1 + parent, past + 1 : past + 1 + n]
        allowed[row, past + 1 + i] = True
    mask = torch.zeros((1 + n, key_length), dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None].to(device)


def tree_positions(tree: TokenTree, past: int, device: torch.device) -> torch.Tensor:
    """[1, 1 + n] position ids: the pending token at ``past``, each node at ``past`` + its depth (siblings share
    one position, as the tokens they stand for would)."""
    return torch.tensor([[past, *(past + d for d in tree.depths())]], device=device)


def tree_forward(model: PreTrainedModel, cache: Cache, pending: int, tree: TokenTree) -> torch.Tensor:
    """The target's logits at every row of the tree ([1 + n, V], float32): one forward over the pending token and
    every node, appended to ``cache`` (which held everything before the pending token). Follow it with
    :func:`keep_path`."""
    past = cache.get_seq_length()
    past = int(past)
    key_length = cache.max_len if isinstance(cache, StaticKV) else past + 1 + len(tree)
    device = model.device
    ids = torch.tensor([[pending, *tree.tokens]], device=device)  # [1, 1 + n]
    mask = tree_mask(tree, past, key_length, model.dtype, device)  # [1, 1, 1 + n, K]
    out = model(input_ids=ids, attention_mask=mask, position_ids=tree_positions(tree, past, device), cache=cache,
                use_cache=True)
    logits: torch.Tensor = out.logits[0].float()
    return logits


def greedy_path(tree: TokenTree, choice: Sequence[int]) -> tuple[list[int], int]:
    """Follow the target's own choice down the tree: ``choice[r]`` is its token at row r (0 the pending token,
    1 + i node i). Returns the nodes accepted, root first, and the target's token after the last of them (the
    correction, or the bonus token after a whole path)."""
    path: list[int] = []
    node = ROOT
    while True:
        wanted = choice[node + 1]
        follow = next((c for c in tree.children(node) if tree.tokens[c] == wanted), None)
        if follow is None:
            return path, wanted
        path.append(follow)
        node = follow


def keep_path(cache: Cache, past: int, path: Sequence[int]) -> None:
    """After :func:`tree_forward`: keep the keys and values of the pending token and of ``path``'s nodes, moved
    to the positions right after it (where a chain would have put them), and forget every other node's.

    Nodes are in topological order, so each kept node moves to a position at or before its own: copying them in
    one gather reads every source before any is overwritten."""
    kept = len(path)
    if kept and list(path) != list(range(kept)):  # the first nodes in order are where a chain's would be already
        for layer in cache.layers:
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
                continue
            if keys.shape[-2] < past + 2 + max(path):  # a sliding window that let positions go: not a tree's
                raise ValueError("a cache layer that does not hold every position cannot keep a tree's path")
            index = torch.tensor([past + 1 + node for node in path], device=keys.device)
            keys[:, :, past + 1 : past + 1 + kept] = keys.index_select(2, index)
            values[:, :, past + 1 : past + 1 + kept] = values.index_select(2, index)
    rollback(cache, past + 1 + kept)
