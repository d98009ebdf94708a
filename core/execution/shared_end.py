"""One write position for every layer of a static cache, advanced once a pass (:class:`SharedEndLayer`).

transformers' static layer keeps a write position of its own and moves it in every layer of every pass; here the
first layer to write moves the one position all layers share. The keys and values, and so the model's outputs, are
those of transformers' layer (a test compares them).

It knows transformers' cache layers; nothing of graphs or decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers.cache_utils import Cache, StaticLayer


class _End:
    """The write position that every layer of one :class:`StaticKV` shares, and the positions a pass writes."""

    def __init__(self) -> None:
        self.length = torch.tensor(0, dtype=torch.long)  # a device tensor once the first pass has run
        self.positions: torch.Tensor | None = None  # [W]: where the current pass writes, set by its first layer


class SharedEndLayer(StaticLayer):
    """transformers' static layer, but the layers of a cache share one write position, advanced once a pass.

    transformers' static layer keeps a write position of its own and, in every layer of every pass, builds
    the positions to write (an ``arange`` and an add) and advances its position (an add in place): three
    kernels a layer on a GPU, where a small model's step costs about a kernel's launch and tail per op (for
    the embedded model's 30 layers, 87 of a step's 1378 ops; for its int4 draft, 87 of 595). All layers of a
    pass write at the same positions, so here the first layer to write builds them and advances the shared
    position, and the others read them: three kernels a pass. Its keys and values,
    and so the model's outputs, are those of transformers' layer (a test compares them).
    """

    def __init__(self, max_cache_len: int, end: _End, first: bool) -> None:
        self.end, self.first = end, first  # before the base class sets ``cumulative_length``, which is the end's
        super().__init__(max_cache_len=max_cache_len)

    @property  # type: ignore[override]
    def cumulative_length(self) -> torch.Tensor:
        return self.end.length

    @cumulative_length.setter
    def cumulative_length(self, value: torch.Tensor) -> None:
        # The base class sets it when built and moves it to the device on its first pass; the move returns the
        # same tensor for every layer after the first, so the layers keep sharing it.
        self.end.length = value

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any,
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.first:  # the first layer of a pass: where this pass writes, then the end moves past it
            width = key_states.shape[-2]
            self.end.positions = torch.arange(width, device=self.device) + self.end.length  # [W]
            self.end.length.add_(width)  # in place: captured graphs read it at its address
        positions, keys, values = self.end.positions, self.keys, self.values
        assert positions is not None and positions.shape[0] == key_states.shape[-2], "a layer wrote before the first"
        assert keys is not None and values is not None  # allocated by the lazy initialisation
        keys.index_copy_(2, positions, key_states)
        values.index_copy_(2, positions, value_states)
        return keys, values

    def crop(self, tokens_to_remove: int) -> None:
        if self.first:  # transformers' cache crops every layer: the shared end moves once
            super().crop(tokens_to_remove)


def ends(cache: Cache) -> list[torch.Tensor]:
    """The write positions of ``cache``'s static layers, each once: one where they share it."""
    found = {id(end): end for layer in cache.layers if isinstance(layer, StaticLayer)
             for end in [layer.cumulative_length]}
    return list(found.values())


def kept_ends(cache: Cache) -> Callable[[], None]:
    """What puts ``cache``'s write positions back where they are now (after a pass run only to be measured or
    captured), in place: captured graphs read them at their addresses."""
    starts = [(end, end.clone()) for end in ends(cache)]

    def put_back() -> None:
        for end, start in starts:
            end.copy_(start)

    return put_back
