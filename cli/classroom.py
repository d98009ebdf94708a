"""The classroom server behind ``decode-tui serve``: every browser tab is a session with its own app process.

A session is a chain of processes on one websocket: the start screen (``decode-tui lessons --choice-file``),
then the entry chosen there, played by the command a user would type for it (``decode-tui lesson NAME``,
``decode-tui replay FILE``), then the start screen again when that ends. The server builds each command itself
from the list as it stands (tui/catalog.py ``command_for``), as an argument vector with no shell, so a tab can
name nothing else: no path, no option, no other tab's session. Each process runs in a temporary folder of its
session's own, removed with the session, so what an app saves (its export keys) goes nowhere else.

Who may take a seat is cli/admission.py's (the token, Host and Origin, the caps); a session's processes are
cli/processes.py's (started, fed, ended with their process group, so none outlives its session). Here: a tab is
closed after ``idle_minutes`` without a key, a live run (it loads a model) is refused in the tab once ``max_live``
are running, and a session ends once, however it ends.

What it takes from textual-serve: the page's terminal emulator (its static files: textual.js, xterm.css) and the
packet format textual's web driver speaks over standard input and output. What it does not take, and why it is
written here: textual-serve's ``AppService`` starts its command through a shell, closes the socket when its one
app exits and neither waits for nor kills its process; its ``Server`` has no token, caps or idle timeout.

It knows aiohttp's websockets, the catalog and the two modules above; nothing about what an app shows.
``cli/serve.py`` is the command.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path

from aiohttp import ServerTimeoutError, WebSocketError, WSCloseCode, WSMsgType, web

from ..core.errors import UsageError
from ..tui.catalog import command_for
from .admission import Door, Refusals
from .processes import Processes, Ready, ReadyScreens, Session, session_folder

# A browser may ask for any size; an app's screen is drawn cell by cell, so a 1000x1000 request is clamped.
MAX_COLS, MAX_ROWS = 400, 200
MAX_MESSAGE_BYTES = 4 * 2**20  # a bigger websocket message (a paste of several megabytes) closes that tab
STATIC = Path(str(files("textual_serve"))) / "static"
PAGE = files("decode_tui.cli") / "classroom.html"
FAVICON = (b"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'><rect width='16' height='16' rx='3' "
           b"fill='#0c181f'/><text x='3' y='12' font-family='monospace' font-size='11' fill='#5e9ed6'>d</text></svg>")


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
    ready_tabs: int = 30  # start screens kept started ahead of their tabs


def clamp(value: object, high: int, default: int) -> int:
    try:
        return max(1, min(high, int(str(value))))
    except ValueError:
        return default


class Classroom:
    def __init__(self, options: ClassroomOptions, say: Callable[[str], None]) -> None:
        self.options = options
        self.say = say  # a line for the teacher's console
        self.refused = Refusals(say)
        self.door = Door(options.token, options.max_sessions, options.max_per_address, self.refused)
        self.processes = Processes(say)
        self.ready = ReadyScreens(self.processes, lambda folder: self.start_argv(folder / "choice", None),
                                  min(options.ready_tabs, options.max_sessions))
        self.sessions: dict[int, Session] = {}
        self.opened = 0
        self.closing = False
        self.page = PAGE.read_text(encoding="utf-8")

    # ------------------------------------------------------------------ the web side
    def web_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024)
        app.add_routes([web.get("/", self.handle_index), web.get("/ws/{key}", self.handle_websocket),
                        web.get("/favicon.ico", self.handle_favicon), web.static("/static", STATIC, show_index=False)])
        return app

    async def handle_index(self, request: web.Request) -> web.Response:
        if (refusal := self.door.page_refused(request, self.taken(), self.closing)) is not None:
            return refusal
        scheme = "wss" if request.secure else "ws"
        address = html.escape(f"{scheme}://{request.host}/ws/{self.options.token or '-'}", quote=True)
        page = (self.page.replace("{{ websocket_url }}", address)
                .replace("{{ font_size }}", str(clamp(request.query.get("fontsize", "16"), 64, 16))))
        return web.Response(text=page, content_type="text/html")

    async def handle_favicon(self, request: web.Request) -> web.Response:
        return web.Response(body=FAVICON, content_type="image/svg+xml")

    def taken(self) -> list[str]:
        """The network address of every seat taken."""
        return [session.address for session in self.sessions.values()]

    async def handle_websocket(self, request: web.Request) -> web.StreamResponse:
        if (refusal := self.door.seat_refused(request, self.taken(), self.closing)) is not None:
            raise refusal
        websocket = web.WebSocketResponse(heartbeat=15, max_msg_size=MAX_MESSAGE_BYTES)
        if not websocket.can_prepare(request).ok:  # a plain GET (no upgrade): refused before it takes a seat
            self.door.refuse(request, 400, "upgrade", "a plain request for a websocket's address")
            raise web.HTTPBadRequest(text="A session opens from the page, over a websocket.\n")
        self.opened += 1
        size = (clamp(request.query.get("width", "80"), MAX_COLS, 80),
                clamp(request.query.get("height", "24"), MAX_ROWS, 24))
        session = Session(self.opened, websocket, size, None, request.remote or "")
        self.sessions[session.number] = session  # the seat is held from here, so that a burst cannot overfill
        inputs: asyncio.Task[None] | None = None
        try:
            await websocket.prepare(request)
            ready = self.ready.take()
            session.folder = ready.folder if ready else session_folder()
            self.record(session, "opened", "on a ready start screen" if ready else "")
            inputs = asyncio.create_task(self.pump_input(session))
            await self.run_session(session, ready)
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
            await self.processes.end(session)
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
            await self.processes.end(session)

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
            self.processes.send(session, b"D", body.encode("utf-8", "replace"))
        elif kind == "resize" and isinstance(body, dict):
            session.last_input = time.monotonic()
            session.size = (clamp(body.get("width"), MAX_COLS, session.size[0]),
                            clamp(body.get("height"), MAX_ROWS, session.size[1]))
            self.processes.meta(session, {"type": "resize", "width": session.size[0], "height": session.size[1]})
        elif kind == "ping":
            await session.websocket.send_json(["pong", str(body)[:32]])
        elif kind in ("focus", "blur"):
            self.processes.meta(session, {"type": kind})

    async def write_text(self, session: Session, text: str) -> None:
        """Words in the tab's terminal, on a cleared screen (the app's own screen is gone by then)."""
        if not session.websocket.prepared:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            await session.websocket.send_bytes(f"\x1b[?1049l\x1b[2J\x1b[H\x1b[0m{text}\r\n".encode())

    # ------------------------------------------------------------------ the session's processes
    async def run_session(self, session: Session, ready: Ready | None = None) -> None:
        """The start screen, what it chose, the start screen again... until the tab leaves or is closed.
        ``ready``: the first start screen, started already (cli/processes.py ``ReadyScreens``)."""
        notice: str | None = None
        highlight: str | None = None  # the entry played last: the list comes back on it
        recordings = self.options.recordings
        assert session.folder is not None
        if ready is not None and session.closing is not None:  # the tab went before its ready screen was shown
            await ReadyScreens.end(ready)
        while session.closing is None:
            choice_file = session.folder / "choice"
            choice_file.unlink(missing_ok=True)
            session.playing, session.live = "the start screen", False
            code = await self.processes.run(session, self.start_argv(choice_file, notice, highlight), ready)
            ready = None
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
            code = await self.processes.run(session, [*args, "--from-list", *self.theme_args()])
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
                    await self.processes.end(session)

    async def close_all(self, why: str) -> None:
        """End every session, whatever state it is in (its websocket not yet open, its process starting or
        stopping): its process, its tab, its folder (the server is stopping); and the start screens kept ready."""
        self.closing = True
        sessions = list(self.sessions.values())
        for session in sessions:
            session.closing = session.closing or why
        try:
            await asyncio.gather(*(self.end_session(s) for s in sessions), return_exceptions=True)
        finally:
            await self.ready.close()

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
        """Each session's memory (its process's and that process's children's resident sets, in bytes), and under
        0 the start screens kept ready, all together."""
        sessions = list(self.sessions.values())
        each = self.processes.memory([s.process for s in sessions])
        ready = self.processes.memory([r.process for r in self.ready.ready])
        return {0: sum(ready), **{s.number: used for s, used in zip(sessions, each, strict=True)}}


def describe(args: list[str]) -> str:
    """What a session plays, for the teacher: ``lesson NAME``, ``lesson NAME (live)``, ``replay FILE``."""
    if args[0] == "replay":
        return f"replay {Path(args[1]).name}"
    return f"lesson {args[1]}{' (live)' if '--live' in args else ''}"
