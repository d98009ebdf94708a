"""The one way strategies call a model: a forward pass over new tokens that extends a KV cache.

Kept apart so every strategy counts and shapes its forward passes the same
way. It knows transformers' model call, not what the logits are for.

Two kinds of cache. The plain one is transformers' ``DynamicCache``, which
grows by concatenation and is rolled back with its own ``crop``. The fast
path (``fast=True``, in the manner of gpt-fast) preallocates every layer at
its full length (a :class:`StaticKV`) so that tensor shapes and addresses
never change, and runs the short forward passes (one decoding step, one
verification of up to :data:`COMPILED_UP_TO` tokens) through ``torch.compile``;
on CUDA in ``reduce-overhead`` mode, which replays them as CUDA graphs. The
prompt's prefill stays eager: its length differs every run and would compile
a new graph each time.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, StaticLayer

if TYPE_CHECKING:
    from transformers import PreTrainedModel

COMPILED_UP_TO = 17  # the longest input the fast path compiles: a verification of 16 drafts plus the pending token


class StaticKV(Cache):
    """Preallocated keys and values for ``max_len`` positions in every layer, rolled back by moving its end.

    Every layer is full-length, a sliding-window model's (Phi-3, Mistral) too: transformers' static
    sliding layer is a ring buffer that overwrites what slides out, which could not be rolled back
    after a rejected draft. The model still applies its window, through the attention mask it builds
    from its config. Each layer's write position (``cumulative_length``) is a device tensor that the
    layer advances in place; rolling back sets it, and the positions past it are stale but masked
    (the mask is causal in absolute positions) until they are written again. transformers' static
    layers have no ``crop``, hence :func:`rollback` does this by hand.
    """

    def __init__(self, model: PreTrainedModel, max_len: int) -> None:
        config = model.config.get_text_config(decoder=True)
        super().__init__(layers=[StaticLayer(max_cache_len=max_len) for _ in range(config.num_hidden_layers)])
        self.max_len = max_len
        self.prefilled = False  # the first pass (the prompt) is never compiled


def new_cache(model: PreTrainedModel, rollback: bool = False, *, fast: bool = False,
              max_len: int | None = None) -> Cache:
    """A KV cache for ``model``; ``rollback=True`` if it will be cropped (speculative decoding).

    The plain cache is built from the config so sliding-window layers (Phi-3, Mistral) get their own
    layer type; those forget what slides out of the window unless told to record it, and then could
    not be cropped back. ``fast=True`` gives a :class:`StaticKV` for ``max_len`` positions (the prompt,
    every new token and the longest verification), used with compiled forward passes.
    """
    if fast:
        if max_len is None:
            raise ValueError("a static cache needs max_len: the prompt, the new tokens and the longest draft")
        # Rounded up to a power of two: the compiled graphs are specialised to the cache's shape, so
        # runs of similar length (another prompt, a restart) reuse them instead of compiling again.
        return StaticKV(model, max(256, 1 << (max_len - 1).bit_length()))
    cache = DynamicCache(config=model.config)
    if rollback:
        cache.activate_past_recording()
    return cache


def rollback(cache: Cache, length: int) -> None:
    """Forget every position of ``cache`` from ``length`` on."""
    if isinstance(cache, StaticKV):
        for layer in cache.layers:  # a device tensor set in place: no copy to the host, no new address
            assert isinstance(layer, StaticLayer)
            layer.cumulative_length.fill_(min(length, cache.max_len))
        return
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)  # transformers 5 crops by a negative count


_COMPILED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _compiled(model: PreTrainedModel) -> Any:
    """``model``'s forward, compiled once per model: each input length gets its own graph, kept."""
    fn = _COMPILED.get(model)
    if fn is None:
        import torch._dynamo

        # One graph per input length (1 for a step, k+1 for a verification) and per logits kept.
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 2 * COMPILED_UP_TO)
        mode = "reduce-overhead" if model.device.type == "cuda" else "default"  # CUDA graphs where there are any
        fn = _COMPILED[model] = torch.compile(model.forward, mode=mode, fullgraph=True, dynamic=False)
    return fn


def forward(
    model: PreTrainedModel,
    input_ids: torch.Tensor,  # [B, T_new] tokens not yet in the cache
    cache: Cache,
    keep: int = 1,
) -> torch.Tensor:
    """Run the model over ``input_ids`` and return the logits of the last ``keep`` positions.

    Returns [B, keep, V] in float32, the dtype ``generate`` samples in.
    ``logits_to_keep`` spares the LM head on prompt positions nobody reads
    (49152 x T floats for SmolLM2 at prefill).
    """
    call: Any = model
    if isinstance(cache, StaticKV):
        if cache.prefilled and input_ids.shape[1] <= COMPILED_UP_TO:
            call = _compiled(model)
            # A slice keeps its buffer's strides, which the graph is guarded on: one graph per buffer.
            input_ids = input_ids.clone(memory_format=torch.contiguous_format)
        cache.prefilled = True
    out = call(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=keep)
    logits: torch.Tensor = out.logits[:, -keep:, :]
    if call is not model:  # a CUDA graph's output is overwritten by its next replay: keep a copy
        return logits.float().clone() if logits.dtype == torch.float32 else logits.float()
    return logits.float()


def to_host(tensors: list[torch.Tensor]) -> list[float]:
    """All of ``tensors``, flattened and concatenated, in one device-to-host copy.

    Each such copy waits for the device to finish its queue, so a step gathers everything it decides
    and shows on the device and copies it once. float64 holds every token id and count exactly and
    the float32 probabilities and scores unchanged.
    """
    return HostCopy(tensors).wait()


class HostCopy:
    """:func:`to_host` in two halves: the copy is queued now, and :meth:`wait` waits for it alone.

    On CUDA the copy goes to pinned memory without blocking, and an event marks its end. Work queued
    on the device after it (the next step's forward pass) then runs while the host waits for this
    copy and reports the step: the device is not left idle while Python turns a step into events.
    On a CPU it is the plain copy; there is nothing to overlap.
    """

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        packed = torch.cat([t.reshape(-1).to(torch.float64) for t in tensors])
        self.event: torch.cuda.Event | None = None
        if packed.device.type == "cuda":
            self.host = packed.to("cpu", non_blocking=True)  # into pinned memory from torch's host cache
            self.event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            self.event.record()
        else:
            self.host = packed

    def wait(self) -> list[float]:
        if self.event is not None:
            self.event.synchronize()
        values: list[float] = self.host.tolist()
        return values
