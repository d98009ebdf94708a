"""The classroom's session processes, forked from one warm process instead of each started from scratch.

A tab's process (``decode-tui lessons``, then ``decode-tui lesson NAME`` or ``decode-tui replay FILE``) spent most of
its start importing Python, Textual and decode-tui's app; thirty tabs opened at once on two cores queued behind
each other's imports (BENCHMARKS.md, "The classroom in a browser"). The fork server is one process that imports
them once and then forks a child for each command: the child runs the same ``decode-tui`` command line, in a
session of its own, with the pipes the classroom passed it as its standard input, output and error, and its own
folder and environment. What a child can run is what ``decode-tui`` can run: the classroom builds its command
lines (cli/classroom.py) and starts them here (cli/processes.py).

Python's ``multiprocessing`` forkserver forks workers that run pickled functions; it does not hand a child another
process's pipes, a folder and a command line, nor report its exit status to a third process, hence written here.

The two ends speak over a Unix socket pair of datagrams (SOCK_SEQPACKET, so each message arrives whole): the
classroom sends ``{"argv", "cwd", "env"}`` as JSON with three file descriptors beside it (SCM_RIGHTS), the server
answers ``{"pid"}`` (or ``{"error"}``) and, when a child ends, ``{"exited", "code"}``. The server has no thread, so
that a fork copies no lock held by another; it reaps its children between requests. It ends when the classroom's
end of the socket closes, killing the process groups of the children it still has.

It knows processes and file descriptors; the commands it runs are decode-tui's, which it imports only to warm up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import sys
from typing import Any

MESSAGE_BYTES = 64 * 1024  # a request's JSON (a command line, a folder, an environment) is far smaller
REAP_EVERY_S = 0.05  # how often the server looks for ended children while no request comes
# What a session process imports before it shows anything: the command line, the start screen, the app (its
# replays and lessons), Textual and its web driver. A live run's torch is not here: it loads in the child.
PRELOAD = ("decode_tui.cli.main", "decode_tui.cli.teaching", "decode_tui.tui.start_app", "decode_tui.tui.app",
           "decode_tui.tui.race_app", "decode_tui.tui.recording", "textual.drivers.web_driver")


def preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)


def serve(channel: socket.socket) -> None:
    """Answer the classroom's requests on ``channel`` until it closes; then end every child still running."""
    children: set[int] = set()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on the teacher's terminal is the classroom's to handle
    try:
        while True:
            ready, _, _ = select.select([channel], [], [], REAP_EVERY_S)
            reap(channel, children)
            if not ready:
                continue
            try:
                data, fds, _flags, _address = socket.recv_fds(channel, MESSAGE_BYTES, 3)
            except OSError:
                return
            if not data:
                return  # the classroom closed its end
            try:
                request = json.loads(data)
                pid = fork(channel, request, fds)
            except (ValueError, KeyError, TypeError, OSError) as exc:
                reply(channel, {"error": f"{type(exc).__name__}: {exc}"})
            else:
                children.add(pid)
                reply(channel, {"pid": pid})
            finally:
                for fd in fds:
                    os.close(fd)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def reap(channel: socket.socket, children: set[int]) -> None:
    """Tell the classroom of every child that ended, with its exit status (143 for SIGTERM, as a shell says)."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        reply(channel, {"exited": pid, "code": 128 - code if code < 0 else code})


def reply(channel: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the classroom went away: the loop ends at its next read
        channel.send(json.dumps(message).encode())


def fork(channel: socket.socket, request: dict[str, Any], fds: list[int]) -> int:
    """Fork a child that runs ``decode-tui`` with the request's arguments; its pid."""
    argv, cwd, env = list(map(str, request["argv"])), str(request["cwd"]), dict(request["env"])
    if len(fds) != 3:
        raise ValueError(f"a request needs 3 file descriptors, not {len(fds)}")
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # the child: never returns to the server's loop
        channel.close()
        os.setsid()  # a process group of its own, which the classroom kills if it must
        for number, fd in enumerate(fds):
            os.dup2(fd, number)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):  # not the server's: the command sets its own
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        sys.argv = ["decode-tui", *argv]
        code = run()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # whatever happens in the child, it must not return to the server's loop
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def run() -> int:
    """What ``python -m decode_tui.cli`` runs (cli/__main__.py), in this process: the fork server stands in for the
    interpreter starting it, and imports nothing of the command line itself."""
    import runpy

    runpy.run_module("decode_tui.cli", run_name="__main__", alter_sys=True)
    return 0


class Forked:
    """A child of the fork server, as the classroom drives it: what ``asyncio.subprocess.Process`` offers it
    (``pid``, ``returncode``, the three streams, ``wait``)."""

    def __init__(self, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader,
                 stderr: asyncio.StreamReader) -> None:
        self.pid = 0  # known once the server answers
        self.stdin: asyncio.StreamWriter | None = stdin
        self.stdout: asyncio.StreamReader | None = stdout
        self.stderr: asyncio.StreamReader | None = stderr
        self.returncode: int | None = None
        loop = asyncio.get_running_loop()
        self.started: asyncio.Future[int] = loop.create_future()
        self.ended: asyncio.Future[int] = loop.create_future()

    def exited(self, code: int) -> None:
        self.returncode = code
        if self.stdin is not None:
            self.stdin.close()
        if not self.ended.done():
            self.ended.set_result(code)

    async def wait(self) -> int:
        return await asyncio.shield(self.ended)


class ForkServer:
    """The classroom's end: starts the server process, asks it for children, hears when each ends."""

    def __init__(self, env: dict[str, str]) -> None:
        """``env``: the server's environment, which its imports read once (Textual's driver, its colours); each
        child gets its own on top."""
        self.env = env
        self.channel: socket.socket | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.pending: list[Forked] = []  # the children asked for and not answered yet, in order
        self.children: dict[int, Forked] = {}

    async def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "decode_tui.cli.forkserver", str(theirs.fileno()), pass_fds=(theirs.fileno(),),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            env=self.env)
        theirs.close()
        ours.setblocking(False)
        self.channel = ours
        asyncio.get_running_loop().add_reader(ours.fileno(), self._heard)

    @property
    def alive(self) -> bool:
        return self.channel is not None

    def _heard(self) -> None:
        assert self.channel is not None
        try:
            data = self.channel.recv(MESSAGE_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the server is gone: whoever waits is told, and later sessions start processes as before
            self._lost()
            return
        message = json.loads(data)
        if "exited" in message:
            ended = self.children.pop(int(message["exited"]), None)
            if ended is not None:
                ended.exited(int(message["code"]))
        elif self.pending:  # the answer to the oldest request: registered at once, before its exit can come
            child = self.pending.pop(0)
            if "pid" in message:
                child.pid = int(message["pid"])
                self.children[child.pid] = child
                child.started.set_result(child.pid)
            else:
                child.started.set_exception(OSError(str(message.get("error", message))))

    def _lost(self) -> None:
        if self.channel is not None:
            asyncio.get_running_loop().remove_reader(self.channel.fileno())
            self.channel.close()
            self.channel = None
        for child in self.pending:
            child.started.set_exception(ConnectionError("the fork server ended"))
        for child in [*self.pending, *self.children.values()]:
            child.exited(-1)
        self.pending.clear()
        self.children.clear()

    async def spawn(self, argv: list[str], cwd: str, env: dict[str, str]) -> Forked:
        """A child running ``decode-tui ARGV`` in ``cwd`` with ``env``, its pipes read and written here."""
        if self.channel is None:
            raise ConnectionError("the fork server is not running")
        loop = asyncio.get_running_loop()
        (in_read, in_write), (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe(), os.pipe()
        stdout, stderr = asyncio.StreamReader(), asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdout), os.fdopen(out_read, "rb", 0))
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stderr), os.fdopen(err_read, "rb", 0))
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                            os.fdopen(in_write, "wb", 0))
        child = Forked(asyncio.StreamWriter(transport, protocol, None, loop), stdout, stderr)
        request = json.dumps({"argv": argv, "cwd": cwd, "env": env}).encode()
        try:
            while True:  # a burst of tabs can fill the socket's buffer: wait for the server to read
                if self.channel is None:
                    raise ConnectionError("the fork server ended")
                try:
                    socket.send_fds(self.channel, [request], [in_read, out_write, err_write])
                    break
                except BlockingIOError:
                    await asyncio.sleep(0.01)
            self.pending.append(child)
        except OSError:
            child.exited(-1)
            self._lost()
            raise ConnectionError("the fork server ended") from None
        finally:
            for fd in (in_read, out_write, err_write):  # the child's ends: its own now
                os.close(fd)
        await child.started
        return child

    async def close(self) -> None:
        """End the server, which kills the children it still has."""
        if self.channel is not None:
            self._lost()
        if self.process is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), 5)
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()


def start() -> None:
    """``python -m decode_tui.cli.forkserver FD``: serve on the socket whose descriptor is FD."""
    channel = socket.socket(fileno=int(sys.argv[1]))
    preload()
    serve(channel)


if __name__ == "__main__":
    start()
