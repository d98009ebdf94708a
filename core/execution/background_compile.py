"""Compiled kernels behind the captured graphs: ``torch.compile`` in a worker thread while the eager graphs serve.

On CUDA the default path (:mod:`~decode_tui.core.execution.forward`) replays CUDA graphs of the *eager* model: a
capture takes tens of milliseconds, so they serve from the first token. Inductor's fused kernels are
faster still, but compiling them takes tens of seconds in a fresh process (BENCHMARKS.md, "Each mode on a
GPU"), and nobody should wait that long for a first token. So a process that lives longer than a compile (the
app, when asked: ``--background-compile``) calls :func:`start` once its warm-up is done, and then:

1. A worker thread compiles the model's forward (Inductor, no CUDA graphs of its own) for each shape the
   foreground has captured: a decoding step, a verification of k+1 tokens, beam search's batched step.
   It compiles on a static cache of its own, with the same size and rows, on a stream of its own.
2. The foreground's next pass of a compiled shape, between two steps, captures the *compiled* forward
   as that shape's CUDA graph, in tens of milliseconds, and replays it from then on. This is vLLM's
   split (``torch.compile`` without graphs, then its own capture), done behind the first runs rather
   than before them.

Guarantees, each tested on the CPU with an eager stand-in for the graphs (tests/test_background_compile.py):
- The foreground never compiles. It captures the compiled forward under ``fail_on_recompile``, so a
  shape the worker did not compile keeps its eager graph.
- The foreground switches only while the worker is idle (one lock). So a capture never overlaps
  compilation's device work, and the compiler's global stance is changed by one thread at a time.
- The foreground's Python forwards of the model (its prefills and captures; a graph's replay runs no Python) and
  the worker's tracing take turns (:class:`_Turns`). Dynamo reads the model's Python state as it traces and builds
  its guards, and while it compiles it sets torch's *process-wide* ``torch.compiler.is_compiling()``; code the model
  runs asks that flag and changes state on it (the ``kernels`` package's context variable, which transformers wraps
  each attention layer's forward in, becomes a process global), so a foreground forward meanwhile could be traced
  into the worker's graph or fail its guards. Inductor's compile, the long part, reads only the traced graph and
  runs beside the foreground.
- A failure (compiling, or capturing the compiled pass) keeps the eager graph, and :func:`progress`
  says what failed. So does a compiled pass whose top token differs from the eager graph's on the pass it
  would first replace: the switch is checked on that pass, both graphs run from the same position. The
  tokens are the plain path's either way.

What it costs: while it compiles, the worker takes turns with the decoding thread for the interpreter
lock, so decoding is much slower until the switch. Hence it is off by default. And a compile thread cannot be
stopped: the interpreter's exit ends it from inside Inductor's C++ code, which aborts the process, so a front end that
started one ends its process with ``os._exit`` (:func:`started`).
Comparisons wait for it to settle (:func:`settled`), so no figure mixes the two kernels. ``decode-tui
generate`` never starts it: its process ends long before a compile would.

It knows static caches, their shapes and ``torch.compile``; nothing about strategies or front ends.
No library compiles behind a running decode and switches over, hence this module, written by hand.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..errors import first_line
from .forward import COMPILED_UP_TO, StaticKV, _Captured, captured_shapes, compile_forward
from .model_state import state_of
from .shared_end import kept_ends

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# A shape of a captured pass: (cache positions, rows, input width, logits kept). The cache's size is part of
# it: a compiled graph is specialised to the shapes of every tensor it reads, the cache's included.
Shape = tuple[int, int, int, int]

PREFILL = 8  # tokens the worker's own cache is filled with before it compiles the short passes over it


@dataclass(frozen=True)
class Progress:
    """How far the background compile of one model has come, for a status line."""

    shapes: int  # shapes asked for
    compiled: int  # shapes compiled by the worker
    switched: int  # captured graphs now replaying compiled kernels
    compiling: bool  # the worker is compiling now
    seconds: float  # the worker's compile time so far
    failure: str | None  # why compiling failed, if it did: the eager graphs then serve on
    refused: str | None = None  # why a compiled shape's capture failed, if one did: its eager graph serves on

    def label(self) -> str:
        """A few words for a status bar: the kernels the passes run on now."""
        if self.failure is not None:
            return "eager graphs (compile failed)"
        if self.compiling or self.compiled < self.shapes:
            return f"eager graphs, compiling {self.compiled}/{self.shapes}"
        if not self.switched:
            return "eager graphs"  # compiled: each graph switches at its next pass
        return "compiled graphs" + (", some eager" if self.refused else "")

    def describe(self) -> str:
        if self.failure is not None:
            return f"compiled kernels unavailable ({self.failure}); CUDA graphs of the eager model serve"
        if self.compiling or self.compiled < self.shapes:
            return f"compiling in the background: {self.compiled}/{self.shapes} shapes"
        kept = f"; eager graphs kept where {self.refused}" if self.refused else ""
        return (f"compiled kernels: {self.switched} graph{'s' * (self.switched != 1)} switched, "
                f"{self.shapes} shape{'s' * (self.shapes != 1)} compiled in {self.seconds:.1f} s{kept}")


@dataclass
class _Model:
    """The background compile of one model: its compiled forward and which shapes it covers."""

    compiled: Callable[..., Any]
    asked: list[Shape] = field(default_factory=list)
    ready: set[Shape] = field(default_factory=set)
    refused: set[Shape] = field(default_factory=set)  # compiled, but the foreground's capture failed: eager stays
    switched: set[tuple[int, Shape]] = field(default_factory=set)  # (id of the cache, shape) replaying compiled code
    failure: str | None = None
    refusal: str | None = None
    seconds: float = 0.0
    compiling: bool = False


    def upgrade(self, model: Any, cache: Any, key: tuple[int, ...], captured: Any, input_ids: Any) -> Any:
        return upgrade(model, cache, key, captured, input_ids)  # type: ignore[arg-type]

    def ask(self, model: Any, shape: tuple[int, int, int, int]) -> None:
        ask(model, shape)


def _state(model: Any) -> _Model | None:
    """``model``'s background compile, kept in its :class:`~.model_state.ModelState` (the graph replays find
    it there): None if it has none."""
    state = state_of(model).background
    return state if isinstance(state, _Model) else None


class _Turns:
    """The foreground's Python forwards of models compiled in the background (any number at once) and the worker's
    tracing (alone). A tracer that waits goes before forwards that start after it: decoding steps follow each other
    with no gap long enough for it otherwise. Hand-written: the standard library has no readers-writer lock."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._forwards = 0  # foreground forwards running now
        self._tracer = False  # the worker traces, or waits to

    def forward_starts(self, *_: Any) -> None:  # a forward pre-hook
        with self._changed:
            self._changed.wait_for(lambda: not self._tracer)
            self._forwards += 1

    def forward_ends(self, *_: Any) -> None:  # a forward hook, called on an exception too
        with self._changed:
            self._forwards -= 1
            self._changed.notify_all()

    def _trace(self) -> None:
        """The worker's turn: no forward starts after this, and it begins once those running have ended."""
        with self._changed:
            self._tracer = True
            self._changed.wait_for(lambda: self._forwards == 0)

    def _let_in(self) -> None:
        with self._changed:
            self._tracer = False
            self._changed.notify_all()

    @contextlib.contextmanager
    def tracing(self) -> Iterator[None]:
        self._trace()
        try:
            yield
        finally:
            self._let_in()

    def unlocked(self, backend: Callable[..., Any]) -> Callable[..., Any]:
        """``backend`` (a ``torch.compile`` backend, called once tracing is done) with the foreground let in while it
        compiles, and kept out again for the guards Dynamo builds after it."""

        def compile_traced(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
            self._let_in()
            try:
                return backend(gm, example_inputs)
            finally:
                self._trace()

        return compile_traced


_TURNS = _Turns()
# A job: the model, the shape, and the foreground's intra-op threads when it captured the shape. Torch keeps that
# count per thread and Dynamo guards on it: a pass compiled on the worker's own count would be a recompile there.
_JOBS: queue.SimpleQueue[tuple[weakref.ref[Any], Shape, int]] = queue.SimpleQueue()
_BUSY = threading.Lock()  # held by the worker while it compiles, and by the foreground while it switches
_STATE = threading.Lock()  # guards the bookkeeping above, briefly


class _Worker:
    """The process's one compile thread, once started (it cannot be stopped: see :func:`started`)."""

    thread: threading.Thread | None = None


def start(model: PreTrainedModel, backend: str | Callable[..., Any] = "inductor") -> None:
    """Compile ``model``'s short passes in the background: the shapes captured so far, and any captured later.

    ``backend``: torch.compile's; tests pass a cheap one. Idempotent per model.
    """
    with _STATE:
        if _state(model) is not None:
            return
        # One graph per shape and cache size. No mode: plain Inductor kernels, no CUDA graphs of their own;
        # forward.py captures them as it captures the eager model, so the graph pool, the rollback and the
        # pooled caches stay the same.
        import torch._dynamo

        compiler = torch._dynamo.lookup_backend(backend) if isinstance(backend, str) else backend
        state_of(model).background = _Model(compile_forward(model, graphs=4 * COMPILED_UP_TO,
                                                            backend=_TURNS.unlocked(compiler)))
        # The model's own Python forwards (never the compiled one, which Dynamo traces through model.forward) wait
        # for the worker's tracing; always_call: a forward that raises still ends its turn.
        model.register_forward_pre_hook(_TURNS.forward_starts)
        model.register_forward_hook(_TURNS.forward_ends, always_call=True)
        if _Worker.thread is None or not _Worker.thread.is_alive():
            # A daemon: a process that ends mid-compile must not wait for it.
            _Worker.thread = threading.Thread(target=_work, name="decode-tui background compile", daemon=True)
            _Worker.thread.start()
    for shape in captured_shapes(model):
        ask(model, shape)


def started() -> bool:
    """Whether this process started a background compile: its worker thread cannot be stopped, so a front end
    that ends the process while it may compile ends it with ``os._exit`` (the interpreter's exit aborts mid-compile)."""
    return _Worker.thread is not None


def ask(model: PreTrainedModel, shape: Shape) -> None:
    """The foreground captured ``shape``: compile it too, if ``model`` compiles in the background."""
    with _STATE:
        state = _state(model)
        if state is None or shape in state.asked or state.failure is not None:
            return
        state.asked.append(shape)
    _JOBS.put((weakref.ref(model), shape, torch.get_num_threads()))


def progress(model: PreTrainedModel) -> Progress | None:
    """Where ``model``'s background compile stands; None if it has none."""
    with _STATE:
        state = _state(model)
        if state is None:
            return None
        return Progress(len(state.asked), len(state.ready | state.refused), len(state.switched), state.compiling,
                        state.seconds, state.failure, state.refusal)


def settled(model: PreTrainedModel) -> bool:
    """Whether the worker is done with ``model``: no background compile, or every shape asked is compiled (or
    failed). A captured graph switches at its next pass after that."""
    now = progress(model)
    return now is None or now.failure is not None or (not now.compiling and now.compiled == now.shapes)


def wait(model: PreTrainedModel, timeout: float | None = None, poll: float = 0.05) -> bool:
    """Block until :func:`settled` (True), or until ``timeout`` seconds have passed (False)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not settled(model):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def upgrade(model: PreTrainedModel, cache: StaticKV, key: tuple[int, int, int], captured: _Captured,
            input_ids: torch.Tensor | None = None) -> _Captured:
    """The graph to replay for ``key`` on ``cache``: the compiled one once the worker has it, else ``captured``.

    Called by the foreground before each replay of an eager graph, so the switch happens between two
    passes. Cheap when there is nothing to do: two dictionary lookups. Given the pass's ``input_ids``, the
    switch is checked first: both graphs run on them from the same cache position, and a compiled pass whose
    top token differs from the eager graph's anywhere is refused (the eager graph serves on, and
    :func:`progress` says where and by how little the two differed): the switch never changes the tokens.
    """
    state = _state(model)
    shape = (cache.max_len, *key)
    if state is None or shape not in state.ready or not _BUSY.acquire(blocking=False):
        return captured  # not compiled yet, or the worker is busy: try again at the next pass
    try:
        try:
            # A recompile here would stall decoding for as long as the worker's compile took: refuse it.
            with torch.compiler.set_stance("fail_on_recompile"):
                new = _Captured(model, cache, (key[0], key[1]), key[2], compiled=_compiled_forward)
        except Exception as exc:  # the eager graph gives the same tokens; say why, and never try this one again
            with _STATE:
                state.ready.discard(shape)
                state.refused.add(shape)
                state.refusal = f"capturing the compiled pass failed: {first_line(exc, 160)}"
            return captured
        flipped = _flips(captured, new, cache, input_ids) if input_ids is not None else None
        if flipped is not None:
            with _STATE:
                state.ready.discard(shape)
                state.refused.add(shape)
                state.refusal = flipped
            return captured
        cache.graphs[key] = new
        with _STATE:
            state.switched.add((id(cache), shape))
        return new
    finally:
        _BUSY.release()


def _flips(eager: _Captured, compiled: _Captured, cache: StaticKV, input_ids: torch.Tensor) -> str | None:
    """Why the compiled pass may not replace the eager one: where its top token differs on ``input_ids``, with the
    eager logits' margin between its top two there (a near-tie another kernel's rounding flips); None if the two
    agree everywhere. Both run from the cache's current position, which is put back after each."""
    put_back = kept_ends(cache)
    a = eager(input_ids).float().clone()  # [B, keep, V]
    put_back()
    b = compiled(input_ids).float().clone()
    put_back()
    differ = (a.argmax(-1) != b.argmax(-1)).flatten()
    if not bool(differ.any()):  # one wait for the device, once per shape switched
        return None
    at = int(differ.nonzero()[0])
    top = a.flatten(0, 1)[at].topk(2).values
    return (f"the compiled pass's top token differed from the eager graph's at {int(differ.sum())} of "
            f"{differ.numel()} positions (the first a near-tie: margin {float(top[0] - top[1]):.3g}); eager kept")


def _compiled_forward(model: Any) -> Callable[..., Any]:
    state = _state(model)
    assert state is not None
    return state.compiled


def _work() -> None:
    """The worker: compile each asked shape on a cache of its own, one at a time, until the process ends."""
    caches: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], StaticKV]] = weakref.WeakKeyDictionary()
    while True:
        ref, shape, threads = _JOBS.get()
        torch.set_num_threads(threads)
        _job(ref, shape, caches)  # in a function of its own: no reference to the model outlives the job
        if _JOBS.empty():
            caches.clear()  # the worker's caches hold as much memory as the foreground's: not kept idle


def _job(ref: weakref.ref[Any], shape: Shape, caches: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], StaticKV]],
         ) -> None:
    model = ref()
    state = _state(model) if model is not None else None
    if model is None or state is None or state.failure is not None:
        return
    with _BUSY:
        with _STATE:
            state.compiling = True
        started = time.perf_counter()
        try:
            _compile(model, state.compiled, shape, caches.setdefault(model, {}))
        except Exception as exc:  # nothing switches; the eager graphs serve on
            with _STATE:
                state.failure = f"compiling failed: {first_line(exc, 160)}"
        else:
            with _STATE:
                state.ready.add(shape)
        finally:
            with _STATE:
                state.seconds += time.perf_counter() - started
                state.compiling = False


@torch.inference_mode()  # the decoding threads' mode: the compiled graph is guarded on it, and it is per thread
def _compile(model: PreTrainedModel, compiled: Callable[..., Any], shape: Shape,
             caches: dict[tuple[int, int], StaticKV]) -> None:
    """Compile, and run once, ``shape``'s pass on a static cache like the foreground's, of the worker's own."""
    size, rows, width, keep = shape
    device = model.device
    side = torch.cuda.Stream(device) if device.type == "cuda" else None  # type: ignore[no-untyped-call]
    with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
        cache = caches.get((size, rows))
        if cache is None:
            cache = caches[(size, rows)] = StaticKV(model, size, "compiled")
            # An eager prefill allocates the layers, as the foreground's prefill did for its cache.
            model(input_ids=torch.zeros((rows, PREFILL), dtype=torch.long, device=device), cache=cache,
                  use_cache=True, logits_to_keep=1)
        # A fresh contiguous buffer, as forward.py's captured ids are: the graph is guarded on strides too.
        with _TURNS.tracing():
            compiled(input_ids=torch.zeros((rows, width), dtype=torch.long, device=device), cache=cache,
                     use_cache=True, logits_to_keep=keep)
        cache.move_end(PREFILL)
    if side is not None:
        side.synchronize()
