"""An attention mask built as floats once a pass, where torch's attention converts a boolean one in every layer.

transformers' SDPA path builds a boolean mask once a pass, and torch's attention turns a boolean mask into an
additive float one in every call (``convert_boolean_attn_mask``: a fill and a ``where``, two or three kernels on a
GPU), so in every layer of every step. Built once a pass as that same float mask (:func:`additive_mask`), it goes to
torch's attention as it is, with the values torch's conversion would give it: the same numbers, and the conversion
once a pass instead of once a layer. A target keeps it only where a check (:func:`exact`) finds its logits equal to
the last bit, since torch picks its attention kernel before converting, and might pick another for floats.
transformers offers no switch for this, but it lets a model's attention and mask functions be registered by name
(:data:`FLOAT_MASK_SDPA`), which is how this is done.

Two users. A draft made from the target keeps it for good (:func:`decode_tui.core.drafting.draft_layers.float_masks`).
The target keeps transformers' SDPA, so that its eager passes, and ``generate`` on the same model, are transformers'
own; only its captured CUDA graphs are recorded with float masks (:func:`while_capturing`), where a model's check
(:func:`exact`) finds its logits unchanged to the last bit.

It knows transformers' attention registries and a model's logits; nothing of drafts, graphs or decoding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .model_state import state_of

FLOAT_MASK_SDPA = "decode_tui_sdpa"  # transformers' SDPA attention, its mask built as floats (registered below)


def additive_mask(**kwargs: Any) -> torch.Tensor | None:
    """transformers' SDPA mask for these arguments as the additive mask torch's attention would make of it in
    each call: 0 where a token may attend, minus infinity elsewhere, in the pass's dtype. None where transformers'
    is None (a prompt whose mask is causal alone, which the attention applies by a flag)."""
    from transformers.masking_utils import sdpa_mask

    mask = sdpa_mask(**kwargs)  # [B, 1, T, S] booleans, True where a token may attend
    if mask is None or mask.dtype != torch.bool:
        return mask
    dtype = kwargs.get("dtype", torch.float32)
    return torch.full_like(mask, float("-inf"), dtype=dtype).masked_fill_(mask, 0.0)


def register(mask: Callable[..., torch.Tensor | None]) -> None:
    """Register :data:`FLOAT_MASK_SDPA` with transformers: its SDPA attention, and ``mask`` as its mask function."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(FLOAT_MASK_SDPA, sdpa_attention_forward)
    AttentionMaskInterface.register(FLOAT_MASK_SDPA, mask)


def on_sdpa(model: Any) -> bool:
    """Whether ``model`` runs transformers' SDPA and can switch its attention implementation."""
    config = getattr(model, "config", None)
    return getattr(config, "_attn_implementation", None) == "sdpa" and hasattr(model, "set_attn_implementation")


def both_logits(model: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``model``'s logits on a seeded random prompt of five tokens and one step after it, with transformers' SDPA and
    with float masks (None where either fails), on a static cache, as the decoding passes run: its empty tail is
    masked, so the mask is built (on no cache, a prompt's causal mask is left to the attention's flag, and nothing
    would be checked), and the step has a decoding step's shapes, which pick the attention's kernel. The model is
    left on transformers' SDPA."""
    from transformers import StaticCache

    config = model.config
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int):
        return None
    ids = torch.randint(0, vocab, (1, 6), generator=torch.Generator().manual_seed(0))
    ids = ids.to(next(model.parameters()).device)

    def logits() -> torch.Tensor:
        cache = StaticCache(config=config, max_cache_len=256)
        prompt = model(input_ids=ids[:, :5], cache=cache, use_cache=True).logits  # [1, 5, V]
        step = model(input_ids=ids[:, 5:], cache=cache, use_cache=True).logits  # [1, 1, V]
        return torch.cat((prompt, step), dim=1)

    try:
        with torch.inference_mode():
            expected = logits()
            model.set_attn_implementation(FLOAT_MASK_SDPA)
            return expected, logits()
    except Exception:
        return None
    finally:
        model.set_attn_implementation("sdpa")


def exact(model: Any) -> bool:
    """Whether ``model``'s logits with float masks equal its logits with transformers' SDPA to the last bit: checked
    once a model (a false here leaves its graphs on transformers' masks)."""
    state = state_of(model)
    if state.exact_float_mask is None:
        register(additive_mask)
        both = both_logits(model) if on_sdpa(model) else None
        state.exact_float_mask = both is not None and torch.equal(*both)
    return state.exact_float_mask


@contextlib.contextmanager
def while_capturing(model: Any) -> Iterator[None]:
    """Inside, ``model``'s passes build their masks as floats, where it runs transformers' SDPA and its check finds
    that exact: for a CUDA graph's capture, which records the kernels those passes launch. The model is back on
    transformers' SDPA after, so its eager passes and ``generate`` are transformers' own."""
    switched = False
    if on_sdpa(model) and exact(model):
        try:
            model.set_attn_implementation(FLOAT_MASK_SDPA)
            switched = True
        except Exception:  # the capture goes on with transformers' masks: a failed switch must not fail it
            pass
    try:
        yield
    finally:
        if switched:
            model.set_attn_implementation("sdpa")
