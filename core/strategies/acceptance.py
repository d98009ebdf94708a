"""The acceptance rule of speculative sampling for a chain of drafted tokens: which of them the target keeps, and
the one token it adds.

Leviathan et al. 2023 (Algorithm 1) and Chen et al. 2023, in their names: the drafted tokens d_1 .. d_k, the
drafter's distributions q_1 .. q_k at them, and the target's p_1 .. p_{k+1} (after the sampling stages, which
apply to p and q alike), all from one target forward.

- Sampling: for i = 1 .. k draw u_i ~ U(0, 1) and accept d_i while u_i < min(1, p_i(d_i) / q_i(d_i)); at the
  first rejection draw the replacement from norm(max(0, p_i - q_i)) and stop; if all k are accepted, draw a
  bonus token from p_{k+1}. The output is distributed exactly as the target's own samples.
- Greedy: accept d_i while it is p_i's argmax; add the argmax at the first disagreement (or p_{k+1}'s after the
  last). The output equals plain greedy decoding token for token.

A prompt-lookup copy has no q: it is a copy, so q is one-hot on the copied token (q_i(d_i) = 1).

Everything is computed on the device, and what decides the round comes to the host in one copy (on a GPU every
copy is a wait for the device). It knows distributions and token ids; the verifier (speculative.py) knows the
model and its cache. A tree of drafts needs a rule of its own (rejection sampling over a node's children), in a
module beside this one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

import torch

from ..choosing.sampling import CONTEXT_FREE, processed
from ..execution.figures import host_stats, token_stats
from ..execution.transfers import on_device, to_host
from ..record.events import PositionVerdict
from ..record.transcript import TokenStats

if TYPE_CHECKING:
    from transformers import LogitsProcessor

    from ..record.events import Stage


class VerifiedRound(NamedTuple):
    n: int  # how many drafted tokens were accepted
    extra: int  # the target's extra token after them
    kind: Literal["target", "resampled", "bonus"] | None
    verdicts: tuple[PositionVerdict, ...]
    # The emitted tokens' figures under the target's raw distribution (d_1 .. d_n, then the extra token), when
    # the raw logits were given.
    figures: list[TokenStats] | None = None


def accept(
    p: torch.Tensor,  # [k+1, V] target distributions p_1 .. p_{k+1}
    q: torch.Tensor | None,  # [k, V] draft distributions q_1 .. q_k; None for a lookup copy (one-hot)
    drafted: list[int],  # d_1 .. d_k
    greedy: bool,
    generator: torch.Generator | None,
    raw: torch.Tensor | None = None,  # [k+1, V] the target's raw logits at those positions, for the figures
) -> VerifiedRound:
    """The acceptance test of one round: the accepted count n, the extra token and its kind, the verdicts."""
    k = len(drafted)
    d = on_device(drafted, p.device)  # [k] d_1 .. d_k
    p_d = p[:k].gather(1, d[:, None])[:, 0]  # [k] p_i(d_i)
    q_d = q[:k].gather(1, d[:, None])[:, 0] if q is not None else p.new_ones(k)  # [k] q_i(d_i); a copy's is 1
    u = None
    if greedy:
        argmax = p.argmax(-1)  # [k+1]
        accepted = argmax[:k] == d  # [k] d_i is what the target would have taken
    else:
        u = torch.rand(k, generator=generator, device=p.device) if k else p.new_zeros(0)  # [k] u_i ~ U(0, 1)
        ratio = torch.where(q_d > 0, p_d / q_d, torch.zeros_like(p_d))  # p_i(d_i) / q_i(d_i)
        accepted = u < ratio.clamp(max=1.0)  # [k] u_i < min(1, p_i(d_i) / q_i(d_i))
    n = _until_first_rejection(accepted)
    if greedy:
        extra = _at(argmax, n)  # the target's own choice at the first disagreement, or after the last draft
    else:  # a lookup copy's q rows are built only here, where the residual max(0, p - q) needs them
        q_rows = q[:k] if q is not None else torch.nn.functional.one_hot(d, p.shape[-1]).to(p.dtype)  # [k, V]
        extra = _resample(p, q_rows, n, k, generator)
    stats = token_stats(raw, _emitted(d, n, extra)) if raw is not None else None  # [3, k+1]
    n_host, extra_host, p_host, q_host, u_host, figures = _round_to_host(n, extra, p_d, q_d, u, stats)
    # Positions after the first rejection were never tested: the round discards them with it.
    verdicts = tuple(PositionVerdict(i, drafted[i], p_host[i], q_host[i], u_host[i] if u_host and i <= n_host else None,
                                     "accepted" if i < n_host else "rejected" if i == n_host else "untested")
                     for i in range(k))
    if n_host == k:
        return VerifiedRound(n_host, extra_host, "bonus" if k else None, verdicts, figures)
    return VerifiedRound(n_host, extra_host, "target" if greedy else "resampled", verdicts, figures)


def _until_first_rejection(accepted: torch.Tensor) -> torch.Tensor:
    """n: how many of d_1 .. d_k were accepted before the first rejection ([] on the device: no wait for it). A
    running product of the verdicts stays 1 until the first 0; its sum counts the ones before it."""
    return accepted.long().cumprod(0).sum()


def _at(t: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """``t[n]`` for ``n`` on the device ([]): indexing with a 0-d tensor reads it back to the host (on a GPU a wait
    for the verification's pass, before the round's figures are even queued); a one-element index does not."""
    return t.index_select(0, n.view(1))[0]


def _emitted(d: torch.Tensor, n: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
    """What the round emits, as k + 1 ids: d_1 .. d_n, then the extra token at position n (the rest unused)."""
    out = torch.cat([d, d.new_zeros(1)])  # [k+1]
    # out[n] = extra, written so that n stays on the device: indexing with a 0-d tensor would read it back to the
    # host (a wait on a GPU), a 1-element index tensor does not.
    return out.index_put((n.view(1),), extra.view(1))


def _resample(p: torch.Tensor, q: torch.Tensor, n: torch.Tensor, k: int,
              generator: torch.Generator | None) -> torch.Tensor:
    """The extra token under sampling: from norm(max(0, p_n - q_n)) after a rejection at position n, or the bonus
    from p_{k+1} when all k were accepted (there is no q_{k+1} to subtract)."""
    q_padded = torch.cat([q, q.new_zeros(1, q.shape[-1])])  # [k+1, V]
    p_n = _at(p, n)  # [V]
    residual = torch.clamp(p_n - _at(q_padded, n), min=0.0)  # max(0, p - q)
    total = residual.sum()
    # p == q exactly leaves nothing to resample from; then rejection had probability 0 and p is the answer.
    resample = torch.where(total > 0, residual / total, p_n)
    return torch.multinomial(torch.where(n == k, p_n, resample), 1, generator=generator)[0]


def _round_to_host(n: torch.Tensor, extra: torch.Tensor, p_d: torch.Tensor, q_d: torch.Tensor,
                   u: torch.Tensor | None, stats: torch.Tensor | None,
                   ) -> tuple[int, int, list[float], list[float], list[float], list[TokenStats] | None]:
    """The round's one device-to-host copy, unpacked: n, the extra token, p_i(d_i), q_i(d_i), u_i (empty
    under greedy verification) and the emitted tokens' figures. One copy, not six: on a GPU each is a wait for
    the device. The copy is one flat list: [n, extra, p_d (k), q_d (k), u (k, sampling only), figures (3 (k+1))]."""
    k = p_d.shape[0]
    host = to_host([n, extra, p_d, q_d] + ([u] if u is not None else []) + ([stats.flatten()] if stats is not None
                                                                            else []))
    u_end = 2 + 2 * k + (k if u is not None else 0)
    figures = host_stats(host[u_end:], k + 1) if stats is not None else None
    return int(host[0]), int(host[1]), host[2 : 2 + k], host[2 + k : 2 + 2 * k], host[2 + 2 * k : u_end], figures


def distributions(processors: list[tuple[Stage, LogitsProcessor]], context: list[int], drafted: list[int],
                  logits: torch.Tensor) -> torch.Tensor:
    """Target probabilities at each verified position, each processed with its own prefix ([k+1, V])."""
    if all(stage in CONTEXT_FREE for stage, _ in processors):
        # The warpers act on each row alone and never read the context: all k + 1 rows at
        # once, a few kernels a round instead of a few per position (at hundreds of tokens a second on a
        # GPU, each launch counts).
        no_context = torch.empty((logits.shape[0], 0), dtype=torch.long, device=logits.device)
        return torch.softmax(processed(processors, no_context, logits), dim=-1)
    ids = on_device([context + drafted], logits.device)  # [1, T+k]
    rows = []
    for i in range(logits.shape[0]):
        scores = processed(processors, ids[:, : len(context) + i], logits[i : i + 1])
        rows.append(torch.softmax(scores, dim=-1)[0])
    return torch.stack(rows)


def first_token(p: torch.Tensor, raw: torch.Tensor, greedy: bool, generator: torch.Generator | None,
                ) -> tuple[int, TokenStats]:
    """The first token, from the prefill's distribution p ([1, V]) as plain decoding picks it, with its figures
    under the raw logits ([1, V]), in one host copy."""
    token = torch.argmax(p[0], -1, keepdim=True) if greedy else torch.multinomial(p[0], 1, generator=generator)  # [1]
    host = to_host([token, token_stats(raw, token)])
    return int(host[0]), host_stats(host[1:], 1)[0]


def run_ends_after(accepted: list[int], eos_token_ids: frozenset[int], remaining: int) -> int | None:
    """How many of the accepted draft tokens reach the output when one of them ends the run, else None."""
    for i, token in enumerate(accepted):
        if token in eos_token_ids or i + 1 >= remaining:
            return i + 1
    return None
