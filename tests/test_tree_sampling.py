"""SpecInfer's multi-draft rule (core/choosing/tree_sampling.py): whatever the children tried at a node and whatever
they were drafted from, the token that comes out is distributed as the target's p. Checked by a chi-square test on many
draws, with a control that leaves the residual out and fails the same test."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from decode_tui.core.choosing.tree_sampling import accept_among

from .test_speculative import chi_square_p_value

V = 8
DRAWS = 6000


def distribution(g: torch.Generator, sharp: float = 1.5) -> torch.Tensor:
    return torch.softmax(torch.randn(V, generator=g) * sharp, -1)


def emitted(p: torch.Tensor, children: list[int], q: list[torch.Tensor | None], seed: int) -> Counter[tuple[int, ...]]:
    """The tokens of DRAWS verifications: each drafted child drawn afresh from its q (the rule's premise), each
    copied one as it is."""
    g = torch.Generator().manual_seed(seed)
    counts: Counter[tuple[int, ...]] = Counter()
    for _ in range(DRAWS):
        drawn = [c if qi is None else int(torch.multinomial(qi, 1, generator=g)) for c, qi in zip(children, q,
                                                                                                   strict=True)]
        counts[(accept_among(p, drawn, q, g)[1],)] += 1
    return counts


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["drafted", "copied", "mixed"])
def test_the_token_that_comes_out_is_distributed_as_p(seed: int, kind: str) -> None:
    g = torch.Generator().manual_seed(seed)
    p = distribution(g)
    children = torch.randperm(V, generator=g)[:3].tolist()  # three different children
    q: list[torch.Tensor | None]
    if kind == "copied":
        q = [None, None, None]
    else:  # each drafted child sampled from a q of its own, at every draw
        q = [distribution(g, 1.0) for _ in children]
        if kind == "mixed":
            q[1] = None
    expected: dict[tuple[int, ...], float] = {(t,): float(p[t]) for t in range(V)}
    assert chi_square_p_value(emitted(p, children, q, seed), expected) > 1e-3


def test_a_child_is_accepted_as_often_as_the_rule_says() -> None:
    """A copied first child is accepted with probability p(x): the share of draws that follow it."""
    g = torch.Generator().manual_seed(1)
    p = distribution(g)
    gen = torch.Generator().manual_seed(2)
    followed = sum(accept_among(p, [3, 5], [None, None], gen)[0] == 0 for _ in range(DRAWS))
    assert abs(followed / DRAWS - float(p[3])) < 4 * (float(p[3]) * (1 - float(p[3])) / DRAWS) ** 0.5


def test_negative_control_a_rule_without_the_residual_fails_the_same_test() -> None:
    """The control: after a rejection, try the next child (and draw at the end) against the original p instead of
    the residual. The emitted tokens then come out too often where a child was tried: the test catches it."""
    def without_residual(p: torch.Tensor, children: list[int], q: list[torch.Tensor | None],
                         generator: torch.Generator | None) -> tuple[int | None, int]:
        for i, token in enumerate(children):
            if float(torch.rand((), generator=generator)) < float(p[token]):
                return i, token
        return None, int(torch.multinomial(p, 1, generator=generator))

    g = torch.Generator().manual_seed(0)
    p = distribution(g)
    children = torch.randperm(V, generator=g)[:3].tolist()
    gen = torch.Generator().manual_seed(0)
    counts: Counter[tuple[int, ...]] = Counter(
        (without_residual(p, children, [None] * 3, gen)[1],) for _ in range(DRAWS))
    assert chi_square_p_value(counts, {(t,): float(p[t]) for t in range(V)}) < 1e-6
