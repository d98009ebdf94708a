"""``decode-tui serve``: the lessons, the race and a teacher's recordings for a room of browsers.

The command checks its options (the folder, the file it records sessions in, the port) before it serves,
prints the address to open (with the access token when it listens beyond this machine), shows the sessions on
the teacher's console, live where that is a terminal and as plain lines where it is not, and stops every session
on Ctrl-C (exit 130) or SIGTERM (exit 143). The sessions themselves are cli/classroom.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import secrets
import signal
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..core.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, DecodeTuiError, UsageError
from .commands import app
from .console import fail
from .flags import ThemeOpt, at_least
from .options import theme_name

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

    from .classroom import Classroom, ClassroomOptions


@app.command("serve", short_help="Serve the lessons, the race and your recordings to a classroom's browsers.")
def serve_cmd(
    host: Annotated[str, typer.Option(help="The address to listen on: 127.0.0.1 is this machine alone; 0.0.0.0 "
                                      "lets a classroom's network in, with an access token in the address.")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="The port to listen on.")] = 8000,
    max_sessions: Annotated[int, typer.Option(min=1, help="Tabs open at once; the next one gets a page saying "
                                              "the class is full.")] = 40,
    max_per_address: Annotated[int, typer.Option(min=1, help="Tabs open at once from one network address (one "
                                                 "student's computer), so that one client cannot take every "
                                                 "place; raise it where a class shares an address.")] = 4,
    idle_minutes: Annotated[float, typer.Option(help="A tab with no key for this long is closed, and "
                                                "its process ends.", callback=at_least(0.05))] = 20.0,
    recordings: Annotated[Path | None, typer.Option(help="A folder whose recordings (.jsonl) the start screen "
                                                    "offers too.")] = None,
    live: Annotated[bool, typer.Option("--live", help="Let tabs run lessons on a model (l on the start screen); "
                                       "each live run loads a model in its own process.")] = False,
    max_live: Annotated[int, typer.Option(min=1, help="With --live: live runs at once; the next is refused in "
                                          "its tab.")] = 2,
    record_sessions: Annotated[Path | None, typer.Option(help="Append to this file (JSON Lines) which sessions "
                                                         "opened, what each played and when: no keys.")] = None,
    ready_tabs: Annotated[int, typer.Option(min=0, help="Start screens kept started ahead of their tabs, so that a "
                                            "class opening the page at once gets its lists without waiting for "
                                            "each app to start; each holds some memory (the console's table says "
                                            "how much). At most --max-sessions; 0: each tab starts its own.")] = 30,
    theme: ThemeOpt = None,
) -> None:
    """Serve the start screen to browsers: each tab gets its own app process, which plays the lessons, the race and
    the recordings with no model. Students open the address printed; Ctrl-C stops the server and every session."""
    from .classroom import ClassroomOptions
    from .outputs import check_output

    try:
        if recordings is not None:
            from ..tui.catalog import check_folder

            check_folder(recordings)
        if record_sessions is not None:
            check_output(record_sessions, "record the sessions")
        if max_live != 2 and not live:
            raise UsageError("--max-live caps live runs, which are off without --live: add --live.")
        options = ClassroomOptions(host=host, port=port, token=None if local(host) else secrets.token_urlsafe(18),
                                   max_sessions=max_sessions, max_per_address=max_per_address,
                                   idle_minutes=idle_minutes, recordings=recordings,
                                   live=live, max_live=max_live, record_sessions=record_sessions,
                                   theme=theme_name(theme), ready_tabs=ready_tabs)
        code = asyncio.run(serve(options))
    except DecodeTuiError as err:
        fail(err)
    raise typer.Exit(code)


def local(host: str) -> bool:
    """Whether ``host`` is this machine alone (no token is asked there)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def addresses(options: ClassroomOptions) -> list[str]:
    """The addresses to open, with the token: where it listens on all of this machine's, each address of its
    network interfaces that others can reach (not loopback, not link-local): a host name may resolve to 127.0.0.1
    alone, which a student's browser would take for the student's own machine."""
    token = f"/?token={options.token}" if options.token else "/"
    hosts = [options.host]
    if options.host in ("0.0.0.0", "::"):
        hosts = network_addresses(socket.AF_INET6 if options.host == "::" else socket.AF_INET) or ["127.0.0.1"]
    return [f"http://{h if ':' not in h else f'[{h}]'}:{options.port}{token}" for h in hosts]


def network_addresses(family: int) -> list[str]:
    """This machine's addresses that another machine can reach, of its interfaces that are up (psutil reads
    them: the standard library has no portable way); IPv4 ones first."""
    import psutil

    up = {name for name, stats in psutil.net_if_stats().items() if stats.isup}
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for name, entries in psutil.net_if_addrs().items():
        for entry in entries:
            if name not in up or entry.family not in (socket.AF_INET, family):
                continue
            with contextlib.suppress(ValueError):
                address = ipaddress.ip_address(entry.address.split("%")[0])
                if not (address.is_loopback or address.is_link_local or address.is_unspecified):
                    found.append(address)
    return [str(a) for a in sorted(set(found), key=lambda a: (a.version, a))]


async def serve(options: ClassroomOptions) -> int:
    """Serve until Ctrl-C or SIGTERM; returns the exit status (130, 143)."""
    from aiohttp import web
    from rich.console import Console

    from .classroom import Classroom

    console = Console(highlight=False, soft_wrap=True)
    board = Board(console)
    classroom = Classroom(options, board.say)
    malformed = OneLine(classroom)
    aiohttp_log = logging.getLogger("aiohttp")
    aiohttp_log.addHandler(malformed)
    aiohttp_log.propagate = False  # no traceback on the console for a request aiohttp refused
    runner = web.AppRunner(classroom.web_app(), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, options.host, options.port).start()
    except OSError as exc:
        await runner.cleanup()
        raise UsageError(bind_error(options, exc)) from None
    stopped: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    loop = asyncio.get_running_loop()

    def stop(code: int) -> None:
        if not stopped.done():
            stopped.set_result(code)

    for signum, code in ((signal.SIGINT, EXIT_INTERRUPTED), (signal.SIGTERM, EXIT_TERMINATED)):
        loop.add_signal_handler(signum, stop, code)
    console.print(f"[bold]decode-tui classroom[/]: students open {' or '.join(addresses(options))}", markup=True)
    if options.host in ("0.0.0.0", "::") and not network_addresses(socket.AF_INET):
        console.print("This machine has no network address others can reach (no interface is up beyond loopback): "
                      "only this machine's browsers can open it.")
    if options.token:
        console.print("The token in the address is this server's alone: a request without it is refused.")
    console.print(f"Up to {options.max_sessions} tabs; a tab is closed after {options.idle_minutes:g} idle minutes. "
                  + (f"Live runs: up to {options.max_live}, each loading a model in its own process (the table shows "
                     "what each session costs)." if options.live else "Live runs are off (--live allows them).")
                  + " Ctrl-C stops the server and every session.")
    await classroom.processes.start_forks()
    idle = asyncio.create_task(classroom.close_idle())
    ready = asyncio.create_task(classroom.ready.keep_filled())
    shown = asyncio.create_task(board.show(classroom))
    try:
        code = await stopped
    finally:
        idle.cancel()
        ready.cancel()
        shown.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ready  # a ready start screen's start in flight ends before the pool is closed
        board.stop()
        ending = len(classroom.sessions)
        try:
            await classroom.close_all("the server was stopped")
        finally:
            await classroom.processes.close_forks()
            await runner.cleanup()
            aiohttp_log.removeHandler(malformed)
            aiohttp_log.propagate = True
    console.print(f"decode-tui classroom: {'interrupted' if code == EXIT_INTERRUPTED else 'terminated'}; "
                  f"{ending} session(s) closed, their processes ended.")
    return code


def bind_error(options: ClassroomOptions, exc: OSError) -> str:
    where = f"{options.host}:{options.port}"
    if exc.errno == errno.EADDRINUSE:
        return (f"Port {options.port} is in use on {options.host} (another server, or another decode-tui serve): "
                "choose another with --port.")
    if exc.errno == errno.EACCES:
        return f"Not allowed to listen on {where} (ports under 1024 need privileges): choose another with --port."
    return f"Cannot listen on {where}: {exc.strerror or exc}. Check --host (an address of this machine)."


class Board:
    """The teacher's console: each session's opening, what it plays and its closing, as lines; on a terminal, a
    table of the sessions under them, refreshed every second (how many, what each plays, memory in all)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live: Live | None = None

    def say(self, line: str) -> None:
        from ..tui.catalog import printable

        self.console.print(f"{time.strftime('%H:%M:%S')} {printable(line)}", markup=False)

    async def show(self, classroom: Classroom) -> None:
        if not self.console.is_terminal:
            return
        from rich.live import Live

        with Live(self.table(classroom, {}), console=self.console, refresh_per_second=2,
                  transient=True) as self.live:
            while True:
                memory = await asyncio.to_thread(classroom.memory)
                self.live.update(self.table(classroom, memory))
                await asyncio.sleep(1.0)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def table(self, classroom: Classroom, memory: dict[int, int]) -> RenderableType:
        from rich.table import Table

        now = time.monotonic()
        sessions = list(classroom.sessions.values())
        options = classroom.options
        table = Table(title=f"{len(sessions)} of {options.max_sessions} sessions"
                      + (f" · {sum(s.live for s in sessions)} of {options.max_live} live" if options.live else "")
                      + f" · {len(classroom.ready.ready)} ready ({memory.get(0, 0) / 2**20:,.0f} MB)"
                      + f" · {sum(memory.values()) / 2**20:,.0f} MB in all", title_justify="left")
        for column in ("session", "plays", "open", "idle", "memory"):
            table.add_column(column, justify="right" if column in ("open", "idle", "memory") else "left")
        for s in sessions:
            table.add_row(str(s.number), s.playing, minutes(now - s.opened), minutes(now - s.last_input),
                          f"{memory.get(s.number, 0) / 2**20:,.0f} MB")
        return table


class OneLine(logging.Handler):
    """aiohttp's own complaints (a request it could not parse: a 100 KB request line, a bad header) as one line on
    the teacher's console, rate-limited with the classroom's refusals, where aiohttp would print a traceback."""

    def __init__(self, classroom: Classroom) -> None:
        super().__init__(logging.WARNING)
        self.classroom = classroom

    def emit(self, record: logging.LogRecord) -> None:
        problem = record.exc_info[1] if record.exc_info else None
        said = " ".join(str(problem or record.getMessage()).split())  # aiohttp's own words, on one line
        self.classroom.refused("malformed", f"refused a malformed request: {said[:160]}")


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"
