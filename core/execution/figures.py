"""How likely tokens were: for tokens the model is given or picks, their log-probability, the entropy of the
distribution they came from and their rank in it, all under the model's *raw* distribution (the log-softmax of the
logits before any processor), computed on the device so that a step still makes one host copy.

It knows logits; nothing of which strategy asks or why.
"""

from __future__ import annotations

import torch

from ..record.transcript import TokenStats


def token_stats(raw: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """[3, T]: each token's raw log-probability, its distribution's entropy (nats) and its rank (1 = the most
    likely), for ``raw`` logits [T, V] (float) and the tokens ``ids`` [T] they were followed by."""
    logp = torch.log_softmax(raw.float(), dim=-1)  # [T, V]
    chosen = logp.gather(1, ids.view(-1, 1))  # [T, 1]
    entropy = torch.special.entr(logp.exp()).sum(-1)  # [T]  -sum p log p, with 0 log 0 = 0
    rank = (logp > chosen).sum(-1) + 1  # [T] tied tokens share the better rank
    return torch.stack([chosen[:, 0], entropy, rank.to(logp.dtype)])


def host_stats(packed: list[float], t: int) -> list[TokenStats]:
    """:func:`token_stats`'s [3, T] after its host copy (flattened), as one :class:`TokenStats` per token."""
    return [TokenStats(packed[i], packed[t + i], int(packed[2 * t + i])) for i in range(t)]
