"""The acceptance rule for a tree of drafted tokens: which path the target keeps, and the one token it adds.

SpecInfer (Miao et al., 2023), in its names: the target reads the pending token and every node of the draft tree
in one forward (:func:`~decode_tui.core.execution.tree_attention.tree_forward`), so row 0 holds its distribution after
the pending token and row 1 + i its distribution after node i's whole path. Starting at the root:

- greedy: follow the child whose token is the target's argmax at the current row, while there is one; the argmax
  where no child matches (or after a leaf) is the extra token. The output equals plain greedy decoding token for
  token, however many branches the tree has.
- sampling: the multi-draft rule at each node (:func:`~decode_tui.core.choosing.tree_sampling.accept_among`): its
children
  are tried in order against the target's p and the residuals left by the ones rejected before; the first
  accepted is followed, and if none is, the token drawn from the last residual is the extra one. After a leaf the
  bonus token is drawn from p. The output is distributed exactly as the target's own samples.

A chain is a tree with one branch: on it both rules are the chain's (:mod:`.acceptance`), verdict for verdict.
Every node gets a verdict: ``accepted`` on the path kept; ``rejected`` where the target tested it and went
elsewhere (a child of a node on the path, the root's included); ``untested`` below a rejected node, or a child
tried after the accepted one. Its ``position`` is the node's index in the tree.

It knows distributions, a tree's layout and token ids; the verifier (speculative.py) knows the model and caches.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Literal, NamedTuple

import torch

from ..choosing.sampling import CONTEXT_FREE, processed
from ..choosing.tree_sampling import accept_among
from ..execution.figures import host_stats, token_stats
from ..execution.transfers import on_device, to_host
from ..record.events import PositionVerdict
from ..record.transcript import TokenStats
from ..token_tree import ROOT, TokenTree, greedy_path

if TYPE_CHECKING:
    from transformers import LogitsProcessor

    from ..record.events import Stage


class VerifiedTree(NamedTuple):
    path: list[int]  # the nodes accepted, root first
    extra: int  # the target's token after them
    kind: Literal["target", "resampled", "bonus"] | None
    verdicts: tuple[PositionVerdict, ...]  # one per node, in the tree's order
    # The emitted tokens' figures under the target's raw distribution (the path's tokens, then the extra token).
    figures: list[TokenStats] | None = None


def tree_distributions(processors: list[tuple[Stage, LogitsProcessor]], context: list[int], tree: TokenTree,
                       logits: torch.Tensor) -> torch.Tensor:
    """Target probabilities at every row of a tree forward ([1 + n, V]), each processed with its own prefix: the
    context, then the path down to the row's node (a repetition penalty reads it)."""
    if all(stage in CONTEXT_FREE for stage, _ in processors):
        no_context = torch.empty((logits.shape[0], 0), dtype=torch.long, device=logits.device)
        return torch.softmax(processed(processors, no_context, logits), dim=-1)
    rows = []
    for row in range(logits.shape[0]):
        path = [tree.tokens[i] for i in tree.path_to(row - 1)]
        ids = on_device([context + path], logits.device)  # [1, T + depth]
        rows.append(torch.softmax(processed(processors, ids, logits[row : row + 1]), dim=-1)[0])
    return torch.stack(rows)


def accept_tree(p: torch.Tensor, tree: TokenTree, greedy: bool, generator: torch.Generator | None,
                raw: torch.Tensor | None = None, q: tuple[float, ...] | None = None) -> VerifiedTree:
    """The acceptance test of one tree round over the target's distributions at its rows (``p``, [1 + n, V]; ``raw``
    the raw logits there, for the figures). Under sampling every node must be a copy (q one-hot): a copying
    drafter's tree. ``q``: a draft model's probability of each node, shown in its verdict (greedy only)."""
    if q is not None and not greedy:
        raise ValueError("a draft model's tree is verified greedily only: its runners-up are not draws from q")
    n = len(tree)
    rows = on_device([parent + 1 for parent in tree.parents], p.device)  # [n]
    tokens = on_device(tree.tokens, p.device)  # [n]
    p_nodes = p[rows, tokens] if n else p.new_zeros(0)  # [n] each node's p under its parent's row
    draws: dict[int, float] = {}  # node -> the u it was tested with (sampling)
    if greedy:
        host = to_host([p.argmax(-1), p_nodes])  # the one copy that decides the round
        choice, p_host = [int(c) for c in host[: n + 1]], host[n + 1 :]
        path, extra = greedy_path(tree, choice)
    else:
        # Node by node on the host: each node's test depends on the one before (a GPU waits once per level).
        p_host = to_host([p_nodes])
        path, node = [], ROOT
        while True:
            children = tree.children(node)
            among = accept_among(p[node + 1], [tree.tokens[c] for c in children], [None] * len(children), generator)
            draws.update(zip(children, among.draws, strict=False))
            if among.child is None:
                extra = among.token
                break
            node = children[among.child]
            path.append(node)
    kept = set(path)
    tested = {ROOT, *path}  # the rows whose choice the target made: their children were tested
    verdicts = []
    for i, (token, parent) in enumerate(zip(tree.tokens, tree.parents, strict=True)):
        tried = parent in tested and (greedy or i in draws)
        verdict: Literal["accepted", "rejected", "untested"] = (
            "accepted" if i in kept else "rejected" if tried else "untested")
        verdicts.append(PositionVerdict(i, token, p_host[i], q[i] if q is not None else 1.0, draws.get(i), verdict))
    last = path[-1] if path else ROOT
    kind: Literal["target", "resampled", "bonus"] | None
    kind = ("bonus" if n else None) if not tree.children(last) else "target" if greedy else "resampled"
    figures = None
    if raw is not None:
        emitted_rows = on_device([0, *(node + 1 for node in path)], raw.device)  # [len(path) + 1]
        emitted = on_device([*(tree.tokens[i] for i in path), extra], raw.device)
        figures = host_stats(to_host([token_stats(raw[emitted_rows], emitted).flatten()]), len(path) + 1)
    return VerifiedTree(path, extra, kind, tuple(verdicts), figures)


def untested_after(verdicts: tuple[PositionVerdict, ...], path: list[int], end: int,
                   ) -> tuple[PositionVerdict, ...]:
    """A tree round's verdicts when the ``end``-th accepted node ended the run: the path's nodes after it never
    reach the output, so they are untested, as everything below them was."""
    dropped = set(path[end:])
    return tuple(dataclasses.replace(v, verdict="untested") if v.position in dropped else v for v in verdicts)
