"""The verification's forwards: a chain's, padded to the width that pays, and one plain step timed for c.

A chain of drafts is fed ``[pending, d_1 .. d_k]``, padded where a wider feed is cheaper or where one graph must
serve every round; a plain target step is timed once a run, as greedy decoding runs it, for what c and a
verification's cost divide by. A tree's forward is :func:`~decode_tui.core.execution.tree_attention.tree_forward`.

It knows forwards, caches and widths; nothing of acceptance or events.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import torch

from ..execution.forward import forward, on_device, rollback, to_host
from ..execution.widths import width_costs
from ..model.loading import context_length

if TYPE_CHECKING:
    from transformers import Cache, PreTrainedModel


def plain_step(model: PreTrainedModel, cache: Cache, context: list[int], repeat: int) -> float:
    """A plain target step's seconds: one forward of the pending token, as greedy decoding runs it, then rolled
    back (it decides nothing). The run's c and a verification's cost are against this measured step, not one
    inferred from verifications. On a graph path the first call may capture its graph, so the last is timed."""
    confirmed = len(context) - 1  # the cache holds everything but the pending token
    feed = on_device([context[-1:]], model.device)  # [1, 1]
    seconds = 0.0
    for _ in range(repeat):
        started = time.perf_counter()
        to_host([forward(model, feed, cache)[0, -1, :1]])  # the copy waits for the device
        seconds = time.perf_counter() - started
        rollback(cache, confirmed)
    return seconds


class VerifyForward:
    """The verification's forward, fed ``[pending, d_1 .. d_k]`` and padded with copies of the pending token
    where a wider feed pays: its logits at the k + 1 real positions.

    The fast paths (``static``) pad to the longest draft, so that one compiled graph (or captured CUDA graph)
    serves every round whatever the drafter proposed; on a CPU the plain path pads to the width that costs the
    least (:mod:`decode_tui.core.execution.widths`: a forward over 2 or 3 positions costs more than one over 5), and
    times
    each width it feeds. The pads come after the real positions, which attend only to what precedes them, and
    the rollback after the round forgets them with the rejected drafts. No pad passes the static cache's end or
    the model's last position: the real positions always fit.
    """

    def __init__(self, model: PreTrainedModel, static: bool, max_len: int) -> None:
        self.model, self.static, self.max_len = model, static, max_len
        self.widths = width_costs(model) if model.device.type == "cpu" and not static else None
        self.room = context_length(model) or sys.maxsize  # positions the model can read

    def __call__(self, cache: Cache, pending: int, drafted: list[int], confirmed: int,
                 num_draft_tokens: int) -> torch.Tensor:
        real = [pending, *drafted]
        if self.static:
            width = num_draft_tokens + 1 if confirmed + num_draft_tokens + 1 <= self.max_len else 0
        else:
            width = self.widths.width_for(len(real), self.room - confirmed) if self.widths is not None else 0
        feed = on_device([real + [pending] * max(0, width - len(real))], self.model.device)  # [1, W]
        started = time.perf_counter()
        logits = forward(self.model, feed, cache, keep=feed.shape[1])[0, : len(real)]  # [k+1, V]
        if self.widths is not None:
            self.widths.observe(feed.shape[1], time.perf_counter() - started)
        return logits
