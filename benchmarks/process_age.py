"""Probe: does headless decoding get faster as its process ages, and is it the time or the runs that do it?

On the H200 (2026-11-27) the benchmark process's own headless greedy runs went 278-289 tok/s in one round and
326-328 in the next, a minute later, where a new process's went 275-288 each time, the app's and a young headless
process's alike (BENCHMARKS.md). The app is always a young process, so whatever makes an old one faster is most of
what the app seemed to lose. This tells two causes apart, in child processes that each load the model and decode
one untimed run, as the app does:

- ``busy``: decodes back to back until ``--seconds`` after its load, then ``--runs`` more;
- ``idle``: sleeps until ``--seconds`` after its load, then decodes ``--runs``;
- ``warmed``: as ``idle``, but keeps the device busy with large products for its last 5 s of sleep, so that a
  device which slows its clocks when idle is told apart from the process: only the device has been working
  (and the host's thread that waits for it, which spins);
- ``spun``: as ``idle``, but keeps one host CPU busy in Python for those 5 s, the device idle: the host's clocks.

run as idle, busy, warmed, spun, idle, so that a drift of the machine shows as the two idle children disagreeing. If the
idle children's runs are as fast as the busy child's late ones, time alone does it (something in the background:
the kernel collapsing the heap into huge pages, say); if they are as slow as its early ones, the runs do (caches,
the allocator's pools) or the device's warmth does, which the warmed child tells apart. The beam rows of the
H200's app phase point at the device: its headless runs' wait for the device's copy fell from 456-517 us a token
in the first round to 47-84 in the second, at the same host step. Each run also records its minor page faults a
token (the first touch of new memory), the decoding thread's context switches, and where ``nvidia-smi`` answers,
the GPU's SM clock and performance state just after the run, and the blocks torch's CUDA allocator took from the
device during the run (each a cudaMalloc, which waits for the device: a pool that still grows in a young process).

On the H200 none of them sped up (290-300 tok/s in each, 2026-11-27), while the benchmark's long-lived process ran
its second rounds at 342-346: the rounds that followed the app's and a young process's runs, and not a capture of
new graphs (a row's first round, after its warm-up captured that mode's graphs, was as slow as a young process).
``--children neighbour,one-thread`` runs two more:

- ``neighbour``: five runs, then a young process beside it (a grandchild that loads the model and decodes once,
  as the app's side of a round does) while it waits, then five runs; then one run of another mode (PLD, whose
  verifications capture graphs of their own) and five runs of its own mode; then the neighbour again and five
  runs. Faster after each neighbour and slower after the capture, it is the benchmark's pattern;
- ``one-thread``: torch's thread count set to 1 after the load (as a pinned run sets it), then ``--runs`` runs.

    python benchmarks/process_age.py [--seconds 40] [--runs 10] [--mode greedy] [--proxy none|device-wait]
                                     [--children idle,busy,warmed,spun,idle | neighbour,one-thread]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def child(kind: str, seconds: float, runs: int, mode: str, proxy: str, new_tokens: int) -> None:
    from app_vs_headless import PROMPTS, DecoderClock, embedded, headless

    from decode_tui.core.params import DecodeConfig

    lm = embedded(proxy)
    loaded = time.perf_counter()
    config = DecodeConfig(mode=mode, max_new_tokens=new_tokens)
    prompt = PROMPTS["summarise"]
    headless(lm, prompt, config)  # untimed, as the app's first run is
    if kind == "once":  # a neighbour: a young process that loads the model, decodes once and ends
        return
    rows: list[dict[str, Any]] = []

    def run(phase: str = "") -> None:
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        segments = device_segments(lm.device)
        clock = DecoderClock()
        rate = headless(lm, prompt, config, clock).tokens_per_s
        rows.append({"since_load_s": time.perf_counter() - loaded, "tokens_per_s": rate,
                     "host_us": clock.host_per_token_us, "synced_us": clock.synced_per_token_us,
                     "faults_per_token": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / clock.tokens,
                     "switches_per_token": clock.switches / clock.tokens,
                     "device_mallocs": device_segments(lm.device) - segments, **device_clocks(),
                     **({"phase": phase} if phase else {})})

    if kind == "neighbour":
        for phase in ("first", "after a neighbour", "after a capture", "after a second neighbour"):
            if "neighbour" in phase:
                subprocess.run([sys.executable, __file__, "--child", "once", "--mode", mode, "--proxy", proxy,
                                "--new-tokens", "16"], capture_output=True, check=True)
            elif phase == "after a capture":
                headless(lm, prompt, DecodeConfig(mode="pld" if mode != "pld" else "beam", max_new_tokens=new_tokens))
            for _ in range(NEIGHBOUR_RUNS):
                run(phase)
        print(json.dumps(rows))
        return
    if kind == "one-thread":  # its runs at once
        import torch

        torch.set_num_threads(1)
    elif kind == "busy":
        while time.perf_counter() - loaded < seconds:
            run()
    else:
        time.sleep(max(0.0, seconds - WARM_S - (time.perf_counter() - loaded)))
        if kind == "warmed":
            keep_busy(lm.device, WARM_S)
        elif kind == "spun":
            spin(WARM_S)
        else:
            time.sleep(WARM_S)
    for _ in range(runs):
        run()
    print(json.dumps(rows))


WARM_S = 5.0
NEIGHBOUR_RUNS = 5


def keep_busy(device: Any, seconds: float) -> None:
    """Large products on ``device`` for ``seconds``: the device works, the decoding path is not touched."""
    import torch

    cuda = device.type == "cuda"
    n = 4096 if cuda else 512  # a few milliseconds a product either way
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16 if cuda else torch.float32)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(8):
            a = (a @ a).clamp_(-1, 1)
        if cuda:
            torch.cuda.synchronize(device)


def device_segments(device: Any) -> int:
    """How many blocks torch's CUDA allocator has taken from the device so far (each a cudaMalloc, which waits for
    the device): a young process whose pool still grows run by run would show them; 0 off CUDA."""
    import torch

    if device.type != "cuda":
        return 0
    return int(torch.cuda.memory_stats(device).get("segment.all.allocated", 0))


def spin(seconds: float) -> None:
    """One host CPU busy for ``seconds``, in Python, the device idle."""
    end = time.perf_counter() + seconds
    total = 0
    while time.perf_counter() < end:
        total += sum(range(10_000))


def device_clocks() -> dict[str, float]:
    """The GPU's SM clock (MHz) and performance state (0 is the fastest) now, from ``nvidia-smi``; none on a
    machine without one."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,pstate", "--format=csv,noheader,nounits",
                               "-i", "0"], capture_output=True, text=True, timeout=5, check=True)
        sm, state = (part.strip() for part in done.stdout.strip().split(","))
        return {"sm_clock_mhz": float(sm), "pstate": float(state.lstrip("P"))}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


def huge_pages() -> str:
    try:
        return Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        return "unknown"


def summary(name: str, rows: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    if rows and "phase" in rows[0]:
        return phases(name, rows)

    def part(chosen: list[dict[str, float]]) -> dict[str, float]:
        return {key: statistics.median(r[key] for r in chosen) for key in chosen[0]} if chosen else {}

    late = rows[-runs:]
    early = rows[:-runs][:runs]  # the busy child's first runs (none for an idle one)
    first, last = part(early), part(late)
    text = f"{name}: "
    if early:
        text += (f"first {len(early)} runs {first['tokens_per_s']:.1f} tok/s (host {first['host_us']:.0f} us, "
                 f"faults {first['faults_per_token']:.2f} a token, device mallocs {first['device_mallocs']:.0f} "
                 "a run); ")
    text += (f"last {len(late)} runs, from {late[0]['since_load_s']:.0f} s after the load, "
             f"{last['tokens_per_s']:.1f} tok/s (host {last['host_us']:.0f} us, "
             f"faults {last['faults_per_token']:.2f} a token, switches {last['switches_per_token']:.2f}, "
             f"device mallocs {last['device_mallocs']:.0f} a run"
             + (f", SM clock {last['sm_clock_mhz']:.0f} MHz" if "sm_clock_mhz" in last else "") + ")")
    print(text, flush=True)
    return {"child": name, "early": first, "late": last, "runs": rows}


def phases(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A neighbour child's runs, phase by phase: tok/s run by run, and the host's step and the wait a token."""
    order = list(dict.fromkeys(r["phase"] for r in rows))
    parts = []
    for phase in order:
        chosen = [r for r in rows if r["phase"] == phase]
        rates = ", ".join(f"{r['tokens_per_s']:.0f}" for r in chosen)
        parts.append(f"{phase}: {rates} tok/s (host "
                     f"{statistics.median(r['host_us'] for r in chosen):.0f} us, wait "
                     f"{statistics.median(r['synced_us'] for r in chosen):.0f} us a token)")
    print(f"{name}: " + "; ".join(parts), flush=True)
    return {"child": name, "runs": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--mode", default="greedy")
    parser.add_argument("--proxy", default="none", help="as app_vs_headless.py's (device-wait: a CPU stand-in)")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--children", default="idle,busy,warmed,spun,idle",
                        help="the children, in order (also neighbour, one-thread)")
    parser.add_argument("--child", choices=["busy", "idle", "warmed", "spun", "neighbour", "one-thread", "once"],
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.seconds, args.runs, args.mode, args.proxy, args.new_tokens)
        return
    print(json.dumps({"transparent_hugepage": huge_pages()}), flush=True)
    results: list[dict[str, Any]] = []
    for name in args.children.split(","):
        done = subprocess.run([sys.executable, __file__, "--child", name, "--seconds", str(args.seconds),
                               "--runs", str(args.runs), "--mode", args.mode, "--proxy", args.proxy,
                               "--new-tokens", str(args.new_tokens)], capture_output=True, text=True, check=True)
        results.append(summary(name, json.loads(done.stdout.strip().splitlines()[-1]), args.runs))
        if args.json:
            args.json.write_text(json.dumps({"transparent_hugepage": huge_pages(), "children": results}, indent=1))


if __name__ == "__main__":
    main()
