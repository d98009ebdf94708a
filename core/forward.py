"""The one way strategies call a model: a forward pass over new tokens that extends a KV cache.

Kept apart so every strategy counts and shapes its forward passes the same
way. It knows transformers' model call, not what the logits are for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers import DynamicCache

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def new_cache(model: PreTrainedModel, rollback: bool = False) -> DynamicCache:
    """A KV cache for ``model``; ``rollback=True`` if it will be cropped (speculative decoding).

    Built from the config so sliding-window layers (Phi-3, Mistral) get their own
    layer type; those forget what slides out of the window unless told to
    record it, and then could not be cropped back.
    """
    cache = DynamicCache(config=model.config)
    if rollback:
        cache.activate_past_recording()
    return cache


def rollback(cache: DynamicCache, length: int) -> None:
    """Crop ``cache`` back to its first ``length`` tokens (transformers 5 crops by a negative count)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def forward(
    model: PreTrainedModel,
    input_ids: torch.Tensor,  # [B, T_new] tokens not yet in the cache
    cache: DynamicCache,
    keep: int = 1,
) -> torch.Tensor:
    """Run the model over ``input_ids`` and return the logits of the last ``keep`` positions.

    Returns [B, keep, V] in float32, the dtype ``generate`` samples in.
    ``logits_to_keep`` spares the LM head on prompt positions nobody reads
    (49152 x T floats for SmolLM2 at prefill).
    """
    out = model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=keep)
    logits: torch.Tensor = out.logits[:, -keep:, :]
    return logits.float()


def to_host(tensors: list[torch.Tensor]) -> list[float]:
    """All of ``tensors``, flattened and concatenated, in one device-to-host copy.

    Each such copy waits for the device to finish its queue, so a step gathers everything it decides
    and shows on the device and copies it once. float64 holds every token id and count exactly and
    the float32 probabilities and scores unchanged.
    """
    return torch.cat([t.reshape(-1).to(torch.float64) for t in tensors]).tolist()
