"""At most one device-to-host transfer per decoding step, counted where the core asks for one.

On a GPU every ``.tolist()``, ``.item()``, ``int(t)``, ``float(t)`` or ``bool(t)`` waits for the
device to finish its queue, so the core gathers what a step decides and what the viewer shows on the
device and copies it once. These tests count such calls made from the core's own files (not from
transformers' model code) on CPU, where the same calls would be syncs on CUDA.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import decode_tui.core
from decode_tui.core.drafting.model_drafter import ModelDrafter
from decode_tui.core.drafting.prompt_lookup import PromptLookup
from decode_tui.core.params import BeamParams, SamplingParams
from decode_tui.core.record.detokenize import Detokenizer
from decode_tui.core.record.events import BeamStepped, DraftProposed, Finished
from decode_tui.core.record.transcript import Transcript
from decode_tui.core.strategies.autoregressive import autoregressive
from decode_tui.core.strategies.beam import beam_search
from decode_tui.core.strategies.speculative import speculative

from .conftest import tiny_model

V = 420
CORE = str(Path(decode_tui.core.__file__).parent)
SYNCS = ("tolist", "item", "__int__", "__float__", "__bool__", "__index__", "cpu", "numpy")


TORCH = str(Path(torch.__file__).parent)
# What a read of one value back to the host dispatches: .item(), int(t), float(t) and bool(t) do, and so does what
# reads a value inside torch's own C++, where no Python method is called: indexing with a 0-d tensor, for one.
SCALAR_READS = (torch.ops.aten.item.default, torch.ops.aten._local_scalar_dense.default,
                torch.ops.aten.is_nonzero.default)


class ScalarReads(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Records the scalar reads that no counted method made, whose innermost Python caller outside torch (and
    outside this file) is a file of the core."""

    def __init__(self, calls: list[str], inside: list[int]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.calls, self.inside = calls, inside

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in SCALAR_READS and not self.inside[0]:
            frame: Any = sys._getframe(1)
            while frame is not None and (frame.f_code.co_filename.startswith(TORCH) or frame.f_code.co_filename
                                         == __file__):
                frame = frame.f_back
            if frame is not None and frame.f_code.co_filename.startswith(CORE):
                self.calls.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} {func.__name__}")
        return func(*args, **(kwargs or {}))


@contextmanager
def host_transfers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Record every tensor-to-host call whose caller is a file of the core, as 'file:line method', and every read
    of a value the core causes inside torch (:class:`ScalarReads`)."""
    calls: list[str] = []
    inside = [0]  # within a counted method: its own scalar read is not counted twice
    for name in SYNCS:
        original = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *args: Any, __original: Any = original, __name: str = name,
                    **kwargs: Any) -> Any:
            caller = sys._getframe(1).f_code.co_filename
            if caller.startswith(CORE):
                calls.append(f"{Path(caller).name}:{sys._getframe(1).f_lineno} {__name}")
            inside[0] += 1
            try:
                return __original(self, *args, **kwargs)
            finally:
                inside[0] -= 1

        monkeypatch.setattr(torch.Tensor, name, counted)
    try:
        with ScalarReads(calls, inside):
            yield calls
    finally:
        monkeypatch.undo()


def copies_and_waits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that records, in order, each host copy queued ("copy") and each wait for one ("wait"); a test adds
    the forwards (a pre-hook on the model) to read the order of the stream."""
    from decode_tui.core.execution import transfers as transfers_module

    calls: list[str] = []
    original_init, original_wait = transfers_module.HostCopy.__init__, transfers_module.HostCopy.wait

    def init(self: Any, tensors: list[torch.Tensor]) -> None:
        calls.append("copy")
        original_init(self, tensors)

    def wait(self: Any) -> list[float]:
        calls.append("wait")
        return original_wait(self)

    monkeypatch.setattr(transfers_module.HostCopy, "__init__", init)
    monkeypatch.setattr(transfers_module.HostCopy, "wait", wait)
    return calls


def transcript(tokenizer: Any, prompt: list[int], max_new: int) -> Transcript:
    return Transcript("greedy", prompt, Detokenizer(tokenizer), frozenset(), max_new)


PROMPT = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]


@pytest.mark.parametrize("greedy", [True, False])
def test_autoregressive_copies_once_per_step(byte_bpe: Any, monkeypatch: pytest.MonkeyPatch, greedy: bool) -> None:
    model = tiny_model("llama", vocab_size=V, seed=1)
    params = SamplingParams(temperature=0.8, top_k=50, top_p=0.9, repetition_penalty=1.2)
    with host_transfers(monkeypatch) as calls:
        events = list(autoregressive(model, transcript(byte_bpe, PROMPT, 12), params, greedy=greedy,
                                     generator=torch.Generator().manual_seed(0)))
    final = events[-1]
    assert isinstance(final, Finished) and final.new_tokens == 12
    assert len(calls) <= final.target_forwards, calls


@pytest.mark.parametrize("sample", [False, True])
@pytest.mark.parametrize("drafter_kind", ["model", "model running ahead", "lookup"])
def test_speculative_copies_once_per_target_forward_and_per_draft_token(
        byte_bpe: Any, monkeypatch: pytest.MonkeyPatch, sample: bool, drafter_kind: str) -> None:
    model = tiny_model("llama", vocab_size=V, seed=2)
    drafter: Any = (ModelDrafter(tiny_model("llama", vocab_size=V, seed=3), V, confidence_threshold=0.0,
                                 run_ahead=drafter_kind.endswith("ahead"))
                    if drafter_kind.startswith("model") else PromptLookup(1, 4, frozenset()))  # 1-grams: many matches
    drafter_kind = drafter_kind.split()[0]
    # For lookup, a prompt holding most of the vocabulary, so the last token is nearly always found in it.
    prompt = PROMPT if drafter_kind == "model" else list(range(1, V - 20))
    with host_transfers(monkeypatch) as calls:
        events = list(speculative(model, transcript(byte_bpe, prompt, 20), drafter, SamplingParams(temperature=0.9),
                                  greedy=not sample, num_draft_tokens=4,
                                  generator=torch.Generator().manual_seed(0)))
    final = events[-1]
    assert isinstance(final, Finished) and final.new_tokens == 20
    draft_steps = sum(len(e.token_ids) for e in events if isinstance(e, DraftProposed)) if drafter_kind == "model" \
        else 0
    rounds = sum(isinstance(e, DraftProposed) for e in events)
    assert rounds >= 2  # the test means something only if there were rounds to verify
    # A draft model's run makes one more: the plain step it times once at its start (its c and v are against it).
    assert len(calls) <= final.target_forwards + draft_steps + (drafter_kind == "model"), calls


@pytest.mark.parametrize("num_beams", [2, 4])
def test_beam_search_copies_once_per_step(byte_bpe: Any, monkeypatch: pytest.MonkeyPatch, num_beams: int) -> None:
    model = tiny_model("llama", vocab_size=V, seed=4)
    with host_transfers(monkeypatch) as calls:
        events = list(beam_search(model, transcript(byte_bpe, PROMPT, 10),
                                  BeamParams(num_beams=num_beams, length_penalty=1.0), SamplingParams()))
    steps = sum(isinstance(e, BeamStepped) for e in events)
    assert steps == 10
    assert len(calls) <= steps + 1, calls  # and one for the final hypotheses


def test_the_counter_sees_a_read_the_core_causes_inside_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative control for reads no Python method makes: indexing with a 0-d tensor reads it on the host."""
    from decode_tui.core.strategies import acceptance

    n = torch.tensor(1)
    with host_transfers(monkeypatch) as calls:
        acceptance._until_first_rejection(torch.tensor([True, False]))  # stays on the device: not counted
        acceptance._emitted(torch.tensor([4, 5]), n, torch.tensor(9))
        torch.arange(3)[n]  # made here, in a test file: not counted
    assert calls == []
    with host_transfers(monkeypatch) as calls:
        acceptance._at(torch.arange(3), n)
    assert calls == []
    monkeypatch.setattr(acceptance, "_at", lambda t, n: t[n])  # the plain indexing it replaces
    with host_transfers(monkeypatch) as calls:
        acceptance.accept(torch.softmax(torch.randn(3, 8), -1), None, [1, 2], True, None)
    # the read of n that indexing makes, then the round's one copy
    assert len(calls) == 2 and calls[0].startswith("acceptance.py") and "scalar" in calls[0]
    assert calls[1].endswith("tolist"), calls


@pytest.mark.parametrize("mode", ["greedy", "pld", "pld-sample", "draft", "beam"])
def test_the_core_uploads_ids_without_blocking(byte_bpe: Any, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """``torch.tensor(ids, device=...)`` copies to a GPU from pageable memory and then waits for the device's queue:
    in a verification round, for the pass just queued. The core uploads through ``forward.on_device`` (pinned, not
    blocking, on CUDA; tests/test_gpu.py watches it there with CUDA's sync debug mode) and never this way."""
    from decode_tui.core.execution import transfers as forward_module

    blocking: list[str] = []
    uploads: list[str] = []
    original_tensor, original_on_device = torch.tensor, forward_module.on_device

    def tensor(*args: Any, **kwargs: Any) -> torch.Tensor:
        caller = sys._getframe(1).f_code.co_filename
        if caller.startswith(CORE) and kwargs.get("device") is not None:
            blocking.append(f"{Path(caller).name}:{sys._getframe(1).f_lineno}")
        return original_tensor(*args, **kwargs)

    def on_device(*args: Any, **kwargs: Any) -> torch.Tensor:
        uploads.append(Path(sys._getframe(1).f_code.co_filename).name)
        return original_on_device(*args, **kwargs)

    monkeypatch.setattr(torch, "tensor", tensor)
    for module in list(sys.modules.values()):  # every core module that imported it by name
        if getattr(module, "__file__", None) and str(module.__file__).startswith(CORE) \
                and getattr(module, "on_device", None) is original_on_device:
            monkeypatch.setattr(module, "on_device", on_device)
    model = tiny_model("llama", vocab_size=V, seed=2)
    if mode == "greedy":
        list(autoregressive(model, transcript(byte_bpe, PROMPT, 12), SamplingParams(), greedy=True))
    elif mode == "beam":
        list(beam_search(model, transcript(byte_bpe, PROMPT, 10), BeamParams(3), SamplingParams()))
    else:
        drafter: Any = ModelDrafter(tiny_model("llama", vocab_size=V, seed=3), V, confidence_threshold=0.0) \
            if mode == "draft" else PromptLookup(1, 4, frozenset())
        list(speculative(model, transcript(byte_bpe, PROMPT, 20), drafter, SamplingParams(temperature=0.9),
                         greedy=not mode.endswith("sample"), num_draft_tokens=4,
                         generator=torch.Generator().manual_seed(0)))
    assert blocking == [], blocking
    assert uploads, "the run's ids went up through on_device"


@pytest.mark.parametrize("drafted", [False, True], ids=["copied", "drafted"])
def test_the_multi_draft_rule_reads_a_nodes_tests_back_in_one_copy(monkeypatch: pytest.MonkeyPatch,
                                                                   drafted: bool) -> None:
    """A sampled tree's node tries its children in turn, but their tests are read back together: one copy, and
    one read more for the token drawn from the last residual when every child is rejected."""
    from decode_tui.core.choosing.tree_sampling import accept_among

    g = torch.Generator().manual_seed(0)
    children = [3, 5, 7, 11]
    outcomes = set()
    for _ in range(40):
        logits = torch.randn(V, generator=g)
        logits[children] += 5  # the children hold most of p, so some are accepted and some rounds reject them all
        p = torch.softmax(logits, -1)
        q = [torch.softmax(torch.randn(V, generator=g) + 10 * torch.isin(torch.arange(V), torch.tensor(children)), -1)
             if drafted else None for _ in children]  # q surer of the children than p: drafted ones are rejected too
        with host_transfers(monkeypatch) as calls:
            among = accept_among(p, children, q, g)
        assert sum(c.endswith("tolist") for c in calls) == 1, calls
        assert len(calls) == 1 + (among.child is None), calls
        outcomes.add(among.child is None)
    assert outcomes == {True, False}, "both ends of the rule were watched"


def test_the_counter_sees_a_transfer_made_in_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative control: a core function that reads a tensor on the host is counted."""
    from decode_tui.core.choosing import sampling

    with host_transfers(monkeypatch) as calls:
        sampling.draw([("raw", torch.randn(1, 30))], greedy=True, generator=None, top_n=3)
        int(torch.tensor(3))  # made here, in a test file: not counted
    assert len(calls) == 1 and "tolist" in calls[0]


@pytest.mark.parametrize("loop", ["greedy", "plain stretch", "draft", "beam"])
def test_a_step_read_back_while_the_next_forward_runs_was_copied_before_that_forward(
        byte_bpe: Any, monkeypatch: pytest.MonkeyPatch, loop: str) -> None:
    """Running ahead (greedy's and the plain stretches' way on CUDA, an option for a draft and for beam search;
    forced here): each step's token is copied to the host, then the next forward is queued, then the copy is
    waited for. A copy queued after that forward would wait for it as well, and the host would turn the step
    into events with the device idle: the overlap running ahead is for would be lost (the plain stretches' steps
    once did that). Checked as the order of the calls, which on a GPU is the order of the stream."""
    from functools import partial

    from decode_tui.core.strategies import plain_steps as plain_module
    from decode_tui.core.strategies import rounds as rounds_module
    from decode_tui.core.strategies.adaptive import AdaptiveDraftLength

    calls = copies_and_waits(monkeypatch)
    model = tiny_model("llama", vocab_size=V, seed=4)
    model.register_forward_pre_hook(lambda *_: calls.append("forward"))
    if loop == "greedy":
        list(autoregressive(model, transcript(byte_bpe, PROMPT, 12), SamplingParams(), greedy=True, run_ahead=True))
    elif loop == "plain stretch":
        monkeypatch.setattr(rounds_module, "plain_steps", partial(plain_module.plain_steps, run_ahead=True))
        monkeypatch.setattr(AdaptiveDraftLength, "choose", lambda self: self._decide("plain", 0, "plain steps"))
        monkeypatch.setattr(AdaptiveDraftLength, "plain_stretch", lambda self: 12)
        list(speculative(model, transcript(byte_bpe, PROMPT, 12), PromptLookup(3, 4), SamplingParams(),
                         greedy=True, num_draft_tokens=4, adaptive=True))
    elif loop == "draft":
        drafter = ModelDrafter(model, V, confidence_threshold=0.0, run_ahead=True)
        drafter.propose(PROMPT, 12, [], True, None)
    else:
        list(beam_search(model, transcript(byte_bpe, PROMPT, 12), BeamParams(3), SamplingParams(), run_ahead=True))
    # The forwards queued ahead, each between a copy and its wait: copy, forward, wait, once a step.
    text = " ".join(calls)
    assert text.count("copy forward wait") >= 8, text

