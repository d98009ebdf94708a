"""Benchmark: the app's decoding throughput against headless decoding, and how fast it answers keys.

Throughput: the same prompt and settings decoded headlessly (``Run.events()``
on the main thread, what ``decode-tui generate`` does) and inside the app
(Textual, headless driver, the decoder in its thread worker, the 30 Hz drain
updating every widget), alternately, ``--repeats`` rounds of two runs each;
the figure is the core's own ``Finished.tokens_per_s`` on both sides, medians.
End of sequence is disabled so both sides decode the same number of tokens.
The app runs in a child process set up as ``decode-tui run`` sets itself up:
the main (UI) thread never touches torch, the model is loaded in the decoder
thread. (Sharing one process with the headless side would give torch two
OpenMP thread teams and slow both; see ``DecodeApp.on_mount``.) In the app,
the first run is untimed (the app is mounting meanwhile, once per session) and
the timed runs are restarts (``r``); headless, the first run is untimed too.

Key latency: while the app decodes, a key is sent every 150 ms the way the
terminal driver sends one (``b``, which toggles token boundaries and redraws the
whole text pane, the most expensive key that does not restart the run); we time
from sending the key to the end of its handler, and to the text pane's next
paint (what the user sees).

    python benchmarks/app_vs_headless.py [--repeats 3] [--new-tokens 128] [--json out.json]
                                         [--proxy python-bound[:N]|device-wait] [--cases MODE/PROMPT,...]
                                         [--start-at-once] [--pin]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from textual import events

from decode_tui.core.execution.transfers import HostCopy
from decode_tui.core.live import LiveParams
from decode_tui.core.model.embedded import pull
from decode_tui.core.model.loading import LoadedModel, load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.params import DecodeConfig
from decode_tui.core.record.events import Event, Finished, TokenEmitted
from decode_tui.core.run import Run
from decode_tui.tui.app import DecodeApp
from decode_tui.tui.pump import EventSource, StepTracker
from decode_tui.tui.settings import Settings
from decode_tui.tui.widgets.text_pane import TextPane

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_vs_hf import PROMPTS, machine

SIZE = (120, 36)


_SYNCED = threading.local()  # per thread: seconds spent in HostCopy.wait, the wait for the device's copy
_host_wait = HostCopy.wait


def _timed_wait(self: HostCopy) -> list[float]:
    start = time.perf_counter()
    try:
        return _host_wait(self)
    finally:
        _SYNCED.s = getattr(_SYNCED, "s", 0.0) + time.perf_counter() - start


# Both sides decode through this benchmark's patched wait, alike: two clock reads a step, a fraction of a microsecond.
HostCopy.wait = _timed_wait  # type: ignore[method-assign]


def thread_switches() -> tuple[int, int | None]:
    """The calling thread's context switches so far (voluntary and not), and its migrations from one CPU to
    another (None where the kernel does not publish them): Linux's /proc/thread-self."""
    switches, migrations = 0, None
    try:
        for line in Path("/proc/thread-self/status").read_text().splitlines():
            if "ctxt_switches:" in line:
                switches += int(line.split()[-1])
        for line in Path("/proc/thread-self/sched").read_text().splitlines():
            if line.startswith("se.nr_migrations"):
                migrations = int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return switches, migrations


def current_cpu() -> int | None:
    """The CPU the calling thread is on now (the 39th field of /proc/thread-self/stat; None where there is none)."""
    try:
        stat = Path("/proc/thread-self/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def pin_to(cpus: set[int]) -> set[int]:
    """Pin the calling thread (Linux: pid 0 is the thread, not the process) to ``cpus``; returns its CPUs before."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    return before


def decoder_cpu() -> int:
    """The CPU a pinned decoder gets: the last this process may use (the UI thread gets the others)."""
    return max(os.sched_getaffinity(0))


@dataclasses.dataclass
class DecoderClock:
    """The decoding thread's own CPU time against the wall clock, from a run's first event to its last.

    Where the app is slower, this says why: a decoder whose CPU time per token is unchanged but whose
    wall time grew was waiting (for the interpreter lock, mostly); one whose CPU time grew did more
    work (garbage collection over the UI's objects, a colder cache). Not on CUDA, where the decoder waits
    for each step's copy in ``cudaEventSynchronize``, which spins by default: there its CPU time is about
    its wall time on both sides, and only the time off the CPU (``waiting``) says something.
    """

    cpu_s: float = 0.0
    wall_s: float = 0.0
    tokens: int = 0
    gaps: list[float] = dataclasses.field(default_factory=list)  # seconds between the run's successive steps
    # Seconds of the run spent in the cyclic garbage collector, in any thread (a collection holds the interpreter
    # lock, so one in the UI thread stops the decoder's Python too), and how many of those were full collections,
    # which walk every object the process holds outside gc.freeze(): the app's widgets are many.
    gc_s: float = 0.0
    gc_full: int = 0
    # Seconds of the run the decoding thread spent waiting for the device's copy of a step (HostCopy.wait): on CUDA
    # the device's time not overlapped with the host's; the rest of the wall time is the host's own step (its
    # Python, and any wait for the interpreter lock). The host's share growing in the app, with this shrinking,
    # says the host's step got slower and the device waited for it.
    synced_s: float = 0.0
    switches: int = 0  # the decoding thread's context switches in the run (each wait for the lock is one or more)
    migrations: int | None = None  # ... and its moves to another CPU, which leave its caches behind (None: unknown)
    pin: int | None = None  # the CPU to pin the decoding thread to for the run (the control for migrations)
    # The UI thread's CPU clock (time.pthread_getcpuclockid), read from the decoding thread at the run's marks: the
    # UI's CPU time while the run decodes, and only then. The app's whole-run figure (AppRun.ui_cpu) also holds the
    # restart and the paint of the run's start, which the decoder waits for and does not compete with.
    ui_clock: int | None = None
    ui_cpu_s: float | None = None
    # The whole process's CPU time in the run, and the CPU the decoding thread was on at its start. The H200's
    # long-lived headless process decoded 12-32 % faster in some rounds than in others, and young processes never
    # did (BENCHMARKS.md): the other threads' share (the process's CPU less the decoder's and the UI's), a torch
    # thread team or a driver thread spinning beside the decoder, and the CPU it ran on are this probe's suspects.
    process_cpu_s: float = 0.0
    start_cpu: int | None = None

    def watch(self, events: Iterator[Event]) -> Iterator[Event]:
        """From the event after the run's first (``Started``) to the last: the app holds a run at its start
        until the start is on screen (``DecodeApp.show_start_first``), which is not decoding, as the run's own
        clock leaves it out too."""
        def marks() -> tuple[float, float, float, int, int | None]:  # where the run's counts start from
            return time.thread_time(), time.perf_counter(), getattr(_SYNCED, "s", 0.0), *thread_switches()

        def ui_time() -> float:
            return time.clock_gettime(self.ui_clock) if self.ui_clock is not None else 0.0

        cpu, wall, synced, switches, migrations = marks()
        ui, process = ui_time(), time.process_time()
        self.tokens, self.gaps, self.gc_s, self.gc_full = 0, [], 0.0, 0
        steps, last = StepTracker(), wall  # a step: a token, a beam step or a whole draft round, as the pump counts
        began: dict[int, float] = {}  # thread -> when its collection began

        def collecting(phase: str, info: dict[str, int]) -> None:
            thread = threading.get_ident()
            if phase == "start":
                began[thread] = time.perf_counter()
            elif thread in began:
                self.gc_s += time.perf_counter() - began.pop(thread)
                self.gc_full += info["generation"] == 2

        gc.callbacks.append(collecting)
        unpinned = pin_to({self.pin}) if self.pin is not None else None
        threads = None
        if unpinned is not None:
            import torch

            # A pinned decoder decodes on one thread: a thread team that torch starts from it now would share its
            # one CPU (affinity is inherited), and a parallel op would then run its threads by turns on it. On
            # two cores that took the app's pinned greedy runs to 1.1 tok/s from 22.
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
        try:
            for i, event in enumerate(events):
                yield event
                now = time.perf_counter()
                if i == 0:
                    cpu, wall, synced, switches, migrations = marks()
                    ui, last, process = ui_time(), wall, time.process_time()
                    self.start_cpu = current_cpu()
                self.tokens += isinstance(event, TokenEmitted)
                if steps.closes_step(event):
                    self.gaps.append(now - last)
                    last = now
        finally:
            self.cpu_s, self.wall_s = time.thread_time() - cpu, time.perf_counter() - wall
            self.process_cpu_s = time.process_time() - process
            self.ui_cpu_s = ui_time() - ui if self.ui_clock is not None else None
            self.synced_s = getattr(_SYNCED, "s", 0.0) - synced
            switches_now, migrations_now = thread_switches()
            self.switches = switches_now - switches
            self.migrations = None if migrations is None or migrations_now is None else migrations_now - migrations
            gc.callbacks.remove(collecting)
            if unpinned is not None:
                pin_to(unpinned)
            if threads is not None:
                import torch

                torch.set_num_threads(threads)

    @property
    def ui_decoding(self) -> float | None:
        """The UI thread's CPU time while the run decoded, as a share of one core (None: no UI thread watched)."""
        return self.ui_cpu_s / self.wall_s if self.ui_cpu_s is not None and self.wall_s else None

    @property
    def others(self) -> float:
        """The CPU time of the process's other threads (not the decoder's, not the UI's) while the run decoded, as a
        share of one core."""
        if not self.wall_s:
            return 0.0
        return max(0.0, self.process_cpu_s - self.cpu_s - (self.ui_cpu_s or 0.0)) / self.wall_s

    @property
    def collecting(self) -> float:
        """The share of the run's wall time spent in garbage collections (any thread's)."""
        return self.gc_s / self.wall_s if self.wall_s else 0.0

    @property
    def waiting(self) -> float:
        """The share of the run's wall time the decoding thread was not running."""
        return 1 - self.cpu_s / self.wall_s if self.wall_s else 0.0

    @property
    def cpu_per_token_us(self) -> float:
        """The decoding thread's CPU time per token: grown in the app, the decoder did more work there (on a
        GPU its waits for the device spin, so they count too, alike on both sides)."""
        return self.cpu_s / self.tokens * 1e6 if self.tokens else 0.0

    @property
    def host_per_token_us(self) -> float:
        """The decoding thread's wall time a token outside its waits for the device's copy: the host's own step."""
        return (self.wall_s - self.synced_s) / self.tokens * 1e6 if self.tokens else 0.0

    @property
    def synced_per_token_us(self) -> float:
        """Its wait for the device's copy a token (on a CPU the copy itself: about nothing)."""
        return self.synced_s / self.tokens * 1e6 if self.tokens else 0.0

    @property
    def switches_per_token(self) -> float:
        return self.switches / self.tokens if self.tokens else 0.0

    @property
    def migrations_per_token(self) -> float | None:
        return None if self.migrations is None or not self.tokens else self.migrations / self.tokens

    @property
    def stalled(self) -> float:
        """The share of the run's wall time in stalls: what the steps longer than three times their median
        took past that median. A loss in stalls is something that holds the decoder now and then (a paint, a
        garbage collection); a loss spread over every step is contention or more work per step."""
        gaps = [g for g in self.gaps if g > 0]
        if not gaps or not self.wall_s:
            return 0.0
        typical = statistics.median(gaps)
        return sum(g - typical for g in gaps if g > 3 * typical) / self.wall_s


def headless(lm: LoadedModel, prompt: str, config: DecodeConfig, clock: DecoderClock | None = None) -> Finished:
    final = None
    events = Run(lm, prompt, config).events()
    for event in (clock or DecoderClock()).watch(events):  # watched on both sides alike
        final = event
    assert isinstance(final, Finished)
    return final


_LOADED: list[LoadedModel] = []


def python_bound(lm: LoadedModel, layers: int | None = None) -> LoadedModel:
    """A CPU stand-in for decoding on a GPU: SmolLM2's tokenizer and depth, random weights 64 wide, one thread.

    On a GPU the plain step's time is the Python that launches the kernels, not the arithmetic, so the
    decoder thread holds the interpreter lock nearly all the time and whatever the UI thread does with
    the lock comes out of decoding. A model this narrow makes the same true on the CPU: its 30 layers
    cost a few microseconds of arithmetic each, and one torch thread leaves the other core to the UI, as
    a GPU machine's spare cores do.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.set_num_threads(1)
    config = AutoConfig.for_model("llama", vocab_size=lm.model.config.vocab_size, hidden_size=64,
                                  intermediate_size=128, num_hidden_layers=layers or lm.model.config.num_hidden_layers,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                                  tie_word_embeddings=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    return dataclasses.replace(lm, model=model, device=torch.device("cpu"), dtype=torch.float32)


DEVICE_WAIT_S = 0.0033  # an H100's SmolLM2 step replayed as a CUDA graph: 3.5 ms in all (BENCHMARKS.md)
TRANSCRIPT_TOKENS = 256  # the latency part decodes 2 x 128
CONTEXT = 12  # tokens of context that pick the transcript's next token


def transcripts(lm: LoadedModel) -> dict[tuple[int, ...], int]:
    """What the real model decodes greedily after every context of every benchmark prompt, as a table.

    Keys are the last ``CONTEXT`` tokens (the prompt's included), values the next token. Recorded once
    per machine (about a minute on 2 cores) and kept in a file, since each app child needs it.
    """
    import hashlib
    import tempfile

    key = hashlib.sha256(json.dumps([PROMPTS, TRANSCRIPT_TOKENS, lm.name]).encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"decode-tui-transcripts-{key}.json"
    if not path.exists():
        sequences = []
        for prompt in PROMPTS.values():
            config = DecodeConfig(max_new_tokens=TRANSCRIPT_TOKENS)
            final = headless(dataclasses.replace(lm, eos_token_ids=frozenset()), prompt, config)
            sequences.append([*final.prompt_token_ids, *final.token_ids])
        path.write_text(json.dumps(sequences))
    table: dict[tuple[int, ...], int] = {}
    for ids in json.loads(path.read_text()):
        for q in range(CONTEXT, len(ids) - 1):
            table.setdefault(tuple(ids[q - CONTEXT + 1:q + 1]), ids[q + 1])
    return table


def device_wait(lm: LoadedModel) -> LoadedModel:
    """A CPU stand-in for decoding on a GPU's captured graphs: the real model's text, at a GPU's pace.

    On the CUDA-graph path a step launches one graph and then waits for the device, about 3.5 ms for
    SmolLM2 on an H100, without holding the interpreter lock; when the wait ends, the decoder thread
    must get the lock back from whoever holds it, the UI thread included. Here one narrow random layer
    stands for the little Python a replayed step runs, and a forward hook sleeps ``DEVICE_WAIT_S`` (a
    sleep gives the lock up and takes it back, as waiting for the device does). The same hook steers
    the logits to what the real model decoded greedily in the same context (:func:`transcripts`), so
    greedy shows the real text and PLD copies and accepts what it would on the real model: the events
    per second the UI must keep up with are a GPU's. Beam search (several rows) is not steered.
    What it measures is the app's share of the lock at a GPU's step rate, not the GPU.
    """
    import weakref

    import torch

    table = transcripts(lm)
    narrow = python_bound(lm, layers=1)
    seen: weakref.WeakKeyDictionary[Any, list[int]] = weakref.WeakKeyDictionary()  # cache -> its tokens

    def hook(module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
        time.sleep(DEVICE_WAIT_S)
        cache, new = kwargs["cache"], kwargs["input_ids"]
        if new.shape[0] != 1:
            return output
        length = cache.get_seq_length()
        ids = seen.get(cache, [])[:length - new.shape[1]] + new[0].tolist()  # [:past]: after a rollback too
        seen[cache] = ids
        logits = output.logits  # [1, keep, V], for the last keep positions
        for j in range(logits.shape[1]):
            q = length - logits.shape[1] + j
            nxt = table.get(tuple(ids[q - CONTEXT + 1:q + 1]))
            if nxt is not None:
                logits[0, j, nxt] = logits[0, j].max() + 5.0  # first by a margin; the others keep their order
        return output

    with torch.no_grad():
        narrow.model.lm_head.weight = torch.nn.Parameter(0.02 * torch.randn_like(narrow.model.lm_head.weight))
    narrow.model.register_forward_hook(hook, with_kwargs=True)
    return narrow


PROXY: dict[str, Callable[[LoadedModel], LoadedModel]] = {"none": lambda lm: lm, "python-bound": python_bound,
                                                          "device-wait": device_wait}


def proxy_name(value: str) -> str:
    """``--proxy``: one of PROXY, or ``python-bound:N`` (N layers: fewer decode faster, at a GPU's event rate)."""
    name, _, layers = value.partition(":")
    if name not in PROXY or (layers and (name != "python-bound" or not layers.isdigit() or int(layers) < 1)):
        raise argparse.ArgumentTypeError(f"{value!r}: one of {', '.join(sorted(PROXY))}, or python-bound:N")
    return value


def embedded(proxy: str = "none") -> LoadedModel:
    """The embedded model (or its stand-in) with EOS disabled, so both sides decode the same number of tokens."""
    lm = load_model(resolve("smollm2"), device="cpu" if proxy != "none" else "auto", dtype="auto")
    name, _, layers = proxy.partition(":")
    stand_in = python_bound(lm, int(layers)) if layers else PROXY[name](lm)
    return dataclasses.replace(stand_in, eos_token_ids=frozenset())


def _model_in_this_thread(proxy: str = "none") -> LoadedModel:
    """The model, loaded on first use by the calling (decoder) thread."""
    if not _LOADED:
        _LOADED.append(embedded(proxy))
    return _LOADED[0]


@dataclasses.dataclass
class AppRun:
    """A timed run in the app: its result and where the time went."""

    finished: Finished
    decoder_waiting: float  # see DecoderClock.waiting
    decoder_cpu_per_token_us: float  # see DecoderClock.cpu_per_token_us
    decoder_stalled: float  # see DecoderClock.stalled
    collecting: float  # see DecoderClock.collecting
    gc_full: int  # see DecoderClock.gc_full
    ui_cpu: float  # the UI thread's CPU time over the run's wall time, from the restart key to the end of the run
    paint_hz: float  # how often the pacer let the app paint, at the run's end
    host_per_token_us: float  # see DecoderClock.host_per_token_us
    synced_per_token_us: float  # see DecoderClock.synced_per_token_us
    switches_per_token: float  # see DecoderClock.switches
    migrations_per_token: float | None  # see DecoderClock.migrations
    ui_decoding: float | None  # see DecoderClock.ui_decoding
    others: float  # see DecoderClock.others
    start_cpu: int | None  # see DecoderClock.start_cpu


def in_app(prompt: str, config: DecodeConfig, runs: int = 1, press_every: float | None = None, proxy: str = "none",
           switch_interval_s: float | None = None, show_start_first: bool = True, pin: bool = False,
           ) -> tuple[list[AppRun], list[float], list[float]]:
    """``runs`` runs in one app, each started with the restart key's action after a first, untimed run.

    The first run starts while the app is still mounting (styles, layout, the first full paint) and
    its model may still be warming up; a user sees that once per session, so it is not timed. The
    timed runs are what ``r`` gives. Returns them and, when pressing keys, the handler and round-trip
    latencies. ``pin``: the decoding thread on a CPU of its own (:func:`decoder_cpu`), the UI thread on the others.
    """
    clock = DecoderClock(ui_clock=time.pthread_getcpuclockid(threading.main_thread().ident or 0))
    if pin:
        clock.pin = decoder_cpu()
        pin_to(os.sched_getaffinity(0) - {clock.pin} or {clock.pin})  # this (UI) thread; threads it starts inherit it

    def source(settings: Settings, live: LiveParams) -> EventSource:
        return lambda: clock.watch(Run(_model_in_this_thread(proxy), settings.prompt, settings.config,
                                       live=live).events())

    app = DecodeApp(Settings(prompt=prompt, config=config), source)
    if switch_interval_s is not None:
        app.switch_interval_s = switch_interval_s
    app.show_start_first = show_start_first
    handled: list[float] = []
    original = app.action_toggle_boundaries

    def timed_toggle() -> None:
        original()
        handled.append(time.perf_counter())

    app.action_toggle_boundaries = timed_toggle  # type: ignore[method-assign]
    painted: list[float] = []
    pane_line = TextPane.render_line

    def timed_line(pane: TextPane, y: int) -> Any:  # the compositor asks for the pane's lines when it paints
        painted.append(time.perf_counter())
        return pane_line(pane, y)

    TextPane.render_line = timed_line  # type: ignore[method-assign,assignment]
    handler_s: list[float] = []
    round_trip_s: list[float] = []

    async def one_run(timed: bool = True) -> Finished:
        sent: list[float] = []
        before = len(handled)
        while app.view.finished is None:
            # Keys are pressed once the pane shows text: before that, toggling boundaries changes nothing
            # on screen, so nothing is repainted and the "paint" timed would be the next token's.
            if timed and press_every is not None and app.query_one(TextPane).pieces:
                key = events.Key("b", "b")
                key.set_sender(app)
                sent.append(time.perf_counter())
                # What the terminal driver does with a key read from stdin. Not ``pilot.press``: it then
                # waits for every widget's queue to empty, which never happens while a run streams.
                app._driver.send_message(key)  # type: ignore[union-attr]
                await asyncio.sleep(press_every)
            else:
                await asyncio.sleep(0.05)  # not pilot.pause, for the same reason
        for at, done in zip(sent, handled[before:], strict=False):  # keys are handled in order
            handler_s.append(done - at)
            paint = next((t for t in painted if t >= done), None)
            if paint is not None:
                round_trip_s.append(paint - at)
        return app.view.finished

    async def drive() -> list[AppRun]:
        async with app.run_test(size=SIZE):
            if os.environ.get(COLOURING_ENV) == "probability":  # the text coloured by probability (the v key)
                app.query_one(TextPane).colour_by("probability")
            await one_run(timed=False)  # the app mounts meanwhile
            results = []
            for _ in range(runs):
                ui_cpu, wall = time.thread_time(), time.perf_counter()
                app.action_restart()
                finished = await one_run()
                ui_cpu, wall = time.thread_time() - ui_cpu, time.perf_counter() - wall
                assert app.pump is not None
                app.pump.finished.wait()  # the clock is read when the decoder's generator closes
                results.append(AppRun(finished, clock.waiting, clock.cpu_per_token_us, clock.stalled,
                                      clock.collecting, clock.gc_full, ui_cpu / wall, app.pacer.hz,
                                      clock.host_per_token_us, clock.synced_per_token_us, clock.switches_per_token,
                                      clock.migrations_per_token, clock.ui_decoding, clock.others,
                                      clock.start_cpu))
            return results

    try:
        return asyncio.run(drive()), handler_s, round_trip_s
    finally:
        TextPane.render_line = pane_line  # type: ignore[method-assign]


COLOURING_ENV = "DECODE_TUI_BENCH_COLOURING"


def app_child(mode: str, prompt_name: str, new_tokens: int, runs: int, proxy: str,
              switch_interval_s: float | None = None, show_start_first: bool = True, pin: bool = False) -> None:
    """In the child process: ``runs`` timed runs in one app; tokens/s as JSON on stdout."""
    config = DecodeConfig(mode=mode, max_new_tokens=new_tokens)
    results, _, _ = in_app(PROMPTS[prompt_name], config, runs=runs, proxy=proxy, switch_interval_s=switch_interval_s,
                           show_start_first=show_start_first, pin=pin)
    print(json.dumps([{"tokens_per_s": r.finished.tokens_per_s, **{
        k: v for k, v in dataclasses.asdict(r).items() if k != "finished"}} for r in results]))


def child_rows(kind: str, mode: str, prompt_name: str, new_tokens: int, runs: int, proxy: str,
               *options: str) -> list[dict[str, Any]]:
    """``runs`` timed runs in a child process of this script (``kind``: app or headless); the rows it prints."""
    done = subprocess.run([sys.executable, __file__, f"--{kind}-child", mode, prompt_name, str(new_tokens),
                           str(runs), "--proxy", proxy, *options], capture_output=True, text=True, check=True)
    rows: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return rows


def app_rates(mode: str, prompt_name: str, new_tokens: int, runs: int, proxy: str = "none",
              switch_interval_s: float | None = None, show_start_first: bool = True, pin: bool = False,
              ) -> list[dict[str, Any]]:
    switch = ["--switch-interval", str(switch_interval_s)] if switch_interval_s is not None else []
    start = [] if show_start_first else ["--start-at-once"]
    pinned = ["--pin"] if pin else []
    return child_rows("app", mode, prompt_name, new_tokens, runs, proxy, *switch, *start, *pinned)


def timed_headless(lm: LoadedModel, prompt: str, config: DecodeConfig, runs: int, pin: bool = False
                   ) -> list[tuple[float, DecoderClock]]:
    """``runs`` headless runs, each with its clock (``pin``: the decoding thread on a CPU of its own)."""
    timed = []
    for _ in range(runs):
        clock = DecoderClock(pin=decoder_cpu() if pin else None)
        timed.append((headless(lm, prompt, config, clock).tokens_per_s, clock))
    return timed


def headless_child(mode: str, prompt_name: str, new_tokens: int, runs: int, proxy: str, pin: bool = False) -> None:
    """In a child process: headless decoding in a process as young as the app's. The app's side of a round is a
    process of its own (it loads the model, decodes one untimed run, then the timed ones), while the headless
    side decodes in this long-lived one; this child lives the app's life without the app, so that a process's
    age (its caches, allocator, interpreter, the device's clocks after a load) is told apart from the app's cost."""
    lm = embedded(proxy)
    config = DecodeConfig(mode=mode, max_new_tokens=new_tokens)
    headless(lm, PROMPTS[prompt_name], config)  # untimed, as the app's first run is
    print(json.dumps([{"tokens_per_s": rate, "host_per_token_us": clock.host_per_token_us,
                       "synced_per_token_us": clock.synced_per_token_us, "cpu_per_token_us": clock.cpu_per_token_us,
                       "others": clock.others, "start_cpu": clock.start_cpu}
                      for rate, clock in timed_headless(lm, PROMPTS[prompt_name], config, runs, pin)]))


def ratio_interval(headless: list[float], app: list[float], draws: int = 10_000) -> tuple[float, float]:
    """A bootstrap 95 % interval for median(app) / median(headless).

    Single runs on a shared machine vary by as much as the effect measured, so the ratio is given
    with the spread that resampling the runs shows, not as a bare number.
    """
    rng = random.Random(0)
    ratios = sorted(statistics.median(rng.choices(app, k=len(app))) /
                    statistics.median(rng.choices(headless, k=len(headless))) for _ in range(draws))
    return ratios[int(0.025 * draws)], ratios[int(0.975 * draws) - 1]


def throughput(lm: LoadedModel, prompt_name: str, mode: str, new_tokens: int, repeats: int, proxy: str = "none",
               switch_interval_s: float | None = None, show_start_first: bool = True, per_round: int = 2,
               pin: bool = False, fresh_headless: bool = False) -> dict[str, Any]:
    """Headless and in-app tokens/s on one prompt, ``repeats`` alternating rounds of ``per_round`` runs a side.

    ``switch_interval_s``: the app's interpreter switch interval, if not its own (``SWITCH_INTERVAL_S``).
    ``show_start_first``: False, the control: each run decodes at once, while the app paints its start.
    ``pin``: the decoding thread on a CPU of its own on both sides (in the app the UI thread on the others): the
    control for the decoder's moves between CPUs.
    ``fresh_headless``: the control for the app's process being young: each round also decodes headlessly in a
    child process that lives as the app's does (:func:`headless_child`), and the app is compared with that too.
    Each round's own ratio is kept too: on the H200 the headless runs of one round went 279 tok/s and of the
    next 317-321, the app's 266-279 in both, so the pooled ratio's interval (0.84-1.00) said more about that
    drift than about the app; a ratio per round, its two sides measured back to back, shows which it was.
    """
    config = DecodeConfig(mode=mode, max_new_tokens=new_tokens)
    headless(lm, PROMPTS[prompt_name], config)  # warm-up
    ours: list[float] = []
    clocks: list[DecoderClock] = []
    app_runs: list[dict[str, Any]] = []
    round_ratios: list[float] = []
    fresh_ratios: list[float] = []
    fresh_runs: list[dict[str, Any]] = []
    for _ in range(repeats):  # alternate, so a drift in machine speed hits both sides alike
        timed = timed_headless(lm, PROMPTS[prompt_name], config, per_round, pin)
        mine = [rate for rate, _ in timed]
        clocks += [clock for _, clock in timed]
        theirs = app_rates(mode, prompt_name, new_tokens, per_round, proxy, switch_interval_s, show_start_first, pin)
        round_ratios.append(statistics.median(r["tokens_per_s"] for r in theirs) / statistics.median(mine))
        if fresh_headless:
            young_runs = child_rows("headless", mode, prompt_name, new_tokens, per_round, proxy,
                                    *(["--pin"] if pin else []))
            young = [r["tokens_per_s"] for r in young_runs]
            fresh_ratios.append(statistics.median(r["tokens_per_s"] for r in theirs) / statistics.median(young))
            fresh_runs += young_runs
        ours += mine
        app_runs += theirs
    app = [r["tokens_per_s"] for r in app_runs]
    row: dict[str, Any] = {"headless_tok_s": statistics.median(ours), "app_tok_s": statistics.median(app)}
    row["ratio"] = row["app_tok_s"] / row["headless_tok_s"]
    row["ratio_95ci"] = ratio_interval(ours, app)
    row["headless_runs"], row["app_runs"] = sorted(ours), sorted(app)
    # Run by run, in the order run (tok/s, the host's step and the wait for the device's copy a token, us): when one
    # side's runs fall in two groups (the H200's headless greedy: 274-276 tok/s in one round, 306-321 in the next),
    # these say whether the host or the device was the slower in the slow group.
    # Then the other threads' share of a core and the CPU the decoder started on (DecoderClock.others, start_cpu).
    row["headless_by_run"] = [[t, c.host_per_token_us, c.synced_per_token_us, c.others, c.start_cpu]
                              for t, c in zip(ours, clocks, strict=True)]
    row["app_by_run"] = by_run(app_runs)
    row["round_ratios"] = round_ratios
    if fresh_runs:
        fresh = [r["tokens_per_s"] for r in fresh_runs]
        row["fresh_headless_tok_s"] = statistics.median(fresh)
        row["fresh_headless_runs"] = sorted(fresh)
        row["app_over_fresh_headless"] = row["app_tok_s"] / row["fresh_headless_tok_s"]
        row["app_over_fresh_headless_95ci"] = ratio_interval(fresh, app)
        row["fresh_round_ratios"] = fresh_ratios
        # As headless_by_run and app_by_run: whether a young process's slower runs are its host's step or the device's.
        row["fresh_by_run"] = by_run(fresh_runs)
        row["fresh_host_per_token_us"] = statistics.median(r["host_per_token_us"] for r in fresh_runs)
        row["fresh_synced_per_token_us"] = statistics.median(r["synced_per_token_us"] for r in fresh_runs)
        row["fresh_cpu_per_token_us"] = statistics.median(r["cpu_per_token_us"] for r in fresh_runs)
    # Where the app's time went (medians): see DecoderClock and AppRun.
    row["headless_decoder_waiting"] = statistics.median(c.waiting for c in clocks)
    row["headless_decoder_cpu_per_token_us"] = statistics.median(c.cpu_per_token_us for c in clocks)
    row["headless_decoder_stalled"] = statistics.median(c.stalled for c in clocks)
    row["headless_collecting"] = statistics.median(c.collecting for c in clocks)
    row["headless_gc_full"] = statistics.median(c.gc_full for c in clocks)
    row["headless_host_per_token_us"] = statistics.median(c.host_per_token_us for c in clocks)
    row["headless_synced_per_token_us"] = statistics.median(c.synced_per_token_us for c in clocks)
    row["headless_switches_per_token"] = statistics.median(c.switches_per_token for c in clocks)
    migrations = [c.migrations_per_token for c in clocks if c.migrations_per_token is not None]
    row["headless_migrations_per_token"] = statistics.median(migrations) if migrations else None
    row["headless_others"] = statistics.median(c.others for c in clocks)
    for key in ("decoder_waiting", "decoder_cpu_per_token_us", "decoder_stalled", "collecting", "gc_full", "ui_cpu",
                "paint_hz", "host_per_token_us", "synced_per_token_us", "switches_per_token", "migrations_per_token",
                "ui_decoding", "others"):
        values = [r[key] for r in app_runs if r.get(key) is not None]
        row[f"app_{key}"] = statistics.median(values) if values else None
    return row


def by_run(rows: list[dict[str, Any]]) -> list[list[Any]]:
    """A child's runs (the app's, or a young headless process's) as the rows' ``*_by_run`` columns."""
    return [[r["tokens_per_s"], r["host_per_token_us"], r["synced_per_token_us"], r.get("others"), r.get("start_cpu")]
            for r in rows]


def summary(row: dict[str, Any]) -> str:
    """One throughput row in a line: the ratio with its interval, and where the app's time went."""
    low, high = row["ratio_95ci"]
    rounds = ", ".join(f"{r:.3f}" for r in row.get("round_ratios", []))
    young = ""
    if "fresh_headless_tok_s" in row:
        young_low, young_high = row["app_over_fresh_headless_95ci"]
        young = (f"headless in a process as young as the app's {row['fresh_headless_tok_s']:.2f} tok/s, the app "
                 f"{row['app_over_fresh_headless']:.3f} of it (95% interval {young_low:.2f}-{young_high:.2f}; by "
                 f"round {', '.join(f'{r:.3f}' for r in row['fresh_round_ratios'])}; its decoder's CPU "
                 f"{row['fresh_cpu_per_token_us']:.0f} us a token, its host step "
                 f"{row['fresh_host_per_token_us']:.0f} us, its wait for the device's copy "
                 f"{row['fresh_synced_per_token_us']:.0f} us); ")
    return (young + f"headless {row['headless_tok_s']:6.2f} tok/s  app {row['app_tok_s']:6.2f} tok/s  ratio "
            f"{row['ratio']:.3f} (95% interval {low:.2f}-{high:.2f}; by round {rounds}); decoder waiting "
            f"{row['headless_decoder_waiting']:.1%} headless, {row['app_decoder_waiting']:.1%} in the app; "
            f"decoder CPU a token {row['headless_decoder_cpu_per_token_us']:.0f} us headless, "
            f"{row['app_decoder_cpu_per_token_us']:.0f} us in the app; stalled {row['headless_decoder_stalled']:.1%}"
            f" headless, {row['app_decoder_stalled']:.1%} in the app; in garbage collections "
            f"{row['headless_collecting']:.1%} headless ({row['headless_gc_full']:g} full a run), "
            f"{row['app_collecting']:.1%} in the app ({row['app_gc_full']:g} full); "
            f"UI thread {row['app_ui_cpu']:.1%} of a core from the restart on, {_share(row.get('app_ui_decoding'))}"
            f" while decoding, painting at {row['app_paint_hz']:.1f} Hz; "
            f"a token's host step {row['headless_host_per_token_us']:.0f} us headless, "
            f"{row['app_host_per_token_us']:.0f} us in the app, its wait for the device's copy "
            f"{row['headless_synced_per_token_us']:.0f} / {row['app_synced_per_token_us']:.0f} us; the decoder's "
            f"context switches a token {row['headless_switches_per_token']:.2f} / {row['app_switches_per_token']:.2f}, "
            f"moves to another CPU {_maybe(row['headless_migrations_per_token'])} / "
            f"{_maybe(row['app_migrations_per_token'])}; the other threads {row['headless_others']:.1%} / "
            f"{_share(row.get('app_others'))} of a core")


def _maybe(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f}"


def _share(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--latency-only", action="store_true", help="skip the throughput comparison")
    parser.add_argument("--proxy", type=proxy_name, default="none",
                        help="python-bound: a narrow random model on one thread, standing in for a GPU's plain path "
                        "(python-bound:N: N layers, 8 decoding at about a GPU's event rate); device-wait: one narrow "
                        "layer and a 3.3 ms wait without the interpreter lock a step, standing in for a GPU's "
                        "captured graphs")
    parser.add_argument("--start-at-once", action="store_true", help="the control: the app's runs decode at once, "
                        "while it paints their start (by default a run waits until its start is on screen)")
    parser.add_argument("--cases", help="comma-separated MODE/PROMPT rows to run (default: every row)")
    parser.add_argument("--pin", action="store_true", help="the control: the decoding thread on a CPU of its own on "
                        "both sides, the UI thread on the others (for what the decoder's moves between CPUs cost)")
    parser.add_argument("--switch-interval", type=float, help="the app's interpreter switch interval in seconds "
                        "(default: the app's own; Python's is 0.005)")
    parser.add_argument("--colouring", choices=["provenance", "probability"], default="provenance",
                        help="how the app colours the text while it is timed (probability: the v key)")
    parser.add_argument("--fresh-headless", action="store_true", help="the control for the app's process being "
                        "young: each round also decodes headlessly in a child process that lives as the app's does")
    parser.add_argument("--app-child", nargs=4, metavar=("MODE", "PROMPT", "TOKENS", "RUNS"), help=argparse.SUPPRESS)
    parser.add_argument("--headless-child", nargs=4, metavar=("MODE", "PROMPT", "TOKENS", "RUNS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ[COLOURING_ENV] = args.colouring  # the app's child processes read it
    if args.headless_child:
        mode, prompt_name, tokens, runs = args.headless_child
        headless_child(mode, prompt_name, int(tokens), int(runs), args.proxy, args.pin)
        return
    if args.app_child:
        mode, prompt_name, tokens, runs = args.app_child
        app_child(mode, prompt_name, int(tokens), int(runs), args.proxy, args.switch_interval,
                  not args.start_at_once, args.pin)
        return

    pull("smollm2")
    lm = embedded(args.proxy)
    results: dict[str, Any] = {"machine": machine(), "device": str(lm.device), "proxy": args.proxy,
                               "new_tokens": args.new_tokens,
                               "throughput": {}}
    cases = [] if args.latency_only else [(name, "greedy") for name in PROMPTS] + [("summarise", "pld")]
    if args.cases:
        wanted = [tuple(case.split("/")) for case in args.cases.split(",")]
        cases = [(name, mode) for mode, name in wanted]
    for name, mode in cases:
        row = throughput(lm, name, mode, args.new_tokens, args.repeats, args.proxy, args.switch_interval,
                         not args.start_at_once, pin=args.pin, fresh_headless=args.fresh_headless)
        results["throughput"][f"{mode}/{name}"] = row
        print(f"{mode:>6} {name:>10}: {summary(row)}", flush=True)

    config = DecodeConfig(max_new_tokens=2 * args.new_tokens)
    _LOADED.append(lm)  # the app below runs in this process, on the model already loaded
    _, handler_s, round_trip_s = in_app(PROMPTS["open-ended"], config, press_every=0.15, proxy=args.proxy)
    handler_s.sort()
    round_trip_s.sort()
    if not handler_s or not round_trip_s:  # a run too short for a key to be pressed once its text showed
        print("key latency: no key was pressed and painted during the run; pass more --new-tokens", flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
        return
    latency = {"presses": len(handler_s), "handler_median_ms": 1000 * statistics.median(handler_s),
               "handler_max_ms": 1000 * handler_s[-1], "paint_median_ms": 1000 * statistics.median(round_trip_s),
               "paint_max_ms": 1000 * round_trip_s[-1]}
    results["key_latency"] = latency
    print(f"key latency over {latency['presses']} presses while decoding: handled after median "
          f"{latency['handler_median_ms']:.1f} ms (max {latency['handler_max_ms']:.1f}); painted after median "
          f"{latency['paint_median_ms']:.1f} ms (max {latency['paint_max_ms']:.1f})", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
