"""Benchmark: ``decode-tui serve`` with tabs in a real browser (headless Chromium, Debian's package).

Three figures, each round alternating one tab alone with ``--tabs`` tabs at once, on a warm server (the first round
is a warm-up and is not counted):

- **the start screen**: from ``page.goto`` to the list of lessons in the page's terminal (read from xterm.js's DOM
  rows, as tests/test_browser.py does);
- **a replay session's memory**: the peak RSS of the process playing the race's recording, sampled while it plays,
  and whether any session process has torch mapped (it must not: a replay needs no model);
- **frames while every tab plays the race**: each tab's interval between the screen updates its websocket
  receives, from the moment the race shows until its three lanes have finished (the page stamps each message with
  ``performance.now()``); the median and 95th percentile over all tabs, with the server's CPU, the session
  processes', the browser's, and the memory of the server and its sessions in all (RSS, and PSS, which counts a
  page shared between the processes once).

The race's recording sends tokens at the pace it was recorded, tens of milliseconds apart, so an interval cannot be
much shorter than that: the one-tab figure is the floor. The browser runs on the same 2 cores as the server, so its
CPU is counted and printed apart.

    python benchmarks/classroom.py [--tabs 30] [--rounds 3]
    python benchmarks/classroom.py --live [--rounds 3]   # a live run's process instead: the model it loads
    python benchmarks/classroom.py --churn 20            # the server's memory while 200 tabs come and go
    python benchmarks/classroom.py --burst 30            # 30 tabs opened at once: the time to each one's list
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from playwright.sync_api import Browser, Page

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.browser import chromium, screen, shows
from tests.serving import SCRIPT, Served, open_tab, serving, websocket_url

VIEWPORT = {"width": 1500, "height": 1000}
# Every message the page's websocket receives, stamped: the frames a student's tab gets.
STAMP_FRAMES = """
window.__frames = [];
const PageWebSocket = window.WebSocket;
window.WebSocket = class extends PageWebSocket {
  constructor(...args) {
    super(...args);
    this.addEventListener('message', () => window.__frames.push(performance.now()));
  }
};
"""


def now(page: Page) -> float:
    stamp: float = page.evaluate("performance.now()")
    return stamp


def maps_torch(process: psutil.Process) -> bool:
    try:
        return any("/torch/" in m.path for m in process.memory_maps())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def cpu_s(processes: list[psutil.Process]) -> dict[int, float]:
    """Each process's CPU seconds so far, by pid (one that has ended is left out)."""
    spent = {}
    for p in processes:
        try:
            t = p.cpu_times()
            spent[p.pid] = t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return spent


def since(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two readings; a process that started in between counts from its start."""
    return sum(spent - before.get(pid, 0.0) for pid, spent in after.items())


@dataclass
class Round:
    start_screen_s: float = 0.0
    replay_rss_mb: float = 0.0
    start_rss_mb: float = 0.0
    torch_mapped: bool = False
    intervals_ms: list[float] = field(default_factory=list)
    server_cpu: float = 0.0  # cores, over the race
    sessions_cpu: float = 0.0
    browser_cpu: float = 0.0
    harness_cpu: float = 0.0
    rss_mb: float = 0.0  # server and sessions, at the race's busiest
    pss_mb: float = 0.0
    window_s: float = 0.0


def race_finished(text: str) -> bool:
    return text.count("finished ·") >= 3


def chromium_processes() -> list[psutil.Process]:
    """The browser's processes now (it starts a renderer for each page)."""
    return [p for p in psutil.Process().children(recursive=True) if "chrom" in p.name()]


def harness_processes(served: psutil.Process) -> list[psutil.Process]:
    """This script and Playwright's driver (a node process): what measuring costs."""
    return [psutil.Process(), *(p for p in psutil.Process().children() if "chrom" not in p.name()
                                and p.pid != served.pid)]


def play(browser: Browser, server: Served, tabs: int) -> Round:
    """Open ``tabs`` pages, wait for the start screen in each, choose the race in all, and measure it."""
    result, served = Round(), psutil.Process(server.process.pid)
    context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    context.add_init_script(STAMP_FRAMES)
    pages: list[Page] = []
    try:
        for _ in range(tabs):
            page = context.new_page()
            started = time.perf_counter()
            page.goto(server.url)
            if tabs == 1:  # the start screen's time, measured on a tab alone
                while "Lessons" not in screen(page):
                    page.wait_for_timeout(10)
                result.start_screen_s = time.perf_counter() - started
            pages.append(page)
        for page in pages:
            shows(page, "The race")
        if tabs == 1:
            result.start_rss_mb = max(p.memory_info().rss for p in server.sessions()) / 2**20
        for page in pages:
            page.focus(".xterm-helper-textarea")
            page.keyboard.press("End")
            page.keyboard.press("Enter")
        begun: dict[int, float] = {}
        ended: dict[int, float] = {}
        cpu_before: tuple[dict[int, float], dict[int, float], dict[int, float], dict[int, float]] | None = None
        sessions_seen: dict[int, float] = {}
        clock = time.perf_counter()
        rss = pss = peak_replay = 0.0
        deadline = time.monotonic() + 600
        while len(ended) < tabs:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(ended)} of {tabs} races finished")
            for i, page in enumerate(pages):
                if i in ended:
                    continue
                text = screen(page)
                if i not in begun and "REPLAY of race-code-edit" in text:
                    begun[i] = now(page)
                    if cpu_before is None:
                        clock = time.perf_counter()
                        browser_processes = chromium_processes()
                        cpu_before = (cpu_s([served]), cpu_s(server.sessions()), cpu_s(browser_processes),
                                      cpu_s(harness_processes(served)))
                if i in begun and race_finished(text):
                    ended[i] = now(page)
            live = [served, *server.sessions()]
            if cpu_before is not None:
                sessions_seen.update(cpu_s(live[1:]))
            try:
                rss_now = sum(p.memory_info().rss for p in live) / 2**20
                if rss_now > rss:
                    rss, pss = rss_now, sum(p.memory_full_info().pss for p in live) / 2**20
                peak_replay = max([peak_replay, *(p.memory_info().rss / 2**20 for p in live[1:])])
                result.torch_mapped |= any(maps_torch(p) for p in live[1:2])
            except psutil.NoSuchProcess:
                pass
            time.sleep(0.25)  # the pages are read a few times a second: a finer reading would cost the CPU it measures
        window = time.perf_counter() - clock
        assert cpu_before is not None
        result.window_s = window
        result.server_cpu = since(cpu_before[0], cpu_s([served])) / window
        result.sessions_cpu = since(cpu_before[1], sessions_seen) / window
        result.browser_cpu = since(cpu_before[2], cpu_s(browser_processes)) / window
        result.harness_cpu = since(cpu_before[3], cpu_s(harness_processes(served))) / window
        result.rss_mb, result.pss_mb, result.replay_rss_mb = rss, pss, peak_replay
        for i, page in enumerate(pages):
            frames: list[float] = page.evaluate("window.__frames")
            inside = [t for t in frames if begun[i] <= t <= ended[i]]
            result.intervals_ms += [b - a for a, b in itertools.pairwise(inside)]
        return result
    finally:
        context.close()
        deadline = time.monotonic() + 30
        while server.sessions() and time.monotonic() < deadline:  # every tab's process ends before the next round
            time.sleep(0.1)


def live_memory(browser: Browser, seconds: float = 40) -> float:
    """One tab's live run of the first lesson (``l`` on the start screen; the server runs with ``--live``): the
    peak RSS of its process over ``seconds``, going on to the lesson's next moment every 2 s."""
    with serving("--live", "--max-live", "1", env=dict(os.environ)) as server:
        page = browser.new_page(viewport=VIEWPORT)  # type: ignore[arg-type]
        page.goto(server.url)
        shows(page, "Lessons")
        page.focus(".xterm-helper-textarea")
        page.keyboard.press("l")
        peak, started, pressed = 0.0, time.monotonic(), time.monotonic()
        while time.monotonic() - started < seconds:
            with contextlib.suppress(psutil.NoSuchProcess):
                peak = max([peak, *(p.memory_info().rss / 2**20 for p in server.sessions())])
            if time.monotonic() - pressed > 2:
                page.keyboard.press("n")
                pressed = time.monotonic()
            time.sleep(0.25)
        page.close()
        return peak


def churn(batches: int) -> None:
    """The server's own RSS while tabs come and go: ``batches`` of 10 websocket tabs (as the page opens them, no
    browser) that each wait for the start screen and close."""
    import asyncio

    import aiohttp

    async def run() -> None:
        with serving("--max-sessions", "40", "--max-per-address", "40", env=dict(os.environ)) as server:
            served = psutil.Process(server.process.pid)
            async with aiohttp.ClientSession() as client:
                async def tab() -> None:
                    opened = await open_tab(client, server)
                    await opened.screen_says("Lessons")
                    await opened.websocket.close()

                for batch in range(batches):
                    await asyncio.gather(*(tab() for _ in range(10)))
                    await asyncio.sleep(3)  # the closed tabs' processes end
                    print(f"{(batch + 1) * 10:4d} tabs opened and closed: the server's RSS "
                          f"{served.memory_info().rss / 2**20:.1f} MB, {len(served.children())} processes left",
                          flush=True)

    asyncio.run(run())


def burst(tabs: int, rounds: int, env: dict[str, str]) -> list[list[float]]:
    """``tabs`` tabs opening at once, as a class does when told to, each round on a warm server (after a warm-up
    burst): the seconds from the burst's start to each tab's list of lessons, sorted. The tabs are websocket
    clients (tests/serving.py), not browser pages: in a classroom the browsers run on the students' machines, and
    here a browser's own CPU would share the server's two cores."""
    import asyncio

    import aiohttp

    async def one(client: aiohttp.ClientSession, server: Served, started: float) -> float:
        # The list's heading in the raw frames (Textual writes it in one run): cheaper than reading the screen as
        # the tests do, whose CPU would be taken from the server's here.
        websocket = await client.ws_connect(websocket_url(server))
        seen = b""
        while b"Lessons" not in seen:
            message = await websocket.receive(timeout=120)
            if message.type != aiohttp.WSMsgType.BINARY:
                raise SystemExit(f"a tab was closed before its list: {message.type}")
            seen = seen[-16:] + message.data
        seconds = time.perf_counter() - started
        await websocket.close()
        return seconds

    out: list[list[float]] = []
    seats = str(tabs + 1)
    ready_said = "ready for the next tabs"  # a server that keeps start screens ready says when its pool is full

    def ready(times: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while sum(ready_said in line for line in server.lines) < times and time.monotonic() < deadline:
            time.sleep(0.1)
        return sum(ready_said in line for line in server.lines) >= times

    # The server's default --ready-tabs (a commit before it has none: its control measures the server as it was).
    keeps_ready = "--ready-tabs" in subprocess.run([SCRIPT, "serve", "--help"], env={**env, "COLUMNS": "200"},
                                                   capture_output=True, text=True, check=True).stdout
    with serving("--max-sessions", seats, "--max-per-address", seats, env=env, ready_tabs=None) as server:
        if keeps_ready and not ready(1, 120):
            raise SystemExit(f"the server never said its start screens were ready: {server.lines}")
        if keeps_ready:  # what the ready start screens hold while no tab has come: memory, and CPU while idle
            waiting = server.sessions()
            cpu_before = sum(sum(p.cpu_times()[:2]) for p in waiting)
            time.sleep(10)
            idle = (sum(sum(p.cpu_times()[:2]) for p in waiting) - cpu_before) / 10
            held = [p.memory_full_info() for p in waiting]
            print(f"{len(waiting)} ready start screens: RSS {sum(m.rss for m in held) / 2**20:,.0f} MB, PSS "
                  f"{sum(m.pss for m in held) / 2**20:,.0f} MB in all; {idle:.3f} of a core while idle", flush=True)

        async def run() -> list[float]:
            async with aiohttp.ClientSession() as client:
                started = time.perf_counter()
                times = await asyncio.gather(*(one(client, server, started) for _ in range(tabs)))
            deadline = time.monotonic() + 120  # every seat free again (its closing said) before the next burst,
            # and every tab's process gone, or the ready start screens started again
            while (sum(": closed" in line for line in server.lines) < tabs * (round_ + 1)
                   or (not keeps_ready and server.sessions())
                   or (keeps_ready and sum(ready_said in line for line in server.lines) < round_ + 2)) \
                    and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            return sorted(times)

        for round_ in range(rounds + 1):
            times = asyncio.run(run())
            print(f"round {round_}{' (warm-up)' if round_ == 0 else ''}: {tabs} tabs at once, the list in "
                  f"{times[0]:.2f} s (first), {statistics.median(times):.2f} s (median), {times[-1]:.2f} s (last)",
                  flush=True)
            if round_:
                out.append(times)
    return out


def spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tabs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--live", action="store_true",
                        help="measure one live run's process instead (it loads the embedded model)")
    parser.add_argument("--churn", type=int, metavar="BATCHES",
                        help="measure the server's own memory while BATCHES of 10 tabs open and close instead")
    parser.add_argument("--burst", type=int, metavar="TABS",
                        help="measure TABS tabs opened at once instead: the time to each one's list")
    args = parser.parse_args()
    if args.burst:
        times = burst(args.burst, args.rounds, dict(os.environ))
        print(f"\n{args.burst} tabs at once, {len(times)} counted rounds, median (lowest-highest) over rounds: the "
              f"last tab's list in {spread([t[-1] for t in times])} s, the median tab's in "
              f"{spread([statistics.median(t) for t in times])} s")
        return
    if args.churn:
        churn(args.churn)
        return
    if args.live:
        with chromium() as browser:
            peaks = [live_memory(browser) for _ in range(args.rounds)]
        print(f"a live run of the first lesson, peak RSS of its process: {spread(peaks, 0)} MB")
        return
    counted: dict[int, list[Round]] = {1: [], args.tabs: []}
    seats = str(args.tabs + 1)
    with serving("--max-sessions", seats, "--max-per-address", seats, env=dict(os.environ)) as server, \
            chromium() as browser:
        for round_ in range(args.rounds + 1):
            for tabs in (1, args.tabs):
                result = play(browser, server, tabs)
                print(f"round {round_}{' (warm-up)' if round_ == 0 else ''}, {tabs:2d} tab(s): "
                      f"start screen {result.start_screen_s:.2f} s, frames median "
                      f"{statistics.median(result.intervals_ms):.0f} ms p95 "
                      f"{percentile(result.intervals_ms, 0.95):.0f} ms, server {result.server_cpu:.2f} "
                      f"cores, sessions {result.sessions_cpu:.2f}, browser {result.browser_cpu:.2f}, "
                      f"measuring {result.harness_cpu:.2f}, "
                      f"RSS {result.rss_mb:.0f} MB (PSS {result.pss_mb:.0f}), replay process "
                      f"{result.replay_rss_mb:.0f} MB, torch mapped: {result.torch_mapped}", flush=True)
                if round_:
                    counted[tabs].append(result)
    alone, many = counted[1], counted[args.tabs]
    print(f"\n{len(alone)} counted rounds; median (lowest-highest) over rounds")
    print(f"start screen, one tab: {spread([r.start_screen_s for r in alone])} s")
    print(f"start screen process RSS: {spread([r.start_rss_mb for r in alone], 0)} MB; race replay process RSS "
          f"(peak): {spread([r.replay_rss_mb for r in alone], 0)} MB; torch mapped in any: "
          f"{any(r.torch_mapped for r in alone + many)}")
    for tabs, rounds in ((1, alone), (args.tabs, many)):
        print(f"{tabs:2d} tab(s) playing the race: frame interval median "
              f"{spread([statistics.median(r.intervals_ms) for r in rounds], 0)} ms, p95 "
              f"{spread([percentile(r.intervals_ms, 0.95) for r in rounds], 0)} ms; server "
              f"{spread([r.server_cpu for r in rounds])} cores, sessions {spread([r.sessions_cpu for r in rounds])}, "
              f"browser {spread([r.browser_cpu for r in rounds])}, "
              f"measuring {spread([r.harness_cpu for r in rounds])}; server and sessions RSS "
              f"{spread([r.rss_mb for r in rounds], 0)} MB, PSS {spread([r.pss_mb for r in rounds], 0)} MB; "
              f"race window {spread([r.window_s for r in rounds], 1)} s")


if __name__ == "__main__":
    main()
