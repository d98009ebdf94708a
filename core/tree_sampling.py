"""Sampling verification at a node of a draft tree: which of its children, if any, the target's sample follows.

SpecInfer's multi-draft rule (Miao et al., 2023, "multi-step speculative sampling"; the same recursion as
Chen et al.'s and Leviathan et al.'s single-draft rule, applied child after child): with the target's
distribution p at the node, try the children in order. A child x drafted from q is accepted with probability
min(1, p(x) / q(x)); if it is rejected, p becomes the residual max(0, p - q), renormalised, and the next child is
tried against it. If every child is rejected, the token is drawn from the last residual. The token that comes out
is distributed exactly as p, whatever the children and q are (tests/test_tree_sampling.py checks this
statistically, with a control that skips the residual and fails).

A child copied rather than drafted (prompt lookup, a suffix tree) has a one-hot q: it is accepted with
probability p(x), and the residual is p with x removed.

It knows distributions and tokens; nothing of trees' layout, models or events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch


class Among(NamedTuple):
    """What the rule did at one node: the index of the accepted child (None: every child was rejected), the token
    emitted, and the uniform draw each child tried was tested with, in order."""

    child: int | None
    token: int
    draws: list[float]


def accept_among(p: torch.Tensor, children: Sequence[int], q: Sequence[torch.Tensor | None],
                 generator: torch.Generator | None) -> Among:
    """The multi-draft rule at one node: ``p`` the target's distribution there ([V]), ``children`` the children's
    tokens in the order tried, ``q[i]`` the distribution child i was drafted from ([V]; None for a copy). The token
    emitted is the accepted child's, or one drawn from the last residual (from p itself where there are no
    children: the bonus token after a whole path)."""
    residual = p.clone()
    draws: list[float] = []
    for i, (token, drafted_from) in enumerate(zip(children, q, strict=True)):
        q_x = 1.0 if drafted_from is None else float(drafted_from[token])
        p_x = float(residual[token])
        u = float(torch.rand((), generator=generator, device=p.device))
        draws.append(u)
        if q_x > 0 and u < min(1.0, p_x / q_x):
            return Among(i, token, draws)
        # Rejected: what is left of p once q's share is taken out, renormalised (a copy takes out its one token).
        taken = torch.zeros_like(residual) if drafted_from is None else drafted_from
        if drafted_from is None:
            taken[token] = 1.0
        residual = (residual - taken).clamp(min=0)
        total = float(residual.sum())
        # q covered all of p only where p was q's, and then the child was bound to pass: never reached in law.
        residual = p.clone() if total <= 0 else residual / total
    return Among(None, int(torch.multinomial(residual, 1, generator=generator)), draws)
