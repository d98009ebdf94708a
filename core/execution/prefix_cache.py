"""The last run's KV cache, kept so that a branch of it starts where it forks, not from the prompt.

When the user rewinds a run to token N and forces another token, the new run's context (prompt, the first N
tokens, the forced ones) shares its first positions with what the last run's cache holds. Prefilling the prompt
again would cost a long prompt's whole prefill; instead the kept cache is cropped to the shared prefix (the way
transformers' ``DynamicCache.crop`` rolls back speculative decoding) and only the rest is fed.

A strategy takes its cache here (:func:`take`) and hands it back at its end (:func:`keep`), with the token ids
the cache holds. Only a run that starts from a path reuses the kept cache: a plain run (a restart, a benchmark's
timed runs) always starts from an empty one, so what it measures is unchanged. One cache is kept per model, of
one row (beam search's N rows are never kept). A pooled static cache (the GPU's fast paths) goes back to its pool
at once, so the next run gets it and its captured graphs as before; its prefix is reused only if no run has
leased it since.

It knows caches and token ids; it does not know strategies or why a run starts where it does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..record.path import common_prefix
from .forward import StaticKV, new_cache, release, rollback
from .model_state import state_of

if TYPE_CHECKING:
    from transformers import PreTrainedModel
    from transformers.cache_utils import Cache


@dataclass(frozen=True)
class _Kept:
    ids: tuple[int, ...]  # the tokens whose keys and values the cache holds, in order (their first ones, if
    # the cache holds fewer: the last token emitted is often never fed)
    cache: Cache
    how: tuple[bool, bool, bool]  # (rollback, fast, graphs): how it was made, so it serves only its own kind
    lease: int = 0  # a static cache's lease count when kept: another run since has overwritten it

    def intact(self) -> bool:
        cache = self.cache
        return not isinstance(cache, StaticKV) or (not cache.leased and cache.leases == self.lease)


def take(model: PreTrainedModel, ids: Sequence[int], *, reuse: bool, rollback_ready: bool = False,
         fast: bool = False, graphs: bool = False, max_len: int | None = None) -> tuple[Cache, int]:
    """A cache for a run whose context is ``ids``, and how many of its first positions the cache already holds.

    With ``reuse``, the kept cache of the same kind is cropped to the prefix it shares with ``ids`` (at most all
    but the last id: its logits are needed); otherwise, or when nothing is shared, a new cache as
    :func:`~decode_tui.core.execution.forward.new_cache` makes it, holding nothing.
    """
    how = (rollback_ready, fast, graphs)
    state = state_of(model)
    kept, state.kept = state.kept, None
    if kept is not None and reuse and kept.how == how and _fits(kept.cache, max_len) and kept.intact():
        # Read here, not when kept: a static cache's length is on the device, and a plain run needs no copy of it.
        # At most all but the last id: that one is fed again, for its logits.
        shared = min(common_prefix(kept.ids, ids[:-1]), int(kept.cache.get_seq_length()))
        if shared > 0:
            if isinstance(kept.cache, StaticKV):  # leased again, still prefilled: its graphs replay at once
                kept.cache.leased = True
                kept.cache.leases += 1
            rollback(kept.cache, shared)
            return kept.cache, shared
    return new_cache(model, rollback_ready, fast=fast, graphs=graphs, max_len=max_len), 0


def keep(model: PreTrainedModel, cache: Cache, ids: Sequence[int], *, rollback_ready: bool = False,
         fast: bool = False, graphs: bool = False) -> None:
    """A run is done with ``cache``, which holds the keys and values of the first ``cache.get_seq_length()`` of
    ``ids``: keep it for a branch of this run."""
    release(cache)  # a pooled static cache is free for the next run at once
    state_of(model).kept = _Kept(tuple(ids), cache, (rollback_ready, fast, graphs),
                         cache.leases if isinstance(cache, StaticKV) else 0)


def _fits(cache: Cache, max_len: int | None) -> bool:
    return not isinstance(cache, StaticKV) or (max_len is not None and cache.max_len >= max_len)
