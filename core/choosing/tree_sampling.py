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

from ..execution.transfers import to_host


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
    children: the bonus token after a whole path).

    Every child's test is set up on the device first and read back in one copy: read child by child, a GPU
    would wait for the device three or four times a child. The residuals and draws of children that end up
    untried are computed and dropped, which changes nothing in law."""
    residual = p  # [V] the distribution the next child is tried against
    p_x: list[torch.Tensor] = []  # [] each: a child's probability under the residual it is tried against
    q_x: list[torch.Tensor] = []  # [] each: ... and under the q it was drafted from (1 for a copy)
    for token, drafted_from in zip(children, q, strict=True):
        p_x.append(residual[token])
        q_x.append(p.new_ones(()) if drafted_from is None else drafted_from[token].to(p.dtype))
        # Rejected: what is left of p once q's share is taken out, renormalised (a copy takes out its one token).
        taken = torch.zeros_like(residual) if drafted_from is None else drafted_from
        if drafted_from is None:
            taken[token] = 1.0
        residual = (residual - taken).clamp(min=0)
        total = residual.sum()
        # q covered all of p only where p was q's, and then the child was bound to pass: never reached in law.
        residual = torch.where(total > 0, residual / total, p)
    draws: list[float] = []
    if children:
        m = len(children)
        u = torch.rand(m, generator=generator, device=p.device)  # [m] u_i ~ U(0, 1), one a child
        host = to_host([torch.stack(p_x), torch.stack(q_x), u])
        for i in range(m):
            p_i, q_i, u_i = host[i], host[m + i], host[2 * m + i]
            draws.append(u_i)
            if q_i > 0 and u_i < min(1.0, p_i / q_i):  # u < min(1, p(x) / q(x)), p the residual
                return Among(i, children[i], draws)
    return Among(None, int(torch.multinomial(residual, 1, generator=generator)), draws)
