"""One forward over a token tree (SpecInfer, Miao et al., 2023): its attention mask, its position ids, and the
keys and values of the path the target kept.

Rows of a tree forward: row 0 is the pending token (depth 0, the root), row 1 + i is node i of the
:class:`~decode_tui.core.token_tree.TokenTree`. Each node attends to the cache, to the pending token and to its
own ancestors only, at the position its depth gives it, so its logits are those the target would give after the
node's own path alone. After the verifier has chosen a path, :func:`keep_path` moves that path's keys and values
to where a chain's would be and forgets the rest: nothing is fed again.

Written by hand: transformers verifies chains only (its assisted generation), and no library offers a token tree
over a transformers cache; the mask goes to the model as a prepared 4D mask, which transformers takes as it is.
It knows trees, masks, positions and caches; nothing of drafters, sampling or events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from ..token_tree import ROOT, TokenTree
from .forward import StaticKV, replayed_tree, rollback
from .transfers import on_device, to_device

if TYPE_CHECKING:
    from transformers import Cache, PreTrainedModel


def tree_mask(tree: TokenTree, past: int, key_length: int, dtype: torch.dtype, device: torch.device,
              rows: int | None = None) -> torch.Tensor:
    """[1, 1, rows, key_length] additive attention mask (0 where a row may look, the dtype's minimum elsewhere):
    every row sees the ``past`` cached positions; the pending token (row 0, at position ``past``) sees itself; node
    i sees the pending token, its ancestors and itself. Key positions past the tree (a static cache's unused end)
    are hidden from every row. ``rows`` past 1 + n are padding (a graph of a fixed width): each sees the cache and
    itself, and nothing reads what it gives."""
    n = len(tree)
    rows = 1 + n if rows is None else rows
    allowed = torch.zeros((rows, key_length), dtype=torch.bool)
    allowed[:, :past] = True
    allowed[: 1 + n, past] = True  # the pending token: every node's first ancestor
    for i, parent in enumerate(tree.parents):
        row = 1 + i
        if parent != ROOT:
            allowed[row, past + 1 : past + 1 + n] = allowed[1 + parent, past + 1 : past + 1 + n]
        allowed[row, past + 1 + i] = True
    for row in range(1 + n, rows):
        allowed[row, past + row] = True
    mask = torch.zeros((rows, key_length), dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return to_device(mask[None, None], device)


def tree_positions(tree: TokenTree, past: int, device: torch.device, rows: int | None = None) -> torch.Tensor:
    """[1, rows] position ids: the pending token at ``past``, each node at ``past`` + its depth (siblings share
    one position, as the tokens they stand for would); padding rows at ``past``."""
    n = len(tree)
    padding = [past] * ((1 + n if rows is None else rows) - 1 - n)
    return on_device([[past, *(past + d for d in tree.depths()), *padding]], device)


def tree_forward(model: PreTrainedModel, cache: Cache, pending: int, tree: TokenTree, width: int | None = None,
                 ) -> torch.Tensor:
    """The target's logits at every row of the tree ([1 + n, V], float32): one forward over the pending token and
    every node, appended to ``cache`` (which held everything before the pending token). Follow it with
    :func:`keep_path`.

    ``width``: the rows the tree is padded to, where it has fewer. On the graph path, the drafter's budget and the
    pending token, so that the forward replays one captured graph whatever the round's tree (a GPU runs 64 rows
    for about the cost of one, and an eager forward of a small model costs several captured steps there); on a
    plain cache, the width measured cheapest (a CPU's kernels may take 3 rows for longer than 5,
    :mod:`.widths`). The caller keeps a pad within the positions the model can read."""
    past = int(cache.get_seq_length())
    n = len(tree)
    rows = 1 + n
    # A plain cache takes any pad the caller chose; a static one only on the graph path, within its end.
    if width is not None and 1 + n <= width and (
            not isinstance(cache, StaticKV) or (cache.path == "graphs" and past + width <= cache.max_len)):
        rows = width
    key_length = cache.max_len if isinstance(cache, StaticKV) else past + rows
    device = model.device
    ids = on_device([[pending, *tree.tokens, *[pending] * (rows - 1 - n)]], device)  # [1, rows]
    mask = tree_mask(tree, past, key_length, model.dtype, device, rows)  # [1, 1, rows, K]
    positions = tree_positions(tree, past, device, rows)  # [1, rows]
    logits = replayed_tree(model, cache, ids, mask, positions)
    if logits is None:
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache,
                       use_cache=True).logits.float()
    return logits[0, : 1 + n]


def keep_path(cache: Cache, past: int, path: Sequence[int]) -> None:
    """After :func:`tree_forward`: keep the keys and values of the pending token and of ``path``'s nodes, moved
    to the positions right after it (where a chain would have put them), and forget every other node's.

    Nodes are in topological order, so each kept node moves to a position at or before its own: copying them in
    one gather reads every source before any is overwritten."""
    kept = len(path)
    if kept and list(path) != list(range(kept)):  # the first nodes in order are where a chain's would be already
        sources = [past + 1 + node for node in path]
        indices: dict[torch.device, torch.Tensor] = {}  # one copy to each device the layers are on, not one a layer
        for layer in cache.layers:
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if not isinstance(keys, torch.Tensor) or not isinstance(values, torch.Tensor):
                continue
            if keys.shape[-2] < past + 2 + max(path):  # a sliding window that let positions go: not a tree's
                raise ValueError("a cache layer that does not hold every position cannot keep a tree's path")
            index = indices.get(keys.device)
            if index is None:
                index = indices[keys.device] = on_device(sources, keys.device)
            keys[:, :, past + 1 : past + 1 + kept] = keys.index_select(2, index)
            values[:, :, past + 1 : past + 1 + kept] = values.index_select(2, index)
    rollback(cache, past + 1 + kept)
