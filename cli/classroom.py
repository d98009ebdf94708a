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
import html
import json
import os
import re
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
from urllib.parse import urlsplit

from aiohttp import ServerTimeoutError, WebSocketError, WSCloseCode, WSMsgType, web

from ..core.errors import UsageError
from ..tui.catalog import command_for
from .commands import WEB_DRIVER
from .forkserver import Forked, ForkServer
from .start import decode_tui_argv

# A browser may ask for any size; an app's screen is drawn cell by cell, so a 1000x1000 request is clamped.
MAX_COLS, MAX_ROWS = 400, 200
QUIT_WAIT_S = 3.0  # how long a process has to quit when asked, then as long again after SIGTERM, before SIGKILL
MAX_MESSAGE_BYTES = 4 * 2**20  # a bigger websocket message (a paste of several megabytes) closes that tab
MAX_PENDING_BYTES = 8 * 2**20  # input an app has not read yet, beyond which a tab's input is dropped
STATIC = Path(str(files("textual_serve"))) / "static"
# What makes an app speak to a tab: Textual's web driver and its colours (read once when Textual is imported, so the
# fork server's environment has them too).
APP_ENV = {"TEXTUAL_DRIVER": WEB_DRIVER, "TEXTUAL_FPS": "30", "TEXTUAL_COLOR_SYSTEM": "truecolor",
           "TERM_PROGRAM": "textual"}
# A session's process: started from scratch, or forked by the fork server.
Running = asyncio.subprocess.Process | Forked
PAGE = files("decode_tui.cli") / "classroom.html"


@dataclass
class ClassroomOptions:
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None  # None: no token asked (on localhost)
    max_sessions: int = 40
    max_per_address: int = 4  # tabs open at once from one network address
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
    folder: Path | None  # its processes' working folder, removed with it; None until its websocket is open
    address: str = ""  # the tab's network address
    playing: str = "the start screen"
    live: bool = False
    process: Running | None = None
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


class Refusals:
    """What the server refused or cut off, for the teacher's console: a line for each kind at most every
    EVERY_S seconds, the rest counted into the next, so a flood of bad requests cannot flood the console."""

    EVERY_S = 10.0

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.last: dict[str, float] = {}  # kind -> when it was last said
        self.held: dict[str, int] = {}  # kind -> how many since, unsaid

    def __call__(self, kind: str, line: str) -> None:
        now = time.monotonic()
        if now - self.last.get(kind, -self.EVERY_S) < self.EVERY_S:
            self.held[kind] = self.held.get(kind, 0) + 1
            return
        held = self.held.pop(kind, 0)
        self.last[kind] = now
        self.say(line + (f" (and {held} more like it since the last such line)" if held else ""))


class Classroom:
    def __init__(self, options: ClassroomOptions, say: Callable[[str], None]) -> None:
        self.options = options
        self.say = say  # a line for the teacher's console
        self.refused = Refusals(say)
        self.sessions: dict[int, Session] = {}
        self.forks: ForkServer | None = None  # where session processes are forked from, once started
        self.opened = 0
        self.closing = False
        self.page = PAGE.read_text(encoding="utf-8")

    # ------------------------------------------------------------------ the web side
    def web_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024)
        app.add_routes([web.get("/", self.handle_index), web.get("/ws/{key}", self.handle_websocket),
                        web.get("/favicon.ico", self.handle_favicon), web.static("/static", STATIC, show_index=False)])
        return app

    def allowed(self, given: str | None) -> bool:
        return self.options.token is None or (given is not None and secrets.compare_digest(given,
                                                                                           self.options.token))

    def full(self) -> bool:
        return len(self.sessions) >= self.options.max_sessions

    def host_refused(self, request: web.Request) -> str | None:
        """Why the request's Host header is refused, or None: the page copies it into the websocket's address, so
        it must be a host name or address and a port, nothing else; and where no token is asked (this machine
        alone), a name for this machine, so that a page from another site whose name was pointed at 127.0.0.1 is
        not served (DNS rebinding)."""
        host = request.host
        if not HOST.fullmatch(host):
            return "a Host header that is no host name"
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if self.options.token is None and name.strip("[]").lower() not in LOCAL_NAMES:
            return f"Host {host}, not this machine's name, where no token is asked"
        return None

    def origin_refused(self, request: web.Request) -> str | None:
        """Why the websocket's Origin is refused, or None: a browser says which page opens a websocket, and only
        this server's own page may (another site's script could otherwise take a seat with the token in its
        address). A client that names no page (no Origin) is not a browser page and is let in."""
        origin = request.headers.get("Origin")
        if origin is None:
            return None
        if urlsplit(origin).netloc.lower() != request.host.lower():
            return f"a page from {origin[:80]!r}, not this server's"
        return None

    def refuse(self, request: web.Request, status: int, kind: str, why: str) -> None:
        self.refused(kind, f"refused {request.remote or 'a client'} ({status}): {why}")

    async def handle_index(self, request: web.Request) -> web.Response:
        if (bad_host := self.host_refused(request)) is not None:
            self.refuse(request, 400, "host", bad_host)
            return web.Response(status=400, text="This page is served under this machine's address only.\n")
        if not self.allowed(request.query.get("token")):
            self.refuse(request, 403, "token", "no access token")
            return web.Response(status=403, text="This classroom needs its access token: open the whole address "
                                "the teacher's console shows (it ends in ?token=...).\n")
        if self.full() or self.closing:
            self.refuse(request, 503, "full", f"the class is full ({len(self.sessions)} tabs)")
            return web.Response(status=503, content_type="text/html", text=full_page(self.options.max_sessions))
        scheme = "wss" if request.secure else "ws"
        address = html.escape(f"{scheme}://{request.host}/ws/{self.options.token or '-'}", quote=True)
        page = (self.page.replace("{{ websocket_url }}", address)
                .replace("{{ font_size }}", str(clamp(request.query.get("fontsize", "16"), 64, 16))))
        return web.Response(text=page, content_type="text/html")

    async def handle_favicon(self, request: web.Request) -> web.Response:
        return web.Response(body=FAVICON, content_type="image/svg+xml")

    def seat_refused(self, request: web.Request) -> web.HTTPException | None:
        """The answer that refuses a websocket a seat (and says why on the console), or None: it may open one."""
        checks = (
            (self.host_refused(request), 400, "host", web.HTTPBadRequest),
            (None if self.allowed(None if self.options.token is None else request.match_info["key"]) else
             "no access token", 403, "token", web.HTTPForbidden),
            (self.origin_refused(request), 403, "origin", web.HTTPForbidden),
            ("the class is full" if self.full() or self.closing else None, 503, "full", web.HTTPServiceUnavailable),
            (f"{self.options.max_per_address} tabs are open from its address already"
             if sum(s.address == (request.remote or "") for s in self.sessions.values())
             >= self.options.max_per_address else None, 429, "address", web.HTTPTooManyRequests),
        )
        for why, status, kind, answer in checks:
            if why is not None:
                self.refuse(request, status, kind, why)
                if status == 503:
                    return answer(text=full_page(self.options.max_sessions), content_type="text/html")
                if status == 429:
                    return answer(text=f"At most {self.options.max_per_address} tabs from one address: close one "
                                  "first.\n")
                return answer(text=f"Refused: {why}.\n")
        return None

    async def handle_websocket(self, request: web.Request) -> web.StreamResponse:
        if (refusal := self.seat_refused(request)) is not None:
            raise refusal
        websocket = web.WebSocketResponse(heartbeat=15, max_msg_size=MAX_MESSAGE_BYTES)
        if not websocket.can_prepare(request).ok:  # a plain GET (no upgrade): refused before it takes a seat
            self.refuse(request, 400, "upgrade", "a plain request for a websocket's address")
            raise web.HTTPBadRequest(text="A session opens from the page, over a websocket.\n")
        self.opened += 1
        size = (clamp(request.query.get("width", "80"), MAX_COLS, 80),
                clamp(request.query.get("height", "24"), MAX_ROWS, 24))
        session = Session(self.opened, websocket, size, None, request.remote or "")
        self.sessions[session.number] = session  # the seat is held from here, so that a burst cannot overfill
        inputs: asyncio.Task[None] | None = None
        try:
            await websocket.prepare(request)
            session.folder = Path(tempfile.mkdtemp(prefix="decode-tui-session-"))
            self.record(session, "opened")
            inputs = asyncio.create_task(self.pump_input(session))
            await self.run_session(session)
        finally:
            session.closing = session.closing or "ended"
            if inputs is not None:
                inputs.cancel()
            await self.end_session(session)
        return websocket

    async def end_session(self, session: Session) -> None:
        """Its process ended, its tab told why and closed, its folder removed and its seat freed: once, however it
        ends (its tab, its process, the idle timeout, the server stopping)."""
        try:
            await self.end_process(session)
            websocket = session.websocket
            if websocket.prepared and not websocket.closed:
                await self.write_text(session, f"This session has ended: {session.closing}.")
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await websocket.close()
        finally:
            if self.sessions.pop(session.number, None) is not None and session.folder is not None:  # it had opened
                shutil.rmtree(session.folder, ignore_errors=True)
                self.record(session, "closed", session.closing or "ended")

    async def pump_input(self, session: Session) -> None:
        """The tab's messages to its current process: keys, size, focus. A malformed message is dropped; the tab
        closing (or anything unforeseen here) ends the session."""
        try:
            async for message in session.websocket:
                if message.type == WSMsgType.TEXT:
                    await self.take(session, message.data)
                elif message.type == WSMsgType.ERROR:  # the websocket failed: aiohttp closes it
                    session.closing = session.closing or self.why_closed(session, message.data)
        finally:
            session.closing = session.closing or self.why_closed(session, session.websocket.exception())
            await self.end_process(session)

    def why_closed(self, session: Session, problem: object) -> str:
        """What ended a session's websocket, in words: its tab, a message over the limit, or no answer to pings."""
        if isinstance(problem, WebSocketError) and problem.code == WSCloseCode.MESSAGE_TOO_BIG:
            self.refused("too-big", f"session {session.number}: closed, a message over "
                         f"{MAX_MESSAGE_BYTES // 2**20} MB from {session.address or 'its tab'}")
            return f"a message over {MAX_MESSAGE_BYTES // 2**20} MB"
        if isinstance(problem, (TimeoutError, ServerTimeoutError)):
            self.refused("ping", f"session {session.number}: closed, its tab stopped answering pings "
                         f"({session.address or 'its address unknown'})")
            return "the tab stopped answering (its network or its computer went away)"
        return "the tab was closed"

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
        if not session.websocket.prepared:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            await session.websocket.send_bytes(f"\x1b[?1049l\x1b[2J\x1b[H\x1b[0m{text}\r\n".encode())

    # ------------------------------------------------------------------ the session's processes
    async def run_session(self, session: Session) -> None:
        """The start screen, what it chose, the start screen again... until the tab leaves or is closed."""
        notice: str | None = None
        highlight: str | None = None  # the entry played last: the list comes back on it
        recordings = self.options.recordings
        assert session.folder is not None
        while session.closing is None:
            choice_file = session.folder / "choice"
            choice_file.unlink(missing_ok=True)
            session.playing, session.live = "the start screen", False
            code = await self.run_process(session, self.start_argv(choice_file, notice, highlight))
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
            live, highlight = "--live" in args, key
            running = sum(s.live for s in self.sessions.values())
            if live and running >= self.options.max_live:
                notice = (f"Live runs are full: {running} of {self.options.max_live} are running on this server. "
                          "Play the lesson's recording (Enter), or try again later.")
                continue
            session.playing, session.live = describe(args), live
            self.record(session, "played", session.playing)
            code = await self.run_process(session, [*args, "--from-list", *self.theme_args()])
            notice = None if code == 0 or session.closing else \
                f"`decode-tui {' '.join(args[:2])}` ended with exit status {code}: {self.said(session)}"

    def start_argv(self, choice_file: Path, notice: str | None, highlight: str | None = None) -> list[str]:
        """The start screen's ``decode-tui`` arguments."""
        args = ["lessons", "--choice-file", str(choice_file), *(["--highlight", highlight] if highlight else [])]
        if self.options.recordings is not None:
            args += ["--recordings", str(self.options.recordings)]
        if self.options.live:
            args.append("--live")
        args += self.theme_args()
        if notice:
            args += ["--notice", notice[:400]]
        return args

    def theme_args(self) -> list[str]:
        """``--theme``, for every process a tab runs."""
        return ["--theme", self.options.theme] if self.options.theme else []

    def said(self, session: Session) -> str:
        return " / ".join(session.errors) or "it said nothing"

    async def start_forks(self) -> None:
        """Start the fork server (cli/forkserver.py) that session processes are forked from; where it cannot
        start, each is started from scratch as before."""
        forks = ForkServer({**os.environ, **APP_ENV})  # as each session's process has them (run_process)
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

    async def run_process(self, session: Session, argv: list[str]) -> int:
        """Run ``decode-tui ARGV`` (one app) in the tab until it exits; returns its exit status."""
        width, height = session.size
        env = {**os.environ, **APP_ENV, "COLUMNS": str(width), "ROWS": str(height)}
        session.errors.clear()
        process: Running | None = None
        if self.forks is not None and self.forks.alive:
            try:
                process = await self.forks.spawn(argv, str(session.folder), env)
            except (ConnectionError, OSError) as exc:
                self.say(f"session {session.number}: the fork server failed ({exc}): its process starts from scratch")
        if process is None:
            process = await asyncio.create_subprocess_exec(
                *decode_tui_argv(argv), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=env, cwd=session.folder, start_new_session=True)
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

    async def forward_output(self, session: Session, process: Running) -> None:
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

    async def read_errors(self, session: Session, process: Running) -> None:
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
        """End every session, whatever state it is in (its websocket not yet open, its process starting or
        stopping): its process, its tab, its folder (the server is stopping)."""
        self.closing = True
        sessions = list(self.sessions.values())
        for session in sessions:
            session.closing = session.closing or why
        await asyncio.gather(*(self.end_session(s) for s in sessions), return_exceptions=True)

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


# A Host header the page may copy into the websocket's address: a name or an IPv4 address, or an IPv6 one in
# brackets, then perhaps a port.
HOST = re.compile(r"([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?")
LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
FAVICON = (b"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'><rect width='16' height='16' rx='3' "
           b"fill='#0c181f'/><text x='3' y='12' font-family='monospace' font-size='11' fill='#5e9ed6'>d</text></svg>")


def full_page(seats: int) -> str:
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>decode-tui: the class is full</title></head>"
            "<body style='background:#0c181f;color:#eee;font-family:monospace;padding:3em'>"
            f"<h1>The class is full</h1><p>All {seats} places on this server are taken. Try again in a minute "
            "(reload this page), or ask your teacher.</p></body></html>")
