"""``decode-tui serve`` as a teacher starts it, and a tab's side of its websocket: for tests/test_serve.py,
tests/test_browser.py, benchmarks/classroom.py and docs/classroom_screenshot.py. It imports no torch, so a
benchmark's own process stays light.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psutil

from decode_tui.core.errors import EXIT_TERMINATED

SCRIPT = str(Path(sys.executable).parent / "decode-tui")  # the console script, as a user runs it
FORK_SERVER = "decode_tui.cli.forkserver"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


ESCAPE = re.compile(r"\x1b(\[[0-9;?<>=$]*[ -/]*[@-~]|\][^\x07]*\x07|[()][A-Za-z0-9]|[=>78])")


@dataclass
class Served:
    process: subprocess.Popen[str]
    port: int
    url: str
    lines: list[str] = field(default_factory=list)

    def sessions(self) -> list[psutil.Process]:
        """The server's app processes (each session's, in a session of their own, and the start screens it keeps
        ready): its descendants but the fork server, whose children they are (cli/forkserver.py)."""
        try:
            server = psutil.Process(self.process.pid)
            forks = {p.pid for p in server.children() if FORK_SERVER in " ".join(p.cmdline())}
            children: list[psutil.Process] = [p for p in server.children(recursive=True) if p.pid not in forks]
            return children
        except psutil.NoSuchProcess:
            return []

    def fork_server(self) -> psutil.Process | None:
        server = psutil.Process(self.process.pid)
        return next((p for p in server.children() if FORK_SERVER in " ".join(p.cmdline())), None)

    def said(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if time.monotonic() > deadline:
                raise AssertionError(f"the server never said {text!r}: {self.lines}")
            time.sleep(0.05)


@contextmanager
def serving(*args: str, env: dict[str, str], host: str = "127.0.0.1", ready_tabs: int | None = 0
            ) -> Iterator[Served]:
    """The server, as a teacher starts it, on a port of its own; at the end SIGTERM, which must exit 143 (unless the
    test ended it already) and leave no session process and no session folder in its temporary folder (the
    ``TMPDIR`` of ``env``, else one made here). ``ready_tabs``: its ``--ready-tabs``, none by default, so that
    every process :meth:`Served.sessions` finds is a tab's (None: the server's own default)."""
    port = free_port()
    made = None if "TMPDIR" in env else tempfile.TemporaryDirectory(prefix="serve-tmp-")
    env = {**env, "TMPDIR": made.name} if made is not None else env
    ready = [] if ready_tabs is None else ["--ready-tabs", str(ready_tabs)]
    process = subprocess.Popen([SCRIPT, "serve", "--host", host, "--port", str(port), *ready, *args], env=env,
                               text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    served = Served(process, port, "")
    assert process.stdout is not None
    stdout = process.stdout

    def read() -> None:
        for line in stdout:
            served.lines.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    try:
        served.said("students open")
        served.url = re.findall(r"http://\S+", next(line for line in served.lines if "students open" in line))[0]
        if host != "127.0.0.1":  # the address printed names this machine; the test reaches it on loopback
            served.url = re.sub(r"http://[^/]+", f"http://127.0.0.1:{port}", served.url)
        yield served
    finally:
        children = served.sessions()
        terminated = process.poll() is None
        if terminated:
            process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(30)
        finally:
            process.kill()
        _gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"session processes outlived the server: {alive}"
        assert not terminated or code == EXIT_TERMINATED, f"SIGTERM ended the server with {code}: {served.lines}"
        left = list(Path(env["TMPDIR"]).glob("decode-tui-session-*"))
        if made is not None:
            made.cleanup()
        assert not left, f"session folders outlived the server: {left}"


class Tab:
    """A browser tab's side of the websocket: what the page would send, and the screen text received."""

    def __init__(self, websocket: aiohttp.ClientWebSocketResponse) -> None:
        self.websocket = websocket
        self.received = ""

    async def screen_says(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in ESCAPE.sub("", self.received):
            left = deadline - time.monotonic()
            if left <= 0:
                shows = ESCAPE.sub("", self.received)[-800:]
                raise AssertionError(f"the tab never showed {text!r}; it shows {shows!r}")
            try:
                message = await self.websocket.receive(timeout=left)
            except TimeoutError:
                continue
            if message.type == aiohttp.WSMsgType.BINARY:
                self.received += message.data.decode("utf-8", "replace")
            elif message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                raise AssertionError(f"the tab was closed before it showed {text!r}: "
                                     f"{ESCAPE.sub('', self.received)[-800:]!r}")

    async def keys(self, keys: str) -> None:
        await self.websocket.send_str(json.dumps(["stdin", keys]))

    def clear(self) -> None:
        self.received = ""


def all_end(pids: list[int], timeout: float = 10) -> None:
    """Wait until none of ``pids`` runs (the server reaps its children, so they go away entirely)."""
    deadline = time.monotonic() + timeout
    while alive := [pid for pid in pids if psutil.pid_exists(pid)]:
        if time.monotonic() > deadline:
            raise AssertionError(f"still running: {alive}")
        time.sleep(0.1)


def websocket_url(served: Served) -> str:
    token = re.search(r"token=([^&\s]+)", served.url)
    return f"ws://127.0.0.1:{served.port}/ws/{token.group(1) if token else '-'}?width=120&height=40"


async def open_tab(client: aiohttp.ClientSession, served: Served) -> Tab:
    return Tab(await client.ws_connect(websocket_url(served)))
