"""The classroom server behind ``decode-tui serve``: every browser tab is a session with its own app process.

A session is a chain of processes on one websocket: the start screen (``decode-tui lessons --choice-file``),
then the entry chosen there, played by the command a user would type for it (``decode-tui lesson NAME``,
``decode-tui replay FILE``), then the start screen again when that ends. The server builds each command itself
from the list as it stands (tui/catalog.py ``command_for``), as an argument vector with no shell, so a tab can
name nothing else: no path, no option, no other tab's session. Each process runs in a temporary folder of its
session's own, removed with the session, so what an app saves (its export keys) goes nowhere else.

A tab is refused without the access token (403, no process), over ``max_sessions`` (a page saying the class is
full), and closed after ``idle_minutes`` without a key; a live run (it loads a model) is refused in the tab once
``max_live`` are running. A process that does not quit when asked is terminated, then killed with its process
group, so no process outlives its session.

What it takes from textual-serve: the page's terminal emulator (its static files: textual.js, xterm.css) and the
packet format textual's web driver speaks over standard input and output. What it does not take, and why it is
written here: textual-serve's ``AppService`` starts its command through a shell, closes the socket when its one
app exits and neither waits for nor kills its process; its ``Server`` has no token, caps or idle timeout.

It knows aiohttp, processes and the catalog; nothing about what an app shows. ``cli/serve.py`` is the command.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path

from aiohttp import WSMsgType, web

from ..core.errors import UsageError
from ..tui.catalog import command_for
from .commands import WEB_DRIVER
from .start import decode_tui_argv

# A browser may ask for any size; an app's screen is drawn cell by cell, so a 1000x1000 request is clamped.
MAX_COLS, MAX_ROWS = 400, 200
QUIT_WAIT_S = 3.0  # how long a process has to quit when asked, then as long again after SIGTERM, before SIGKILL
MAX_MESSAGE_BYTES = 4 * 2**20  # a bigger websocket message (a paste of several megabytes) closes that tab
MAX_PENDING_BYTES = 8 * 2**20  # input an app has not read yet, beyond which a tab's input is dropped
STATIC = Path(str(files("textual_serve"))) / "static"
PAGE = files("decode_tui.cli") / "classroom.html"


@dataclass
class ClassroomOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None  # None: no token asked (on localhost)
    max_sessions: int = 40
    idle_minutes: float = 20.0
    recordings: Path | None = None
    live: bool = False
    max_live: int = 2
    record_sessions: Path | None = None  # a JSON Lines file: which lesson each session played, and when
    theme: str | None = None


@dataclass
class Session:
    number: int
    websocket: web.WebSocketResponse
    size: tuple[int, int]
    folder: Path  # its processes' working folder, removed with it
    playing: str = "the start screen"
    live: bool = False
    process: asyncio.subprocess.Process | None = None
    opened: float = field(default_factory=time.monotonic)
    last_input: float = field(default_factory=time.monotonic)
    closing: str | None = None  # why it ends, once it does
    errors: deque[str] = field(default_factory=lambda: deque(maxlen=4))  # its process's last stderr lines


def packet(kind: bytes, payload: bytes) -> bytes:
    """A packet for textual's web driver: its type, its length (4 bytes, big-endian), its payload."""
    return kind + len(payload).to_bytes(4, "big") + payload


def clamp(value: object, high: int, default: int) -> int:
    try:
        return max(1, min(high, int(str(value))))
    except ValueError:
        return default


class Classroom:
    def __init__(self, options: ClassroomOptions, say: Callable[[str], None]) -> None:
        self.options = options
        self.say = say  # a line for the teacher's console
        self.sessions: dict[int, Session] = {}
        self.opened = 0
        self.closing = False
        self.page = PAGE.read_text(encoding="utf-8")

    # ------------------------------------------------------------------ the web side
    def web_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024)
        app.add_routes([web.get("/", self.handle_index), web.get("/ws/{key}", self.handle_websocket),
                        web.static("/static", STATIC, show_index=False)])
        return app

    def allowed(self, given: str | None) -> bool:
        return self.options.token is None or (given is not None and secrets.compare_digest(given,
                                                                                           self.options.token))

    def full(self) -> bool:
        return len(self.sessions) >= self.options.max_sessions

    async def handle_index(self, request: web.Request) -> web.Response:
        if not self.allowed(request.query.get("token")):
            return web.Response(status=403, text="This classroom needs its access token: open the whole address "
                                "the teacher's console shows (it ends in ?token=...).\n")
        if self.full() or self.closing:
            return web.Response(status=503, content_type="text/html", text=full_page(self.options.max_sessions))
        scheme = "wss" if request.secure else "ws"
        page = (self.page.replace("{{ websocket_url }}", f"{scheme}://{request.host}/ws/{self.options.token or '-'}")
                .replace("{{ font_size }}", str(clamp(request.query.get("fontsize", "16"), 64, 16))))
        return web.Response(text=page, content_type="text/html")

    async def handle_websocket(self, request: web.Request) -> web.StreamResponse:
        if not self.allowed(None if self.options.token is None else request.match_info["key"]):
            raise web.HTTPForbidden(text="No access token.\n")
        if self.full() or self.closing:
            raise web.HTTPServiceUnavailable(text=full_page(self.options.max_sessions), content_type="text/html")
        websocket = web.WebSocketResponse(heartbeat=15, max_msg_size=MAX_MESSAGE_BYTES)
        self.opened += 1
        size = (clamp(request.query.get("width", "80"), MAX_COLS, 80),
                clamp(request.query.get("height", "24"), MAX_ROWS, 24))
        session = Session(self.opened, websocket, size, Path(tempfile.mkdtemp(prefix="decode-tui-session-")))
        self.sessions[session.number] = session
        await websocket.prepare(request)
        self.record(session, "opened")
        inputs = asyncio.create_task(self.pump_input(session))
        try:
            await self.run_session(session)
        finally:
            session.closing = session.closing or "ended"
            inputs.cancel()
            await self.end_process(session)
            if not websocket.closed:
                await self.write_text(session, f"This session has ended: {session.closing}.")
                await websocket.close()
            del self.sessions[session.number]
            shutil.rmtree(session.folder, ignore_errors=True)
            self.record(session, "closed", session.closing)
        return websocket

    async def pump_input(self, session: Session) -> None:
        """The tab's messages to its current process: keys, size, focus. A malformed message is dropped; the tab
        closing (or anything unforeseen here) ends the session."""
        try:
            async for message in session.websocket:
                if message.type == WSMsgType.TEXT:
                    await self.take(session, message.data)
        finally:
            session.closing = session.closing or "the tab was closed"
            await self.end_process(session)

    async def take(self, session: Session, data: str) -> None:
        try:
            envelope = json.loads(data)
        except (ValueError, RecursionError):
            return
        if not isinstance(envelope, list) or not envelope:
            return
        kind, body = envelope[0], envelope[1] if len(envelope) > 1 else None
        if kind == "stdin" and isinstance(body, str):
            session.last_input = time.monotonic()
            self.send(session, b"D", body.encode("utf-8", "replace"))
        elif kind == "resize" and isinstance(body, dict):
            session.last_input = time.monotonic()
            session.size = (clamp(body.get("width"), MAX_COLS, session.size[0]),
                            clamp(body.get("height"), MAX_ROWS, session.size[1]))
            self.meta(session, {"type": "resize", "width": session.size[0], "height": session.size[1]})
        elif kind == "ping":
            await session.websocket.send_json(["pong", str(body)[:32]])
        elif kind in ("focus", "blur"):
            self.meta(session, {"type": kind})

    async def write_text(self, session: Session, text: str) -> None:
        """Words in the tab's terminal, on a cleared screen (the app's own screen is gone by then)."""
        with contextlib.suppress(ConnectionError):
            await session.websocket.send_bytes(f"\x1b[?1049l\x1b[2J\x1b[H\x1b[0m{text}\r\n".encode())

    # ------------------------------------------------------------------ the session's processes
    async def run_session(self, session: Session) -> None:
        """The start screen, what it chose, the start screen again... until the tab leaves or is closed."""
        notice: str | None = None
        recordings = self.options.recordings
        while session.closing is None:
            choice_file = session.folder / "choice"
            choice_file.unlink(missing_ok=True)
            session.playing, session.live = "the start screen", False
            code = await self.run_process(session, self.start_argv(choice_file, notice))
            if session.closing is not None:
                return
            if not choice_file.exists():
                session.closing = "left the list" if code == 0 else f"the start screen failed ({self.said(session)})"
                return
            key = choice_file.read_text(encoding="utf-8")
            try:
                args = await asyncio.to_thread(command_for, key, recordings, live=self.options.live)
            except UsageError as err:
                self.say(f"session {session.number}: refused {key[:60]!r}: {err.message}")
                notice = err.message
                continue
            live = "--live" in args
            running = sum(s.live for s in self.sessions.values())
            if live and running >= self.options.max_live:
                notice = (f"Live runs are full: {running} of {self.options.max_live} are running on this server. "
                          "Play the lesson's recording (Enter), or try again later.")
                continue
            session.playing, session.live = describe(args), live
            self.record(session, "played", session.playing)
            code = await self.run_process(session, decode_tui_argv(args))
            notice = None if code == 0 or session.closing else \
                f"`decode-tui {' '.join(args[:2])}` ended with exit status {code}: {self.said(session)}"

    def start_argv(self, choice_file: Path, notice: str | None) -> list[str]:
        args = ["lessons", "--choice-file", str(choice_file)]
        if self.options.recordings is not None:
            args += ["--recordings", str(self.options.recordings)]
        if self.options.live:
            args.append("--live")
        if self.options.theme:
            args += ["--theme", self.options.theme]
        if notice:
            args += ["--notice", notice[:400]]
        return decode_tui_argv(args)

    def said(self, session: Session) -> str:
        return " / ".join(session.errors) or "it said nothing"

    async def run_process(self, session: Session, argv: list[str]) -> int:
        """Run one app in the tab until it exits; returns its exit status."""
        width, height = session.size
        env = {**os.environ, "TEXTUAL_DRIVER": WEB_DRIVER, "TEXTUAL_FPS": "30", "TEXTUAL_COLOR_SYSTEM": "truecolor",
               "TERM_PROGRAM": "textual", "COLUMNS": str(width), "ROWS": str(height)}
        session.errors.clear()
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=env, cwd=session.folder, start_new_session=True)
        session.process = process
        errors = asyncio.create_task(self.read_errors(session, process))
        try:
            await self.forward_output(session, process)
        finally:
            await self.end_process(session)
            code = await process.wait()
            await errors
            session.process = None
        return code

    async def forward_output(self, session: Session, process: asyncio.subprocess.Process) -> None:
        """The app's frames to the tab, until the app's output ends (it exited) or the tab is gone."""
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
                    await session.websocket.send_bytes(payload)
                # M (meta: the app's exit, a URL to open) and P (a file to deliver) need nothing here: the process
                # ending is what counts, and nothing is delivered from the server to a tab.
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    async def read_errors(self, session: Session, process: asyncio.subprocess.Process) -> None:
        assert process.stderr is not None
        async for line in process.stderr:
            text = line.decode("utf-8", "replace").strip()
            if text:
                session.errors.append(text[:300])

    def send(self, session: Session, kind: bytes, payload: bytes) -> None:
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

    async def end_process(self, session: Session) -> None:
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

    # ------------------------------------------------------------------ the server's life
    async def close_idle(self) -> None:
        """Close, every few seconds, the sessions that have had no key for ``idle_minutes``."""
        idle_s = self.options.idle_minutes * 60
        while True:
            await asyncio.sleep(min(5.0, max(idle_s / 4, 0.2)))
            now = time.monotonic()
            for session in list(self.sessions.values()):
                if session.closing is None and now - session.last_input > idle_s:
                    session.closing = f"no key for {self.options.idle_minutes:g} minutes"
                    await self.end_process(session)

    async def close_all(self, why: str) -> None:
        """End every session and its process (the server is stopping)."""
        self.closing = True
        for session in self.sessions.values():
            session.closing = session.closing or why
        await asyncio.gather(*(self.end_process(s) for s in list(self.sessions.values())))
        for session in list(self.sessions.values()):
            await self.write_text(session, f"This session has ended: {why}.")
            await session.websocket.close()

    def record(self, session: Session, event: str, what: str = "") -> None:
        """A line for the teacher's console, and for ``record_sessions`` (no keys are ever written)."""
        self.say(f"session {session.number}: {event}{' ' + what if what else ''}")
        if self.options.record_sessions is not None:
            line = {"at": datetime.now(UTC).isoformat(timespec="seconds"), "session": session.number,
                    "event": event, **({"what": what} if what else {})}
            try:
                with self.options.record_sessions.open("a", encoding="utf-8") as out:
                    out.write(json.dumps(line) + "\n")
            except OSError as exc:
                self.say(f"cannot write {self.options.record_sessions}: {exc.strerror or exc}")

    def memory(self) -> dict[int, int]:
        """Each session's memory: the resident set of its process and that process's children, in bytes."""
        import psutil

        out: dict[int, int] = {}
        for session in list(self.sessions.values()):
            process = session.process
            total = 0
            if process is not None and process.returncode is None:
                try:
                    root = psutil.Process(process.pid)
                    total = sum(p.memory_info().rss for p in (root, *root.children(recursive=True)))
                except psutil.Error:
                    pass
            out[session.number] = total
        return out


def describe(args: list[str]) -> str:
    """What a session plays, for the teacher: ``lesson NAME``, ``lesson NAME (live)``, ``replay FILE``."""
    if args[0] == "replay":
        return f"replay {Path(args[1]).name}"
    return f"lesson {args[1]}{' (live)' if '--live' in args else ''}"


def full_page(seats: int) -> str:
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>decode-tui: the class is full</title></head>"
            "<body style='background:#0c181f;color:#eee;font-family:monospace;padding:3em'>"
            f"<h1>The class is full</h1><p>All {seats} places on this server are taken. Try again in a minute "
            "(reload this page), or ask your teacher.</p></body></html>")
