"""Moving values between the host and the device without waiting where a wait would leave the device idle.

A step gathers what it decides and shows on the device and copies it to the host once (:func:`to_host`); its inputs
go the other way from pinned memory, queued like a kernel (:func:`to_device`).

It knows tensors and CUDA streams; nothing of models or decoding.
"""

from __future__ import annotations

from typing import Any

import torch


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host`` (a CPU tensor) on ``device``, queued on a GPU without waiting for it.

    A plain ``.to("cuda")`` (and ``torch.tensor(values, device="cuda")``) copies from pageable memory and then
    synchronises the stream: the host waits for every pass already queued, in a verification round the very pass
    whose logits it is about to test. Copied from pinned memory without blocking, the values join the queue like
    a kernel (vLLM stages its inputs the same way); torch's pinned-memory allocator keeps the block until the copy
    has run.
    """
    if device.type != "cuda":
        return host.to(device)  # the same tensor where the device is the CPU
    if host.numel() == 0:  # nothing to copy (a run without end-of-text ids, say)
        return torch.empty(host.shape, dtype=host.dtype, device=device)
    return host.pin_memory().to(device, non_blocking=True)


def on_device(values: Any, device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """``torch.tensor(values, dtype=dtype, device=device)`` without the wait (see :func:`to_device`)."""
    return to_device(torch.tensor(values, dtype=dtype), device)


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
        # One cat into a float64 buffer converts every input as it copies it: a conversion of each input first
        # would be an op (on a GPU, a kernel launched from Python) per tensor, 16 in a beam step.
        packed = torch.empty(sum(t.numel() for t in tensors), dtype=torch.float64, device=tensors[0].device)
        with torch.no_grad():  # values only: a draft's probabilities may come from a pass run with autograd on
            torch.cat([t.reshape(-1) for t in tensors], out=packed)
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
