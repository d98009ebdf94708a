"""Probe: a process that ends while the background compile's worker compiles, as the app ends it or by the interpreter.

On an H100, quitting the app while ``--background-compile`` compiled killed it ("terminate called without an
active exception", SIGABRT; SIGSEGV on SIGTERM). At the interpreter's exit a daemon thread that next takes the
interpreter lock is ended from inside whatever C++ code it is running, and Inductor's C++ does not survive that.
So an app that started a compile ends its process with ``os._exit`` once it has closed
(``decode_tui.cli.commands._run_app``). This probe checks that on the CPU, with real Inductor compiling in the
real worker (``decode_tui.core.execution.background_compile``): each child builds a random model of the embedded model's
architecture from its config, starts the worker on one decoding step's shape, waits until it compiles and then a
while longer (varied from child to child, so the exits land in different phases of the compile), and ends:

- ``app``: through ``_run_app`` with an app that has just closed with ``--code`` (0 for ``q``, 143 for SIGTERM),
  what ``decode-tui run --background-compile`` does;
- ``interpreter`` (the control): ``sys.exit``, the interpreter's own exit.

Each child compiles into an Inductor cache folder of its own, so none finds another's kernels. The parent prints
each child's exit status, whether it aborted, and the seconds from the app's end to the process's.

    python benchmarks/exit_mid_compile.py [--children 8] [--code 0] [--ends app,interpreter] [--device cuda]

tests/test_background_compile.py runs three of its children on every CI run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

LAYERS = 12  # enough for a compile of 15-30 s on two cores, so that the exits land inside it


def child(end: str, delay: float, code: int, device: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from decode_tui.core.execution import background_compile

    config = AutoConfig.for_model("llama", vocab_size=2048, hidden_size=256, intermediate_size=512,
                                  num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(device).eval()
    background_compile.start(model)
    background_compile.ask(model, (64, 1, 1, 1))  # a one-token step over a 64-position cache, one row
    while True:
        now = background_compile.progress(model)
        if now is not None and now.failure is not None:  # no C++ compiler, say: nothing to probe
            sys.exit(f"the compile failed: {now.failure}")
        if now is not None and (now.compiling or now.compiled):
            break
        time.sleep(0.01)
    time.sleep(delay)
    now = background_compile.progress(model)
    assert now is not None
    print(f"ending {delay:.2f} s into the compile, still compiling: {now.compiling}", flush=True)
    if end == "interpreter":
        sys.exit(code)

    import typer

    from decode_tui.cli import commands

    class ClosedApp:  # the app has closed (q, or SIGTERM's 143): what _run_app does next is what is probed
        pump = None
        error = None

        def run(self) -> int:
            return code

    commands.need_terminal = lambda command: None
    print(f"app closed at {time.time():.3f}", flush=True)
    try:
        commands._run_app(ClosedApp())
    except typer.Exit:  # what _run_app does where no compile thread was started: the check's failure
        sys.exit("the app's process ended through the interpreter's exit")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=8, help="children a way of ending")
    parser.add_argument("--code", type=int, default=0, help="the app's exit status: 0 (q) or 143 (SIGTERM)")
    parser.add_argument("--ends", default="app,interpreter", help="ways of ending, alternated child by child")
    parser.add_argument("--first-delay", type=float, default=0.25, help="seconds into the compile the first child ends")
    parser.add_argument("--step", type=float, default=2.0, help="seconds later each next child ends")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (a model in bf16, Triton kernels)")
    parser.add_argument("--child", nargs=2, metavar=("END", "DELAY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], float(args.child[1]), args.code, args.device)
        return
    ends = args.ends.split(",")
    tally: dict[str, list[int]] = {end: [0, 0] for end in ends}  # aborted, children
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; a {LAYERS}-layer Llama compiled by Inductor "
          f"on {args.device}; the app's status {args.code}")
    for i in range(args.children):
        delay = args.first_delay + args.step * i
        for end in ends:
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
                started = time.time()
                command = [sys.executable, __file__, "--code", str(args.code), "--device", args.device,
                           "--child", end, str(delay)]
                done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
                ended = time.time()
            out = done.stdout + done.stderr
            aborted = done.returncode < 0 or done.returncode == 134 or "terminate called" in out
            closed = [float(line.split()[-1]) for line in done.stdout.splitlines() if line.startswith("app closed")]
            after = f", ended {ended - closed[0]:.2f} s after the app closed" if closed else ""
            said = next((line for line in done.stdout.splitlines() if line.startswith("ending")), "did not start")
            tally[end][0] += aborted
            tally[end][1] += 1
            print(f"{end:12} {said}: exit {done.returncode}{' ABORTED' if aborted else ''}{after}"
                  f" ({ended - started:.1f} s in all)", flush=True)
    for end, (aborts, children) in tally.items():
        print(f"{end}: {aborts} of {children} aborted")


if __name__ == "__main__":
    main()
