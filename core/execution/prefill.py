"""A run that starts from a path it did not choose itself: the prompt and the path prefilled as one context.

A run may begin with tokens already decided (kept from a parent branch, then forced by the user). The prompt and the
path are prefilled as one context, the path's tokens are emitted first (a forced one with source ``forced``) and the
strategy decodes on from there as if the context were its prompt, so greedy from a path equals ``generate`` on
prompt + path. Where the model still holds a cache of an earlier run that shares a prefix with the context (a rewind
in the app), that prefix is cropped from it, not prefilled again (:mod:`.prefix_cache`).

It knows the forward, caches and the transcript; it does not know which strategy runs or why a path was chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..record.events import TokenEmitted
from ..record.path import Path
from ..record.transcript import TokenStats, Transcript
from .figures import host_stats, token_stats
from .forward import forward, rollback
from .transfers import on_device

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from transformers import PreTrainedModel
    from transformers.cache_utils import Cache

# The prompt positions whose logits a learning drafter gets at the prefill: its last ones, where the run's text
# goes on, and at most this many, so that a long prompt does not hold V floats a position.
LEARNED = 256


def prefill(model: PreTrainedModel, transcript: Transcript, context: torch.Tensor, cache: Cache, path: Path | None,
            held: int = 0, learn: Callable[[Sequence[int], torch.Tensor], None] | None = None,
            ) -> tuple[torch.Tensor, list[TokenEmitted]]:
    """Feed ``context`` (prompt + path, [B, T]) into ``cache``, which may hold its first ``held`` positions (a
    branch's parent's, see :mod:`.prefix_cache`); return the next-token logits [B, V] and the path's tokens,
    emitted. ``learn`` (a drafter that learns from the target's logits) is handed the logits after each of the
    context's last LEARNED positions too, with their tokens.

    The logits at the path's positions give the figures of each path token the parent did not already give:
    the cache is cropped back to the first position whose logits are needed, and everything after is fed.
    """
    ids = path.ids if path is not None else ()
    total = context.shape[1]
    t0 = total - len(ids)  # the prompt's length
    if held:
        held = reusable(path, t0, held)
        rollback(cache, held)
    # The LM head runs only where a path token's figures are read (and the last position): 49152 x T floats at
    # the prompt's positions would be read by nobody.
    keep = min(max(len(ids) + 1, LEARNED if learn is not None else 0), total - held)
    logits = forward(model, context[:, held:], cache, keep=keep)  # [B, keep, V]
    transcript.target_forwards += 1
    if learn is not None:
        learn(context[0, total - keep :].tolist(), logits[0])  # [keep, V]
    emitted = []
    if path is not None and ids:
        # The logits at position t0 - 1 + j predict the path's j-th token; row r of ``logits`` is position
        # total - keep + r. Tokens before the first row were held in the cache: their figures came with the path.
        first = t0 - 1 - (total - keep)  # the row of the path's first token (negative: held)
        computed = [j for j in range(len(ids)) if first + j >= 0]
        fresh: dict[int, TokenStats] = {}
        if computed:
            rows = on_device([first + j for j in computed], logits.device)
            stats = token_stats(logits[0, rows], context[0, t0 + computed[0] :])
            fresh = dict(zip(computed, host_stats(stats.flatten().tolist(), len(computed)), strict=True))
        for j, (token, source) in enumerate(zip(ids, path.sources, strict=True)):
            emitted.append(transcript.emit(token, source, fresh.get(j) or path.known(j), given=True))
            if transcript.done:
                break
    return logits[:, -1], emitted


def reusable(path: Path | None, prompt_len: int, cached: int) -> int:
    """How many of the ``cached`` leading positions of the context a prefill may keep: all but the last (its
    logits are needed), and none past a path token whose figures the parent did not give."""
    keep = cached
    if path is not None:
        for j in range(len(path.ids)):
            if path.known(j) is None:
                keep = min(keep, prompt_len - 1 + j)
                break
    return max(0, min(keep, prompt_len + (len(path.ids) if path else 0) - 1))
