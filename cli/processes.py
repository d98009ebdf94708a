"""A classroom session's processes: each app a tab runs, started (forked from the fork server where it is up, else
from scratch), its frames forwarded to the tab, its input fed to it without ever waiting on it, and ended so that
nothing outlives its session.

A process gets ``decode-tui ARGV`` as an argument vector (no shell), the session's folder as its working folder,
and textual's web driver in its environment (:data:`APP_ENV`); its standard input and output carry the web
driver's packets, its last lines of standard error are kept for the session's notices. Ending one asks it to quit,
then sends SIGTERM, then SIGKILL to its process group, :data:`QUIT_WAIT_S` apart.

It knows asyncio's processes, the fork server (cli/forkserver.py) and a session's websocket as somewhere to send
frames; nothing about who may take a seat (cli/admission.py) or which app a session runs next (cli/classroom.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from .commands import WEB_DRIVER
from .forkserver import Forked, ForkServer
from .start import decode_tui_argv

QUIT_WAIT_S = 3.0  # how long a process has to quit when asked, then as long again after SIGTERM, before SIGKILL
MAX_PENDING_BYTES = 8 * 2**20  # input an app has not read yet, beyond which a tab's input is dropped
# What makes an app speak to a tab: Textual's web driver and its colours (read once when Textual is imported, so the
# fork server's environment has them too).
APP_ENV = {"TEXTUAL_DRIVER": WEB_DRIVER, "TEXTUAL_FPS": "30", "TEXTUAL_COLOR_SYSTEM": "truecolor",
           "TERM_PROGRAM": "textual"}
# A session's process: started from scratch, or forked by the fork server.
Running = asyncio.subprocess.Process | Forked
READY_SIZE = (80, 24)  # a ready start screen's size until its tab says its own


@dataclass
class Session:
    number: int
    websocket: web.WebSocketResponse
    size: tuple[int, int]
    folder: Path | None  # its processes' working folder, removed with it; None until its websocket is open
    address: str = ""  # the tab's network address
    playing: str = "the start screen"
    live: bool = False
    process: Running | None = None
    opened: float = field(default_factory=time.monotonic)
    last_input: float = field(default_factory=time.monotonic)
    closing: str | None = None  # why it ends, once it does
    errors: deque[str] = field(default_factory=lambda: deque(maxlen=4))  # its process's last stderr lines


def session_folder() -> Path:
    """A new temporary folder for a session's processes (a tab's, or a start screen kept ready for one)."""
    return Path(tempfile.mkdtemp(prefix="decode-tui-session-"))


def packet(kind: bytes, payload: bytes) -> bytes:
    """A packet for textual's web driver: its type, its length (4 bytes, big-endian), its payload."""
    return kind + len(payload).to_bytes(4, "big") + payload


class Frames:
    """A process's frames (what textual's web driver writes for a terminal), forwarded from its start until its
    output ends (it exited) or its tab is gone: to its tab, or kept until it has one (a start screen made ready
    before its tab came)."""

    def __init__(self, process: Running, websocket: web.WebSocketResponse | None) -> None:
        self.websocket = websocket
        self.kept: list[bytes] = []
        self.kept_bytes = 0
        self.last = 0.0  # when it last drew (time.monotonic)
        self.forwarding = asyncio.create_task(self.forward(process))

    async def forward(self, process: Running) -> None:
        stdout = process.stdout
        assert stdout is not None
        try:
            for _ in range(10):  # the web driver's prelude says a textual app is on the other end
                if await stdout.readline() in (b"__GANGLION__\n", b""):
                    break
            while True:
                head = await stdout.readexactly(5)
                payload = await stdout.readexactly(int.from_bytes(head[1:], "big"))
                if head[:1] == b"D":
                    self.last = time.monotonic()
                    if self.websocket is not None:
                        await self.websocket.send_bytes(payload)
                    else:
                        self.kept.append(payload)
                        self.kept_bytes += len(payload)
                # M (meta: the app's exit, a URL to open) and P (a file to deliver) need nothing here: the process
                # ending is what counts, and nothing is delivered from the server to a tab.
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    async def show_in(self, websocket: web.WebSocketResponse) -> None:
        """The frames kept so far to ``websocket``, in order, then every frame after them."""
        with contextlib.suppress(ConnectionError):
            while self.kept:  # a frame drawn while these are sent is kept behind them
                await websocket.send_bytes(self.kept.pop(0))
        self.kept_bytes = 0
        self.websocket = websocket


class Processes:
    """Starts, feeds and ends the sessions' processes; ``say`` is a line for the teacher's console."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.forks: ForkServer | None = None  # where session processes are forked from, once started

    async def start_forks(self) -> None:
        """Start the fork server (cli/forkserver.py) that session processes are forked from; where it cannot
        start, each is started from scratch."""
        forks = ForkServer({**os.environ, **APP_ENV})  # as each session's process has them (run)
        try:
            await forks.start()
        except OSError as exc:
            self.say(f"session processes start from scratch (the fork server did not start: {exc})")
            return
        self.forks = forks

    async def close_forks(self) -> None:
        if self.forks is not None:
            await self.forks.close()
            self.forks = None

    async def start(self, argv: list[str], folder: Path, size: tuple[int, int], who: str) -> Running:
        """``decode-tui ARGV`` started in ``folder`` for a screen of ``size`` (columns, rows): forked where the fork
        server is up, else from scratch. ``who`` names it on the console."""
        env = {**os.environ, **APP_ENV, "COLUMNS": str(size[0]), "ROWS": str(size[1])}
        if self.forks is not None and self.forks.alive:
            try:
                return await self.forks.spawn(argv, str(folder), env)
            except (ConnectionError, OSError) as exc:
                self.say(f"{who}: the fork server failed ({exc}): its process starts from scratch")
        return await asyncio.create_subprocess_exec(
            *decode_tui_argv(argv), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, cwd=folder, start_new_session=True)

    async def run(self, session: Session, argv: list[str], ready: Ready | None = None) -> int:
        """Run ``decode-tui ARGV`` (one app) in the tab until it exits; returns its exit status. ``ready``: that
        process, started already (a ready start screen): what it drew before the tab came goes to the tab first,
        and it is told the tab's size."""
        assert session.folder is not None
        session.errors.clear()
        if ready is None:
            process = await self.start(argv, session.folder, session.size, f"session {session.number}")
            frames = Frames(process, session.websocket)
        else:
            process, frames = ready.process, ready.frames
        session.process = process
        errors = asyncio.create_task(self.read_errors(session, process))
        try:
            if ready is not None:
                await frames.show_in(session.websocket)
                self.meta(session, {"type": "resize", "width": session.size[0], "height": session.size[1]})
            await frames.forwarding
        finally:
            await self.end(session)
            code = await process.wait()
            await errors
            session.process = None
        return code

    @staticmethod
    async def read_errors(session: Session, process: Running) -> None:
        assert process.stderr is not None
        async for line in process.stderr:
            text = line.decode("utf-8", "replace").strip()
            if text:
                session.errors.append(text[:300])

    @staticmethod
    def send(session: Session, kind: bytes, payload: bytes) -> None:
        """A packet to the session's process, never waiting for it: while the app has more than
        :data:`MAX_PENDING_BYTES` of input unread, more is dropped, so a flood from one tab cannot hold up its own
        closing or anything else of the server's."""
        process = session.process
        if process is None or process.stdin is None or process.returncode is not None:
            return  # between two processes: dropped
        if process.stdin.transport.get_write_buffer_size() > MAX_PENDING_BYTES:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            process.stdin.write(packet(kind, payload))

    def meta(self, session: Session, data: dict[str, object]) -> None:
        self.send(session, b"M", json.dumps(data).encode())

    async def end(self, session: Session) -> None:
        """Ask the session's process to quit; terminate it, then kill its process group, if it does not."""
        process = session.process
        if process is None or process.returncode is not None:
            return
        self.meta(session, {"type": "quit"})
        for then in (signal.SIGTERM, signal.SIGKILL):
            try:
                await asyncio.wait_for(asyncio.shield(process.wait()), QUIT_WAIT_S)
                return
            except TimeoutError:
                try:
                    os.killpg(process.pid, then)
                except ProcessLookupError:
                    return
        await process.wait()

    @staticmethod
    def memory(running: Iterable[Running | None]) -> list[int]:
        """Each process's memory, in bytes: its resident set and its children's (0 for None or one that ended)."""
        import psutil

        out: list[int] = []
        for process in running:
            total = 0
            if process is not None and process.returncode is None:
                try:
                    root = psutil.Process(process.pid)
                    total = sum(p.memory_info().rss for p in (root, *root.children(recursive=True)))
                except psutil.Error:
                    pass
            out.append(total)
        return out

@dataclass
class Ready:
    """A start screen started before its tab came, its frames kept until one does: its process, its folder (its
    session's, once taken)."""

    process: Running
    folder: Path
    frames: Frames

    def drawn(self, settled_s: float) -> bool:
        """Whether it has drawn, and drawn nothing for ``settled_s``."""
        return bool(self.frames.kept) and time.monotonic() - self.frames.last >= settled_s


class ReadyScreens:
    """Start screens started ahead of their tabs. A class told to open the page opens thirty tabs in the same
    second; thirty apps starting at once share the machine's cores, and every tab waits for nearly all of them
    (BENCHMARKS.md, "The classroom in a browser"). A tab takes a ready start screen, with its folder, where there is
    one: its first frames are drawn already and go to the tab first, and it is told the tab's size.

    The pool is filled one process at a time (the next once the last has drawn), and only once no tab has taken one
    for QUIET_S, so that filling it never competes with a class's burst. A start screen that ends by itself stops the
    pool (tabs start their own, and say why); one whose kept frames pass MAX_KEPT_BYTES (an app that went on drawing
    with no tab) is replaced.

    ``argv_for(folder)``: the start screen's arguments for a session in ``folder``."""

    QUIET_S = 2.0  # a burst of tabs is over once none has come for this long
    EVERY_S = 0.1  # how often the pool is looked at
    SETTLED_S = 0.3  # a start screen that has drawn nothing for this long has drawn its list
    MAX_KEPT_BYTES = 1 << 20

    def __init__(self, processes: Processes, argv_for: Callable[[Path], list[str]], size: int) -> None:
        self.processes = processes
        self.argv_for = argv_for
        self.size = size
        self.ready: deque[Ready] = deque()
        self.taken_at = -math.inf

    def take(self) -> Ready | None:
        """A ready start screen for a tab, or None (the pool is empty: the tab's starts as it comes)."""
        self.taken_at = time.monotonic()
        while self.ready:
            ready = self.ready.popleft()
            if ready.process.returncode is None:
                return ready
            shutil.rmtree(ready.folder, ignore_errors=True)  # it ended before any tab came (said by keep_filled)
        return None

    async def keep_filled(self) -> None:
        """Fill the pool, and fill it again once tabs have taken from it; until cancelled. Says when it is full."""
        said_full = False
        while self.size:
            await asyncio.sleep(self.EVERY_S)
            await self.drop_spoiled()
            if not self.size:  # a start screen ended by itself: no more are kept
                return
            if len(self.ready) >= self.size:
                if not said_full and all(r.drawn(self.SETTLED_S) for r in self.ready):
                    self.processes.say(f"{self.size} start screen(s) ready for the next tabs")
                    said_full = True
                continue
            said_full = False
            if time.monotonic() - self.taken_at < self.QUIET_S or not all(r.drawn(self.SETTLED_S)
                                                                             for r in self.ready):
                continue
            folder = session_folder()
            try:
                process = await self.processes.start(self.argv_for(folder), folder, READY_SIZE,
                                                     "a ready start screen")
            except OSError as exc:
                shutil.rmtree(folder, ignore_errors=True)
                self.processes.say(f"a ready start screen did not start ({exc}): each tab starts its own")
                self.size = 0
                return
            except BaseException:  # cancelled: the server is stopping (the fork server ends its children)
                shutil.rmtree(folder, ignore_errors=True)
                raise
            self.ready.append(Ready(process, folder, Frames(process, None)))

    async def drop_spoiled(self) -> None:
        """Drop the start screens that ended by themselves (and stop the pool: the next would end too) and those
        that kept drawing with no tab."""
        for ready in list(self.ready):
            if ready.process.returncode is not None:
                self.processes.say(f"a ready start screen ended by itself (exit {ready.process.returncode}): no "
                                   "more are kept ready; each tab starts its own")
                self.size = 0
            elif ready.frames.kept_bytes <= self.MAX_KEPT_BYTES:
                continue
            self.ready.remove(ready)
            await self.end(ready)

    @staticmethod
    async def end(ready: Ready) -> None:
        if ready.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(ready.process.pid, signal.SIGKILL)  # nobody is shown it: no need to ask it to quit
        await ready.process.wait()
        await ready.frames.forwarding
        shutil.rmtree(ready.folder, ignore_errors=True)

    async def close(self) -> None:
        """End every start screen no tab took, and remove its folder."""
        ready, self.ready = list(self.ready), deque()
        await asyncio.gather(*(self.end(r) for r in ready))
