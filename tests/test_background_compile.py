"""The background compile (core/execution/background_compile.py), checked on the CPU with an eager stand-in for CUDA
graphs.

What runs for real: ``torch.compile`` (Dynamo's tracing, guards and stances, with a counting backend
instead of Inductor to keep the tests short), the worker thread, the lock and the switch. What stands in:
the CUDA graph itself (tests/test_graphs.py's EagerGraphs), whose capture and replay here call the
compiled forward. So a replay after the switch really runs the worker's compiled graph, and any
recompile in the decoding thread would be refused by the stance or seen by the counting backend.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from decode_tui.core.drafting.prompt_lookup import PromptLookup
from decode_tui.core.execution import background_compile
from decode_tui.core.params import SamplingParams
from decode_tui.core.record.events import Event, TokenEmitted
from decode_tui.core.strategies.autoregressive import autoregressive
from decode_tui.core.strategies.speculative import speculative

from .conftest import tiny_model
from .test_fast_path import V, assert_same_events, transcript
from .test_graphs import EagerGraphs, cpu_graphs  # noqa: F401  (a fixture)
from .test_speculative import repetitive_prompt

pytestmark = pytest.mark.usefixtures("cpu_graphs")  # every pass of a graph-path run goes through EagerGraphs


class CountingBackend:
    """A torch.compile backend that runs the traced graph as it is and records who compiled and how often it ran."""

    def __init__(self, fail: bool = False, gate: threading.Event | None = None) -> None:
        self.fail = fail
        self.gate = gate  # when given, compiling waits for it: a test decides when the worker finishes
        self.compiled_in: list[int] = []  # thread idents
        self.calls = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        self.compiled_in.append(threading.get_ident())
        if self.gate is not None:
            assert self.gate.wait(60)
        if self.fail:
            raise RuntimeError("no C++ compiler found\nmore detail")

        def run(*args: Any) -> Any:
            self.calls += 1
            return gm.forward(*args)

        return run


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    import torch._dynamo

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def go(model: Any, byte_bpe: Any, prompt: list[int], mode: str, graphs: bool, n: int = 24) -> Iterator[Event]:
    if mode == "pld":
        return speculative(model, transcript(byte_bpe, prompt, n), PromptLookup(3, 6), SamplingParams(), greedy=True,
                           num_draft_tokens=6, graphs=graphs)
    return autoregressive(model, transcript(byte_bpe, prompt, n), SamplingParams(top_k=20), greedy=False,
                          generator=torch.Generator().manual_seed(4), graphs=graphs)


def compiled_behind(byte_bpe: Any, arch: str, seed: int, backend: CountingBackend,
                    ) -> tuple[Any, list[int], list[Event]]:
    """A model that ran once on the graph path, then compiled in the background: (model, prompt, plain events)."""
    model = tiny_model(arch, vocab_size=V, seed=seed)
    prompt = repetitive_prompt(seed, 12)
    plain = list(go(model, byte_bpe, prompt, "sample", graphs=False))
    list(go(model, byte_bpe, prompt, "sample", graphs=True))
    background_compile.start(model, backend=backend)
    assert background_compile.wait(model, timeout=120)
    return model, prompt, plain


@pytest.mark.parametrize("mode", ["sample", "pld"])
def test_a_running_decode_switches_to_the_compiled_pass_between_steps_with_the_same_tokens(
        byte_bpe: Any, fresh_dynamo: None, mode: str) -> None:
    model = tiny_model("llama", vocab_size=V, seed=3)
    prompt = repetitive_prompt(3, 14)
    plain = list(go(model, byte_bpe, prompt, mode, graphs=False))
    backend = CountingBackend()
    run = go(model, byte_bpe, prompt, mode, graphs=True)
    events: list[Event] = []
    for event in run:  # the eager graph serves the first tokens
        events.append(event)
        if sum(isinstance(e, TokenEmitted) for e in events) == 4:
            break
    assert background_compile.progress(model) is None
    # PLD captured two shapes: its padded verification, and the one-token step where a lookup finds nothing.
    shapes = 2 if mode == "pld" else 1
    background_compile.start(model, backend=backend)
    assert background_compile.wait(model, timeout=120), "the worker settles"
    assert backend.calls == shapes, "the worker ran its compiled pass once a shape, on its own cache"
    events.extend(run)  # the same generator, on from where it paused

    assert_same_events(plain, events)
    assert backend.calls > 1, "after the switch the replays run the compiled pass"
    assert backend.compiled_in and threading.get_ident() not in backend.compiled_in, "only the worker compiles"
    now = background_compile.progress(model)
    assert now is not None and (now.shapes, now.compiled, now.switched, now.failure) == (shapes, shapes, shapes, None)
    plural = "s" * (shapes != 1)
    assert now.describe().startswith(f"compiled kernels: {shapes} graph{plural} switched, {shapes} shape{plural} "
                                     "compiled in ")


def test_a_shape_captured_after_the_start_is_compiled_too_and_the_next_run_uses_it(
        byte_bpe: Any, fresh_dynamo: None) -> None:
    model = tiny_model("qwen2", vocab_size=V, seed=2)
    prompt = repetitive_prompt(2, 12)
    backend = CountingBackend()
    background_compile.start(model, backend=backend)  # nothing captured yet
    assert background_compile.progress(model) == background_compile.Progress(0, 0, 0, False, 0.0, None)
    plain = list(go(model, byte_bpe, prompt, "pld", graphs=False))
    first = list(go(model, byte_bpe, prompt, "pld", graphs=True))  # captures two shapes: the worker is asked
    assert background_compile.wait(model, timeout=120)
    second = list(go(model, byte_bpe, prompt, "pld", graphs=True))
    assert_same_events(plain, first)
    assert_same_events(plain, second)
    now = background_compile.progress(model)
    # The verification's shape and the one-token step's (plain steps where a lookup finds nothing).
    assert now is not None and (now.shapes, now.switched) == (2, 2)
    assert threading.get_ident() not in backend.compiled_in


def test_a_shape_the_worker_has_not_compiled_keeps_its_eager_graph_and_is_never_compiled_in_the_foreground(
        byte_bpe: Any, fresh_dynamo: None) -> None:
    """Marked ready without being compiled: the switch's capture would have to compile, which the stance refuses."""
    backend = CountingBackend()
    model, prompt, plain = compiled_behind(byte_bpe, "llama", 5, backend)
    state = background_compile._state(model)
    assert state is not None
    shape = state.asked[0]
    never_compiled = (shape[0], 1, 3, 3)  # a verification-like pass on the same cache: asked, never compiled
    state.asked.append(never_compiled)
    state.ready.add(never_compiled)
    captures = EagerGraphs.captures

    from decode_tui.core.execution.forward import StaticKV, forward, new_cache, release

    with torch.inference_mode():
        cache = new_cache(model, graphs=True, max_len=len(prompt) + 24)  # the pooled one, with the step's graph
        assert isinstance(cache, StaticKV) and cache.max_len == shape[0] and cache.graphs
        try:
            forward(model, torch.tensor([prompt]), cache)
            logits = forward(model, torch.tensor([prompt[:3]]), cache, keep=3)
        finally:
            release(cache)
    assert torch.isfinite(logits).all()
    assert EagerGraphs.captures == captures + 2, "the eager capture, then the refused compiled one"
    assert not cache.graphs[(1, 3, 3)].compiled, "the eager graph serves on"
    assert threading.get_ident() not in backend.compiled_in
    now = background_compile.progress(model)
    assert now is not None and now.refused is not None and now.refused.startswith(
        "capturing the compiled pass failed: RuntimeError: Detected recompile")
    assert "eager graphs kept where capturing the compiled pass failed" in now.describe()
    assert_same_events(plain, list(go(model, byte_bpe, prompt, "sample", graphs=True)))


class FlippingBackend(CountingBackend):
    """Runs the traced graph, then raises one token's logit past every other: a compiled pass that picks another
    top token than the eager one (as Inductor's rounding may at a near-tie), on every position."""

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        run = super().__call__(gm, example_inputs)

        def flipped(*args: Any) -> Any:
            out = run(*args)
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.shape[-1] == V:
                    t[..., 7] += 1e4
            return out

        return flipped


def test_a_compiled_pass_whose_top_token_differs_is_refused_and_the_eager_graph_serves_on(
        byte_bpe: Any, fresh_dynamo: None) -> None:
    """The switch is checked on the pass it would first replace: the compiled pass that flips the top token is
    never switched to, the run's tokens stay the plain path's, and the progress line says why."""
    model, prompt, plain = compiled_behind(byte_bpe, "llama", 6, FlippingBackend())
    after = list(go(model, byte_bpe, prompt, "sample", graphs=True))
    assert_same_events(plain, after)
    now = background_compile.progress(model)
    assert now is not None and now.switched == 0 and now.refused is not None
    assert now.refused.startswith("the compiled pass's top token differed from the eager graph's at 1 of 1 "
                                  "positions"), now.refused
    assert now.label() == "eager graphs" and "eager graphs kept where the compiled pass's top token" in now.describe()


def test_a_failed_compile_leaves_the_eager_graphs_serving_and_says_why(
        byte_bpe: Any, fresh_dynamo: None) -> None:
    model, prompt, plain = compiled_behind(byte_bpe, "gpt2", 1, CountingBackend(fail=True))
    now = background_compile.progress(model)
    assert now is not None and now.failure is not None and "no C++ compiler found" in now.failure
    assert "\n" not in now.failure and now.switched == 0
    assert now.describe().startswith("compiled kernels unavailable (compiling failed:")
    assert_same_events(plain, list(go(model, byte_bpe, prompt, "sample", graphs=True)))
    assert background_compile.settled(model)


def test_the_foregrounds_forwards_wait_while_the_worker_traces_and_run_while_its_backend_compiles(
        byte_bpe: Any, fresh_dynamo: None) -> None:
    """Dynamo sets torch's process-wide ``is_compiling()`` while it compiles, and code in the model asks it (the
    ``kernels`` context variable transformers wraps attention in): a foreground forward while the worker traces would
    be traced into its graph or fail its guards (a flaky failure of this file's tests before). So they take turns,
    and the backend's compile, the long part, lets the foreground in. Without the turns, the forwards of the loop
    below run while the worker traces and see the flag set."""
    gate, inside = threading.Event(), threading.Event()

    class Recording(CountingBackend):
        def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
            inside.set()
            try:
                return super().__call__(gm, example_inputs)
            finally:
                inside.clear()

    model = tiny_model("llama", vocab_size=V, seed=3)
    prompt = repetitive_prompt(3, 12)
    list(go(model, byte_bpe, prompt, "sample", graphs=True))  # captures a step's graph: the shape to compile
    background_compile.start(model, backend=Recording(gate=gate))
    seen: list[tuple[bool, bool]] = []  # at each foreground forward: (the flag set, the worker in its backend)
    model.register_forward_pre_hook(lambda *_: seen.append((torch.compiler.is_compiling(), inside.is_set())))
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        while not inside.is_set():  # the worker traces: each of these waits for its turn
            model(ids)
        for _ in range(3):  # the worker's backend is held at the gate: these run
            model(ids)
    gate.set()
    assert background_compile.wait(model, timeout=120)
    now = background_compile.progress(model)
    assert now is not None and now.failure is None and now.compiled == now.shapes == 1, now
    assert sum(backend_ran for _, backend_ran in seen) >= 3
    assert not [s for s in seen if s[0] and not s[1]], "a foreground forward ran while the worker traced"


def test_a_model_without_a_background_compile_is_settled_and_has_no_progress() -> None:
    model = tiny_model("llama", vocab_size=V, seed=9)
    assert background_compile.progress(model) is None
    assert background_compile.settled(model)
    assert background_compile.wait(model, timeout=0)


def test_the_apps_runner_compiles_behind_its_runs_says_when_they_switch_and_times_only_settled_kernels(
        tiny_model_dir: Any, monkeypatch: pytest.MonkeyPatch, fresh_dynamo: None) -> None:
    import dataclasses
    import re

    from decode_tui.core.live import LiveParams
    from decode_tui.core.params import DecodeConfig
    from decode_tui.core.record.events import Finished, Started
    from decode_tui.tui.pump import Notice
    from decode_tui.tui.settings import Settings
    from decode_tui.tui.sources import ModelRunner

    gate = threading.Event()
    backend = CountingBackend(gate=gate)
    start = background_compile.start
    monkeypatch.setattr(background_compile, "start", lambda model: start(model, backend=backend))
    settings = Settings(model=str(tiny_model_dir), device="cpu", prompt="ab ab ab ab",
                        config=DecodeConfig(mode="greedy", max_new_tokens=24, seed=1))

    def source(runner: ModelRunner, s: Settings) -> Iterator[Event]:
        return runner.source(s, LiveParams(s.config.sampling, s.config.draft))()

    def notes(events: list[Event], kind: str = "note") -> list[str]:
        return [e.message for e in events if isinstance(e, Notice) and e.kind == kind]

    def tokens(events: list[Event]) -> tuple[int, ...]:
        return next(e.token_ids for e in events if isinstance(e, Finished))

    plain = list(source(ModelRunner(), settings))
    assert not any("background" in n for n in notes(plain)), "off unless asked"

    # A run that is decoding when the worker finishes: it switches between two steps and says after which token.
    runner = ModelRunner(background_compile=True)
    first: list[Event] = []
    for event in (stream := source(runner, settings)):
        first.append(event)
        if sum(isinstance(e, TokenEmitted) for e in first) == 3:
            break
    assert any(n.startswith("compiling the decoding passes in the background") for n in notes(first))
    model = next(iter(runner._models.values())).model
    assert not background_compile.settled(model), "held at the gate"
    gate.set()
    assert background_compile.wait(model, timeout=120)
    first.extend(stream)
    switched = [n for n in notes(first) if n.startswith("switched to compiled kernels")]
    assert switched and re.fullmatch(r"switched to compiled kernels after token 3 \([\d.]+ s of compiling in the "
                                     r"background\)", switched[0]), switched
    assert tokens(plain) == tokens(first)
    kernels = notes(first, "kernels")  # the stats bar's: before the first event, then at every change
    assert kernels == ["eager graphs, compiling 0/1", "eager graphs", "compiled graphs"] or \
        kernels == ["eager graphs, compiling 0/1", "compiled graphs"], kernels

    # A timed run (a race's) on a model still compiling waits for it before its first event, and never switches
    # mid-run: its graphs switch in a warm-up first.
    gate.clear()
    torch._dynamo.reset()  # else the second model, of the same class and shapes, reuses the first one's graph
    runner = ModelRunner(background_compile=True)
    list(source(runner, settings))  # loads, warms up, starts the compile (held at the gate)
    model = next(iter(runner._models.values())).model
    assert not background_compile.settled(model)
    threading.Timer(0.5, gate.set).start()
    timed = list(source(runner, dataclasses.replace(settings, for_timing=True)))
    started = next(i for i, e in enumerate(timed) if isinstance(e, Started))
    assert any("timed runs wait for it" in n for n in notes(timed[:started], "loading"))
    assert not notes(timed[started:], "loading") and not any("switched" in n for n in notes(timed))
    now = background_compile.progress(model)
    assert now is not None and now.switched == 1, "switched by the warm-up before the timed run"
    assert tokens(plain) == tokens(timed)
    assert threading.get_ident() not in backend.compiled_in


def test_a_background_compile_with_no_captured_passes_says_once_why_it_does_nothing(
        tiny_model_dir: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--background-compile` on a run that replays no CUDA graphs (the CPU, or graphs turned off) would do
    nothing without a word: it says why, once a session, and starts no worker. The control: not asked, no note."""
    import dataclasses

    from decode_tui.core.execution import forward as forward_module
    from decode_tui.core.live import LiveParams
    from decode_tui.core.params import DecodeConfig
    from decode_tui.tui.pump import Notice
    from decode_tui.tui.settings import Settings
    from decode_tui.tui.sources import ModelRunner

    def said(runner: ModelRunner, s: Settings) -> list[str]:
        events = list(runner.source(s, LiveParams(s.config.sampling, s.config.draft))())
        return [e.message for e in events if isinstance(e, Notice) and e.message.startswith("--background-compile")]

    settings = Settings(model=str(tiny_model_dir), device="cpu", prompt="ab ab ab ab",
                        config=DecodeConfig(mode="greedy", max_new_tokens=6, seed=1))
    monkeypatch.setattr(forward_module, "GRAPH_DEVICES", frozenset({"cuda"}))  # this module's stand-in off: a CPU
    runner = ModelRunner(background_compile=True)
    assert said(runner, settings) == ["--background-compile does nothing here: it compiles what CUDA graphs "
                                      "replay, and on cpu there are none (--fast compiles anywhere)"]
    assert said(runner, settings) == [], "said once, not at every restart"
    assert background_compile.progress(next(iter(runner._models.values())).model) is None
    assert said(ModelRunner(), settings) == []

    monkeypatch.setattr(forward_module, "GRAPH_DEVICES", frozenset({"cpu"}))  # graphs where the user turned them off
    off = dataclasses.replace(settings, config=dataclasses.replace(settings.config, cuda_graphs=False))
    assert said(ModelRunner(background_compile=True), off) == [
        "--background-compile does nothing here: --no-cuda-graphs takes the plain path, which replays no captured "
        "passes"]


def test_a_model_with_a_background_compile_is_freed_with_its_compiled_forward(
        byte_bpe: Any, fresh_dynamo: None) -> None:
    """The compiled forward holds the model's bound method: kept anywhere but on the model, it would pin the model."""
    import gc
    import weakref

    model = compiled_behind(byte_bpe, "llama", 11, CountingBackend())[0]
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None


@pytest.mark.parametrize("code", [0, 143])
def test_the_app_ends_its_process_at_once_where_a_compile_thread_was_started(monkeypatch: pytest.MonkeyPatch,
                                                                           code: int) -> None:
    """`q` (0) or SIGTERM (143) in an app that started a background compile: once the app has closed, the process
    ends with os._exit, never through the interpreter's exit, which aborted mid-compile on an H100. The control:
    with no compile started, the usual exit."""
    import typer

    from decode_tui.cli import commands

    class App:
        pump = None
        error = None

        def run(self) -> int:
            return code

    exits: list[int] = []

    def exit_now(status: int) -> None:
        exits.append(status)
        raise SystemExit(status)

    monkeypatch.setattr(commands, "need_terminal", lambda command: None)
    monkeypatch.setattr("os._exit", exit_now)
    monkeypatch.setattr(background_compile._Worker, "thread", None)
    with pytest.raises(typer.Exit):
        commands._run_app(App())
    assert exits == []
    monkeypatch.setattr(background_compile._Worker, "thread", threading.Thread(target=lambda: None))
    with pytest.raises(SystemExit):
        commands._run_app(App())
    assert exits == [code]


@pytest.mark.slow
@pytest.mark.parametrize(("delay", "code"), [(0.7, 0), (1.0, 143), (2.8, 0)])
def test_an_app_closing_while_inductor_compiles_in_the_background_ends_with_its_own_status(
        tmp_path: Any, delay: float, code: int) -> None:
    """`q` (0) or SIGTERM (143) while the worker compiles for real: the process ends with the app's status and
    nothing aborts. A child of the probe ``benchmarks/exit_mid_compile.py``: a model of the embedded model's
    architecture built small from its config, compiled by real Inductor on the CPU in the real worker; once it
    compiles, and a while longer, an app that has just closed with ``code`` goes through what ``decode-tui run``
    does after its app closes. The interpreter's own exit at these moments of this compile aborted 5 times in 14
    on this machine's CPU (SIGABRT, "terminate called without an active exception", as on the H100; the probe's
    results in benchmarks/results/cpu-2026-11-27-exit-mid-compile/)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    probe = Path(__file__).resolve().parents[1] / "benchmarks" / "exit_mid_compile.py"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}  # a cache of its own: it compiles from nothing
    done = subprocess.run([sys.executable, str(probe), "--code", str(code), "--child", "app", str(delay)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert "still compiling: True" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "terminate called" not in done.stderr
    assert done.returncode == code, done.stderr[-2000:]
