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

The default on CUDA (``graphs=True``) keeps the static cache but compiles
nothing: each short forward pass of the *eager* model is captured once as a
``torch.cuda.CUDAGraph`` and replayed, the way vLLM's model runner and
llama.cpp do. A capture takes tens of milliseconds where compiling takes tens
of seconds, and removes the same cost: the Python and the kernel launches of
a few hundred modules per step. No library offers this for a transformers
model on a cache that must roll back (transformers' own static-cache path
goes through ``torch.compile``), hence :class:`_Captured`, written by hand.
Static caches, and the graphs captured on them, are pooled per model and
reused by the next run of similar length, so a graph is captured once per
model and cache size, usually during the warm-up that follows loading. A
long-lived front end may later swap a captured graph for one of the
*compiled* pass, between two passes (:mod:`.background_compile`).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache

from ..errors import first_line
from . import float_mask
from .model_state import state_of
from .shared_end import SharedEndLayer, _End, ends, kept_ends

if TYPE_CHECKING:
    from transformers import PreTrainedModel

COMPILED_UP_TO = 21  # the longest input the fast path compiles: a verification of 20 drafts plus the pending token
GRAPH_DEVICES = frozenset({"cuda"})  # where the default path captures CUDA graphs; elsewhere it is the plain path
CAPTURED_UP_TO = COMPILED_UP_TO  # the longest input replayed as a graph; a longer one runs eagerly
# The widest token tree replayed as a graph (a tree budget of 128 and the pending token): a GPU verifies 64 nodes
# for about a step's cost; wider trees run eagerly. A tree graph's key in a cache's graphs ends with TREE.
TREE_CAPTURED_UP_TO = 129
TREE = -1

StaticPath = Literal["graphs", "compiled"]

class StaticKV(Cache):
    """Preallocated keys and values for ``max_len`` positions in every layer, rolled back by moving its end.

    Every layer is full-length, a sliding-window model's (Phi-3, Mistral) too: transformers' static
    sliding layer is a ring buffer that overwrites what slides out, which could not be rolled back
    after a rejected draft. The model still applies its window, through the attention mask it builds
    from its config. The layers' write position (``cumulative_length``) is one device tensor that they
    share (:class:`SharedEndLayer`) and a pass advances in place; rolling back sets it, and the positions
    past it are stale but masked (the mask is causal in absolute positions) until they are written again.
    """

    def __init__(self, model: PreTrainedModel, max_len: int, path: StaticPath = "compiled") -> None:
        config = model.config.get_text_config(decoder=True)
        self.end = _End()
        count = config.num_hidden_layers
        super().__init__(layers=[SharedEndLayer(max_len, self.end, first=i == 0) for i in range(count)])
        self.max_len = max_len
        self.path = path  # how its short passes run: replayed CUDA graphs or torch.compile
        self.prefilled = False  # the first pass (the prompt) is never compiled or captured
        self.graphs: dict[tuple[int, ...], _Captured] = {}  # by (batch, width, logits kept[, TREE])
        self.model = weakref.ref(model)  # for the reorder's graph; weak, as the pool that holds this cache is
        self.reorder_graph: _CapturedReorder | None = None  # beam search's reorder, captured on its first use
        self.leased = False  # a run is using it; the pool hands it to nobody else until released
        self.leases = 0  # how many runs it has served: a kept prefix is still in it while no other run leased it

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search: row ``i`` of every layer becomes row ``beam_idx[i]``, copied in place.

        transformers' static layer rebinds its tensors to the reordered copies, which would leave a captured
        graph reading the old addresses; here the reordered rows are written back into the same storage. On the
        graph path the copies of all layers are themselves replayed as one graph (:class:`_CapturedReorder`).
        """
        model = self.model()
        if self.path == "graphs" and self.prefilled and model is not None \
                and state_of(model).graph_failure is None:
            if self.reorder_graph is None:
                try:
                    self.reorder_graph = _CapturedReorder(model, self)
                except Exception as exc:  # the eager copies below give the same rows, as an eager pass does
                    state_of(model).graph_failure = first_line(exc, 200)
            if self.reorder_graph is not None:
                self.reorder_graph(beam_idx)
                return
        self.reorder_rows(beam_idx)

    def reorder_rows(self, beam_idx: torch.Tensor) -> None:
        """The reorder itself, layer by layer: an index select and a copy back, for the keys and the values."""
        index: torch.Tensor | None = None
        for layer in self.layers:
            keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
            if keys is not None and values is not None:  # allocated by the first pass
                index = beam_idx.to(keys.device) if index is None else index
                keys.copy_(keys.index_select(0, index))
                values.copy_(values.index_select(0, index))

    def move_end(self, length: int) -> None:
        """Forget every position from ``length`` on: each layer's write position, a device tensor, is set in
        place (no copy to the host, no new address, so compiled and captured graphs stay valid)."""
        for end in ends(self):
            end.fill_(min(length, self.max_len))


_POOLED_PER_SIZE = 2  # enough for a run and a drafter or a comparison; more would only hold memory


def new_cache(model: PreTrainedModel, rollback: bool = False, *, fast: bool = False, graphs: bool = False,
              max_len: int | None = None, batch: int = 1) -> Cache:
    """A KV cache for ``model``; ``rollback=True`` if it will be cropped (speculative decoding).

    The plain cache is built from the config so sliding-window layers (Phi-3, Mistral) get their own
    layer type; those forget what slides out of the window unless told to record it, and then could
    not be cropped back. ``fast=True`` (compiled passes) or ``graphs=True`` (captured passes) gives a
    :class:`StaticKV` for at least ``max_len`` positions (the prompt, every new token and the longest
    verification), from the model's pool when one is free; hand it back with :func:`release`. ``batch``:
    the rows it will hold (beam search's beams), which its first pass fixes.
    """
    if fast or graphs:
        if max_len is None:
            raise ValueError("a static cache needs max_len: the prompt, the new tokens and the longest draft")
        # Rounded up to a power of two: compiled and captured graphs are specialised to the cache's
        # shape and address, so runs of similar length (another prompt, a restart) reuse them.
        size = max(256, 1 << (max_len - 1).bit_length())
        path: StaticPath = "compiled" if fast else "graphs"
        # By (length, path, batch), in the model's state: a finished run's cache (and its captured graphs) serves
        # the next run of the same size; beam search's cache holds a row per beam.
        pooled = state_of(model).pool.setdefault((size, path, batch), [])
        static = next((c for c in pooled if not c.leased), None)
        if static is None:
            static = StaticKV(model, size, path)
            if len(pooled) < _POOLED_PER_SIZE:
                pooled.append(static)
        static.move_end(0)
        static.prefilled = False
        static.leased = True
        static.leases += 1
        return static
    cache = DynamicCache(config=model.config)
    if rollback:
        cache.activate_past_recording()
    return cache


def release(cache: Cache) -> None:
    """A run is done with ``cache``: a pooled static cache may serve the next one (no-op for a plain cache)."""
    if isinstance(cache, StaticKV):
        cache.leased = False


def graphs_available(model: PreTrainedModel) -> bool:
    """Whether the default path replays CUDA graphs for ``model``: on CUDA, on one device, unless capture failed."""
    if model.device.type not in GRAPH_DEVICES or state_of(model).graph_failure is not None:
        return False
    devices = set((getattr(model, "hf_device_map", None) or {}).values())
    return len(devices) <= 1  # layers spread by accelerate move tensors between devices in their hooks


def graph_failure(model: PreTrainedModel) -> str | None:
    """Why capturing a CUDA graph of ``model`` failed, if it did (its runs then go eagerly on the static cache)."""
    return state_of(model).graph_failure


def rollback(cache: Cache, length: int) -> None:
    """Forget every position of ``cache`` from ``length`` on."""
    if isinstance(cache, StaticKV):
        cache.move_end(length)
        return
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)  # transformers 5 crops by a negative count


_COMPILED = "_decode_tui_compiled"  # the model's attribute for it: a weak-keyed table would pin the model


def _compiled(model: PreTrainedModel) -> Any:
    """``model``'s forward, compiled once per model: each input length gets its own graph, kept."""
    fn = vars(model).get(_COMPILED)
    if fn is None:
        # One graph per input length (1 for a step, k+1 for a verification) and per logits kept.
        mode = "reduce-overhead" if model.device.type == "cuda" else "default"  # CUDA graphs where there are any
        fn = compile_forward(model, graphs=2 * COMPILED_UP_TO, mode=mode)
        setattr(model, _COMPILED, fn)  # a cycle through the bound method, freed with the model
    return fn


def compile_forward(model: PreTrainedModel, graphs: int, **options: Any) -> Any:
    """``model.forward`` through ``torch.compile`` with static shapes and no graph break, ``options`` passed on.

    Dynamo keeps at least ``graphs`` graphs per code object (one per input shape; models of one class share
    it). Inductor's compiled kernels and graphs are kept in decode-tui's cache folder (unless the user chose
    another): compiling is paid once per machine and model.
    """
    import os

    import torch._dynamo

    from ..model.registry import cache_root

    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "inductor"))
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, graphs)
    return torch.compile(model.forward, fullgraph=True, dynamic=False, **options)


class CudaGraphs:
    """Captures and replays with ``torch.cuda.CUDAGraph``; the one backend outside tests."""

    @staticmethod
    def capture(model: PreTrainedModel, run: Callable[[], torch.Tensor], put_back: Callable[[], None],
                ) -> tuple[Callable[[], None], torch.Tensor]:
        # One warm-up pass on a side stream first, as torch's capture recipe asks (lazy initialisation
        # inside a capture would be recorded, or fail). It writes keys and values where the next real
        # pass writes them anyway; put_back() restores the cache's write position it advanced.
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            run()
            put_back()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # The graphs of one model share a memory pool: they never replay at the same time (vLLM does the same).
        state = state_of(model)
        if state.graph_pool is None:
            state.graph_pool = torch.cuda.graph_pool_handle()
        pool = state.graph_pool
        # thread_local: a background compile (core/execution/background_compile.py) may allocate and load kernels in
        # its own thread meanwhile, on its own stream; only this thread's unsafe calls would spoil the capture.
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            out = run()  # recorded, not run: the cache is untouched
        return graph.replay, out


GraphBackend: Any = CudaGraphs  # tests swap in an eager stand-in to run this module's bookkeeping on the CPU


class _Captured:
    """One forward pass of a fixed shape on one static cache, captured: static input ids in, static logits out.

    Everything the pass reads is a device tensor at a fixed address: the ids buffer (filled before each
    replay), the cache's keys and values, and its write position, which the recorded pass advances in
    place as an eager pass would. So replaying after a rollback (which sets that position) is correct.
    """

    def __init__(self, model: PreTrainedModel, cache: StaticKV, shape: tuple[int, int], keep: int,
                 compiled: Callable[[Any], Callable[..., Any]] | None = None, tree: bool = False) -> None:
        """``compiled``: gives the model's compiled forward, captured instead of the eager model (the background
        compile's). The pass reaches the model through a weak reference: a pooled cache and its graphs must not
        keep alive (with its device memory) a model the app has let go of for another. ``tree``: a token tree's
        forward, which also reads its attention mask and position ids from fixed addresses."""
        self.compiled = compiled is not None
        model_ref = weakref.ref(model)
        self.ids = torch.zeros(shape, dtype=torch.long, device=model.device)  # [B, W]
        tree_inputs = {"attention_mask": torch.zeros((1, 1, shape[1], cache.max_len), dtype=model.dtype,
                                                     device=model.device),  # [1, 1, W, K]
                       "position_ids": torch.zeros(shape, dtype=torch.long, device=model.device)} if tree else {}
        self.tree_inputs = tree_inputs
        put_back = kept_ends(cache)

        def run() -> torch.Tensor:
            live = model_ref()
            assert live is not None, "a graph of a freed model"
            forward_fn: Callable[..., Any] = compiled(live) if compiled is not None else live
            out: torch.Tensor = forward_fn(input_ids=self.ids, cache=cache, use_cache=True, logits_to_keep=keep,
                                           **tree_inputs).logits
            return out

        self.replay: Callable[[], None]
        self.logits: torch.Tensor  # [B, keep, V], overwritten by every replay
        # The eager pass is recorded with its attention masks built as floats once a pass (the same numbers, fewer
        # kernels: core/execution/float_mask.py). Not a compiled pass, nor a model compiled in the background:
        # switching its attention would fail the guards its compiled code was traced under, and recompile it.
        behind = state_of(model).background is not None
        masks = float_mask.while_capturing(model) if compiled is None and not behind else contextlib.nullcontext()
        with masks:
            self.replay, self.logits = GraphBackend.capture(model, run, put_back)

    def __call__(self, input_ids: torch.Tensor, **tree_inputs: torch.Tensor) -> torch.Tensor:
        self.ids.copy_(input_ids)
        for name, value in tree_inputs.items():
            self.tree_inputs[name].copy_(value)
        self.replay()
        return self.logits


class _CapturedReorder:
    """Beam search's reorder of a static cache's rows, captured: a static index in, every layer's rows copied in
    place by one replay.

    Eagerly a reorder is four ops a layer (:meth:`StaticKV.reorder_rows`): for the embedded model's 30 layers,
    120 of the 224 ops a beam step launches outside its pass (``benchmarks/step_ops.py --eager-reorder``), each a
    kernel launch on a GPU, where a small model's beam step is bound by its launches. Replayed, it is the index's
    copy and one launch. It is captured with the identity order, so that the capture's warm-up pass (see
    :class:`CudaGraphs`) leaves the rows where they are.
    """

    def __init__(self, model: PreTrainedModel, cache: StaticKV) -> None:
        # The beams: the first pass, already run, allocated every layer with a row each.
        rows: int = next(keys.shape[0] for layer in cache.layers if (keys := getattr(layer, "keys", None)) is not None)
        self.index = torch.arange(rows, device=model.device)  # [N] filled before each replay

        def run() -> torch.Tensor:
            cache.reorder_rows(self.index)
            return torch.zeros(1, device=model.device)  # the backend's output: nothing a caller reads

        self.replay: Callable[[], None] = GraphBackend.capture(model, run, lambda: None)[0]

    def __call__(self, beam_idx: torch.Tensor) -> None:
        self.index.copy_(beam_idx)
        self.replay()


def _replayed(model: PreTrainedModel, cache: StaticKV, input_ids: torch.Tensor, keep: int) -> torch.Tensor | None:
    """The logits of a replayed graph for this shape (captured on first use), or None if it cannot be captured."""
    key = (*input_ids.shape, keep)
    captured = cache.graphs.get(key) or _capture(model, cache, tuple(input_ids.shape), keep)
    if captured is None:
        return None
    background = state_of(model).background
    if not captured.compiled and background is not None:  # the compiled pass replaces it once the background has it
        captured = background.upgrade(model, cache, key, captured, input_ids)
    return captured(input_ids)


def _capture(model: PreTrainedModel, cache: StaticKV, shape: tuple[int, ...], keep: int, tree: bool = False,
             ) -> _Captured | None:
    state = state_of(model)
    if state.graph_failure is not None:
        return None
    key = (*shape, keep, *((TREE,) if tree else ()))
    try:
        captured = cache.graphs[key] = _Captured(model, cache, (shape[0], shape[1]), keep, tree=tree)
    except Exception as exc:  # whatever failed, the eager pass on the same cache gives the same logits
        state.graph_failure = first_line(exc, 200)
        return None
    if state.background is not None and not tree:  # a background compile knows the chain's passes only
        state.background.ask(model, (cache.max_len, shape[0], shape[1], keep))
    return captured


def replayed_tree(model: PreTrainedModel, cache: Cache, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  position_ids: torch.Tensor) -> torch.Tensor | None:
    """A token tree's forward (:mod:`decode_tui.core.execution.tree_attention`) replayed as a graph captured for its
    width: its logits at every row ([1, W, V], a copy in float32), or None off the graph path, past the widest tree
    captured or where capture failed (the caller runs it eagerly). The tree's mask and position ids are inputs
    of the graph like its ids, so that one graph serves every round of a fixed width (the drafter's tree budget,
    the tree padded to it)."""
    if not (isinstance(cache, StaticKV) and cache.path == "graphs" and cache.prefilled) \
            or input_ids.shape[1] > TREE_CAPTURED_UP_TO or attention_mask.shape[-1] != cache.max_len:
        return None
    width = input_ids.shape[1]
    captured = cache.graphs.get((1, width, width, TREE)) or _capture(model, cache, (1, width), width, tree=True)
    if captured is None:
        return None
    logits = captured(input_ids, attention_mask=attention_mask, position_ids=position_ids)
    return logits.float() if logits.dtype != torch.float32 else logits.clone()


def captured_shapes(model: PreTrainedModel) -> list[tuple[int, int, int, int]]:
    """Every (cache size, rows, width, logits kept) captured for ``model`` on its pooled caches so far."""
    # Copied before iterating (each copy one call under the interpreter lock): another decoding thread may capture.
    shapes = {(cache.max_len, key[0], key[1], key[2]) for pooled in list(state_of(model).pool.values())
              for cache in list(pooled) for key in list(cache.graphs)}
    return sorted(shapes)


def prepare(model: PreTrainedModel, cache: Cache, width: int, keep: int) -> None:
    """Capture, now, the graph that later passes of ``width`` tokens will replay (a no-op off the graph path).

    A verification's first round should not pay for its capture mid-run; the strategies call this
    right after the prefill. Capturing leaves the cache as it was.
    """
    if isinstance(cache, StaticKV) and cache.path == "graphs" and cache.prefilled and width <= CAPTURED_UP_TO \
            and (1, width, keep) not in cache.graphs:
        _capture(model, cache, (1, width), keep)


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
    replayed = None
    if isinstance(cache, StaticKV):
        if cache.prefilled and cache.path == "graphs" and input_ids.shape[1] <= CAPTURED_UP_TO:
            replayed = _replayed(model, cache, input_ids, keep)  # None: not capturable, run it eagerly
        elif cache.prefilled and cache.path == "compiled" and input_ids.shape[1] <= COMPILED_UP_TO:
            call = _compiled(model)
            # A slice keeps its buffer's strides, which the graph is guarded on: one graph per buffer.
            input_ids = input_ids.clone(memory_format=torch.contiguous_format)
        cache.prefilled = True
    if replayed is not None:
        logits: torch.Tensor = replayed[:, -keep:, :]
    else:
        logits = call(input_ids=input_ids, cache=cache, use_cache=True, logits_to_keep=keep).logits
        logits = logits[:, -keep:, :]
        if logits.device != input_ids.device:  # a model spread over devices: its last layer's, [B, keep, V] across
            logits = logits.to(input_ids.device)
    if replayed is not None or call is not model:  # a CUDA graph's output is overwritten by its next replay
        return logits.float().clone() if logits.dtype == torch.float32 else logits.float()
    return logits.float()
