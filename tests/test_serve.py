"""``decode-tui serve`` over HTTP and its websocket, as a browser speaks to it but with no browser (the browser
tests are tests/test_browser.py): the token, the caps, the idle timeout, hostile messages, a tab closed mid-lesson,
SIGTERM and a port in use. Each test runs the console script as a teacher would, on a port of its own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import psutil
import pytest

from decode_tui.cli.classroom import Classroom
from decode_tui.cli.processes import APP_ENV, Processes, Ready, ReadyScreens, Session
from decode_tui.core.errors import EXIT_TERMINATED, EXIT_USAGE
from decode_tui.lessons import shipped

from .serving import Served, all_end, free_port, open_tab, serving, websocket_url
from .test_cli import assert_clean_failure, cli


def test_beyond_localhost_a_request_without_the_token_is_refused_and_starts_nothing(isolated_env: dict[str, str]
                                                                                   ) -> None:
    with serving(env=isolated_env, host="0.0.0.0") as served:
        assert "?token=" in served.url
        base = f"http://127.0.0.1:{served.port}"

        async def check() -> None:
            async with aiohttp.ClientSession() as client:
                for url in (f"{base}/", f"{base}/?token=wrong", f"{base}/?token="):
                    async with client.get(url) as response:
                        assert response.status == 403 and "token" in await response.text()
                for path in ("/ws/-", "/ws/wrong"):
                    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                        await client.ws_connect(f"ws://127.0.0.1:{served.port}{path}")
                    assert refused.value.status == 403
                async with client.get(served.url) as response:
                    assert response.status == 200 and "data-session-websocket-url" in await response.text()
                async with client.get(f"{base}/static/js/textual.js") as response:
                    assert response.status == 200  # the page's own scripts need no token

        asyncio.run(check())
        assert served.sessions() == []  # no process started for any of them
        served.said("(403): no access token")
    with serving(env=isolated_env) as local:  # on this machine alone: no token
        assert "token" not in local.url


def test_a_tab_plays_a_lesson_from_the_list_and_its_process_ends_when_it_closes(tmp_path: Path,
                                                                                isolated_env: dict[str, str]) -> None:
    log = tmp_path / "sessions.jsonl"
    with serving("--record-sessions", str(log), env=isolated_env) as served:
        async def play() -> None:
            async with aiohttp.ClientSession() as client:
                tab = await open_tab(client, served)
                await tab.screen_says("Lessons")
                await tab.screen_says(shipped()[-1].title[:40])
                assert len(served.sessions()) == 1
                tab.clear()
                await tab.keys("\r")
                await tab.screen_says("REPLAY of the lesson's recording")
                served.said("session 1: played lesson greedy-vs-sampling")
                tab.clear()
                await tab.keys("q")  # back to the list
                await tab.screen_says("Lessons")
                tab.clear()
                await tab.keys("\x1b[B\r")  # the second lesson, closed in the middle
                await tab.screen_says("02-repetition-penalty.jsonl")
                pids = [p.pid for p in served.sessions()]
                await tab.websocket.close()
            all_end(pids)

        asyncio.run(play())
        served.said("session 1: closed the tab was closed")
        assert served.process.poll() is None  # the server goes on
    lines = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert [(line["event"], line.get("what")) for line in lines] == [
        ("opened", None), ("played", f"lesson {shipped()[0].name}"), ("played", f"lesson {shipped()[1].name}"),
        ("closed", "the tab was closed")]
    assert all(set(line) <= {"at", "session", "event", "what"} for line in lines)  # no keys are written


def test_a_tab_over_max_sessions_gets_the_full_page_and_two_tabs_are_independent(isolated_env: dict[str, str]
                                                                                  ) -> None:
    with serving("--max-sessions", "2", env=isolated_env) as served:
        async def check() -> None:
            async with aiohttp.ClientSession() as client:
                first, second = await open_tab(client, served), await open_tab(client, served)
                await first.screen_says("Lessons")
                await second.screen_says("Lessons")
                async with client.get(served.url) as response:
                    assert response.status == 503 and "The class is full" in await response.text()
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await client.ws_connect(websocket_url(served))
                assert refused.value.status == 503
                first.clear()
                second.clear()
                await first.keys("\r")
                await second.keys("\x1b[B\x1b[B\r")
                await first.screen_says("01-greedy-vs-sampling.jsonl")
                await second.screen_says("03-beam-search.jsonl")
                assert "03-beam-search" not in first.received and "01-greedy" not in second.received
                await first.websocket.close()
                served.said("session 1: closed")
                async with client.get(served.url) as response:  # a place is free again
                    assert response.status == 200
                await second.screen_says("03-beam-search.jsonl")  # the other tab goes on

        asyncio.run(check())
        served.said("(503): the class is full")


def test_hostile_messages_get_no_traceback_and_the_tab_goes_on(isolated_env: dict[str, str]) -> None:
    with serving(env=isolated_env) as served:
        async def check() -> None:
            async with aiohttp.ClientSession() as client:
                tab = await open_tab(client, served)
                await tab.screen_says("Lessons")
                ws = tab.websocket
                for junk in ("not json", "[]", "{}", "5", '"abc"', "null", '["stdin"]', '["stdin", 5]',
                             '["resize", "big"]',
                             '["resize", {"width": "x"}]', '["nonsense", 1]', "[" * 10_000, '["ping", null]'):
                    await ws.send_str(junk)
                await ws.send_bytes(b"\x00\xff binary")
                await tab.keys("\x1b[200~" + "x" * 2**20 + "\x1b[201~")  # a megabyte pasted (the page brackets it)
                await tab.keys("\x1b[B" * 2000)  # a flood of keys
                for width, height in ((1, 1), (1000, 1000), (0, -5), (120, 40)):
                    await ws.send_str(json.dumps(["resize", {"width": width, "height": height}]))
                tab.clear()
                await tab.keys("\x1b[A" * 2000 + "\r")  # back up the list, and play its first lesson
                await tab.screen_says("REPLAY of the lesson's recording")
                await ws.close()

        asyncio.run(check())
        served.said("session 1: closed")
        assert not any("Traceback" in line for line in served.lines), served.lines


def test_many_tabs_opened_and_closed_fast_leave_no_process_and_the_next_tab_plays(isolated_env: dict[str, str]
                                                                                  ) -> None:
    """Tabs closed at once, before their start screen, and just after it, in a burst: every process ends, the
    server says no traceback and a tab opened after them plays a lesson."""
    with serving("--max-per-address", "40", env=isolated_env) as served:
        async def check() -> None:
            async with aiohttp.ClientSession() as client:
                for _ in range(3):
                    tabs = await asyncio.gather(*(open_tab(client, served) for _ in range(12)))
                    for tab in tabs[:6]:  # at once: their processes may not have started yet
                        await tab.websocket.close()
                    for tab in tabs[6:]:
                        await tab.screen_says("Lessons")
                    await asyncio.gather(*(tab.websocket.close() for tab in tabs[6:]))
                deadline = time.monotonic() + 30
                while served.sessions() and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                assert served.sessions() == []
                tab = await open_tab(client, served)
                await tab.screen_says("Lessons")
                await tab.keys("\r")
                await tab.screen_says("REPLAY of the lesson's recording")
                await tab.websocket.close()

        asyncio.run(check())
        served.said("session 37: closed")
        assert not any("Traceback" in line for line in served.lines), served.lines


def test_an_idle_tab_is_closed_with_its_process(isolated_env: dict[str, str]) -> None:
    with serving("--idle-minutes", "0.05", env=isolated_env) as served:
        async def check() -> None:
            async with aiohttp.ClientSession() as client:
                tab = await open_tab(client, served)
                await tab.screen_says("Lessons")
                pids = [p.pid for p in served.sessions()]
                await tab.screen_says("no key for 0.05 minutes", timeout=30)
                message = await tab.websocket.receive(timeout=10)
                assert message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
                all_end(pids)

        asyncio.run(check())


def test_sigterm_ends_every_session_and_exits_143(isolated_env: dict[str, str]) -> None:
    with serving(env=isolated_env) as served:
        async def check() -> None:
            async with aiohttp.ClientSession() as client:
                tabs = [await open_tab(client, served) for _ in range(2)]
                for tab in tabs:
                    await tab.screen_says("Lessons")
                await tabs[0].keys("\r")
                await tabs[0].screen_says("REPLAY of the lesson's recording")
                pids = [p.pid for p in served.sessions()]
                assert len(pids) == 2
                served.process.send_signal(signal.SIGTERM)
                await tabs[1].screen_says("the server was stopped")
                assert served.process.wait(30) == EXIT_TERMINATED
                all_end(pids, timeout=5)

        asyncio.run(check())
        served.said("2 session(s) closed")


def test_a_port_in_use_and_bad_options_are_refused_before_serving(tmp_path: Path, isolated_env: dict[str, str]
                                                                   ) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        assert_clean_failure(cli("serve", "--port", port, env=isolated_env), EXIT_USAGE, f"Port {port} is in use",
                             "--port")
    assert_clean_failure(cli("serve", "--max-live", "3", env=isolated_env), EXIT_USAGE, "add --live")
    assert_clean_failure(cli("serve", "--record-sessions", str(tmp_path / "no" / "such" / "f.jsonl"),
                             env=isolated_env), EXIT_USAGE)
    assert_clean_failure(cli("serve", "--host", "203.0.113.9", "--port", str(free_port()), env=isolated_env),
                         EXIT_USAGE, "Cannot listen on 203.0.113.9")
    assert_clean_failure(cli("serve", "--max-sessions", "0", env=isolated_env), EXIT_USAGE)


def stand_in_runs(classroom: Classroom, choices: list[str | None],
                  on_list: Callable[[list[str]], None] | None = None) -> list[list[str]]:
    """Stand-ins for the classroom's processes: each start screen writes the next of ``choices`` to its choice
    file (None: the user leaves the list) and calls ``on_list`` with its arguments; nothing else runs. Returns the
    list of every process's arguments, filled as the session runs."""
    ran: list[list[str]] = []
    left = iter(choices)

    async def run(session: Session, argv: list[str], ready: Ready | None = None) -> int:
        ran.append(argv)
        if "lessons" in argv:
            choice = next(left)
            if choice is not None:
                Path(argv[argv.index("--choice-file") + 1]).write_text(choice, encoding="utf-8")
            if on_list is not None:
                on_list(argv)
        return 0

    classroom.processes.run = run  # type: ignore[method-assign]
    return ran


def test_a_crafted_choice_is_refused_in_the_tab_and_the_list_comes_back(tmp_path: Path,
                                                                        isolated_env: dict[str, str]) -> None:
    """The start screen's process writes the key chosen; the server plays only a key on the list. Where another
    comes back (here from a stand-in for the start screen's process that writes crafted keys), nothing else runs:
    the list comes back, with the refusal said in it."""
    from decode_tui.cli.classroom import ClassroomOptions

    said: list[str] = []
    classroom = Classroom(ClassroomOptions(), said.append)
    ran = stand_in_runs(classroom, ["lesson:../../etc/passwd", "recording:x.jsonl", "live:why-trees", None])
    session = Session(1, None, (80, 24), tmp_path)  # type: ignore[arg-type]
    asyncio.run(classroom.run_session(session))
    assert len(ran) == 4 and all("lessons" in argv for argv in ran)  # the list each time, nothing else ran
    notices = [argv[argv.index("--notice") + 1] for argv in ran[1:]]
    assert "not on the list" in notices[0] and "not on the list" in notices[1]
    assert "Live runs are off" in notices[2]
    assert session.closing == "left the list"
    assert os.listdir(tmp_path) == []



def test_a_live_run_over_max_live_is_refused_in_the_tab_and_one_under_it_plays(tmp_path: Path) -> None:
    """With ``--live --max-live 1`` and another tab's live run going, a live choice is refused with the notice
    on the list; once that run has ended the same choice plays ``lesson NAME --live``. (The runs here are
    stand-ins: a real one loads a model, which this test is not about.)"""
    from decode_tui.cli.classroom import ClassroomOptions

    said: list[str] = []
    classroom = Classroom(ClassroomOptions(live=True, max_live=1), said.append)
    other = Session(2, None, (80, 24), tmp_path / "other", playing="lesson why-trees (live)",  # type: ignore[arg-type]
                    live=True)
    classroom.sessions[2] = other
    (tmp_path / "mine").mkdir()
    session = Session(1, None, (80, 24), tmp_path / "mine")  # type: ignore[arg-type]
    classroom.sessions[1] = session

    def refusal_shown(argv: list[str]) -> None:
        if "--notice" in argv:  # the refusal was shown: the other tab's live run ends meanwhile
            other.live = False

    ran = stand_in_runs(classroom, ["live:greedy-vs-sampling", "live:greedy-vs-sampling", None], refusal_shown)
    asyncio.run(classroom.run_session(session))
    notice = ran[1][ran[1].index("--notice") + 1]
    assert "Live runs are full: 1 of 1" in notice and "--live" in ran[1]
    assert ran[2][-4:] == ["lesson", "greedy-vs-sampling", "--live", "--from-list"]  # under the cap: it plays
    assert len(ran) == 4 and "lessons" in ran[3]


def session_folders(tmp: Path) -> list[str]:
    return [p.name for p in tmp.glob("decode-tui-session-*")]


def served_env(isolated_env: dict[str, str], tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The server's environment with a temporary folder of its own, where each session's folder is made."""
    tmp = tmp_path / "server-tmp"
    tmp.mkdir()
    return {**isolated_env, "TMPDIR": str(tmp)}, tmp


def test_plain_requests_to_the_websocket_take_no_seat_and_sigterm_then_exits_143(tmp_path: Path,
                                                                                  isolated_env: dict[str, str]
                                                                                  ) -> None:
    """40 plain GETs (no websocket upgrade) to the websocket's address, on the class network and on this machine
    alone: each is refused (400) before it takes a seat, so the class is not full, a tab opens, no folder is left
    and the console says so in one line, not forty; SIGTERM then ends the server with 143 and leaves nothing."""
    env, tmp = served_env(isolated_env, tmp_path)
    for host in ("0.0.0.0", "127.0.0.1"):
        with serving("--max-sessions", "2", env=env, host=host) as served:
            token = served.url.split("token=")[1] if "token=" in served.url else "-"

            async def check(served: Served = served, token: str = token) -> None:
                async with aiohttp.ClientSession() as client:
                    for _ in range(40):
                        async with client.get(f"http://127.0.0.1:{served.port}/ws/{token}") as response:
                            assert response.status == 400
                    async with client.get(served.url) as response:
                        assert response.status == 200  # not full
                    tabs = [await open_tab(client, served) for _ in range(2)]
                    for tab in tabs:
                        await tab.screen_says("Lessons")
                    assert len(session_folders(tmp)) == 2
                    served.process.send_signal(signal.SIGTERM)
                    await tabs[0].screen_says("the server was stopped")
                    assert served.process.wait(30) == EXIT_TERMINATED

            asyncio.run(check())
            served.said("2 session(s) closed")
            refusals = [line for line in served.lines if "a plain request for a websocket" in line]
            assert len(refusals) == 1, served.lines
            assert not any("Traceback" in line for line in served.lines), served.lines
        assert session_folders(tmp) == []


def test_sigterm_with_a_websocket_half_open_exits_143_and_leaves_nothing(tmp_path: Path,
                                                                          isolated_env: dict[str, str]) -> None:
    """A client that sent its upgrade request but never reads the answer, and another that only opened a TCP
    connection: SIGTERM still ends the server with 143, with no process and no folder left."""
    env, tmp = served_env(isolated_env, tmp_path)
    with serving(env=env) as served:
        idle = socket.create_connection(("127.0.0.1", served.port))
        half = socket.create_connection(("127.0.0.1", served.port))
        half.sendall(b"GET /ws/-?width=80&height=24 HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     b"Sec-WebSocket-Version: 13\r\n\r\n")
        served.said("session 1: opened")
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(30) == EXIT_TERMINATED
        idle.close()
        half.close()
    assert session_folders(tmp) == []
    assert not any("Traceback" in line for line in served.lines), served.lines


def test_the_host_header_is_checked_and_escaped_and_foreign_origins_are_refused(isolated_env: dict[str, str]
                                                                                ) -> None:
    """The page copies the Host header into the websocket's address: one that is no host name is refused (400),
    and what is copied is escaped. On this machine alone (no token) only this machine's names are served (a
    foreign name pointed at 127.0.0.1 is DNS rebinding). A websocket opened by another site's page (its Origin)
    is refused (403), and the console says each."""
    with serving(env=isolated_env, host="0.0.0.0") as served:
        async def check() -> None:
            async with aiohttp.ClientSession() as client:
                evil = 'evil.example"><script>alert(1)</script>'
                async with client.get(served.url, headers={"Host": evil}) as response:
                    assert response.status == 400 and "<script>" not in await response.text()
                async with client.get(served.url, headers={"Host": "class.example:8000"}) as response:
                    page = await response.text()
                    assert response.status == 200 and 'data-session-websocket-url="ws://class.example:8000/ws/' in page
                url = websocket_url(served)
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await client.ws_connect(url, headers={"Origin": "http://evil.example"})
                assert refused.value.status == 403
                tab = await client.ws_connect(url, headers={"Origin": f"http://127.0.0.1:{served.port}"})
                await tab.close()
                async with client.get(f"http://127.0.0.1:{served.port}/favicon.ico") as response:
                    assert response.status == 200 and response.content_type == "image/svg+xml"

        asyncio.run(check())
        served.said("a page from 'http://evil.example', not this server's")
        served.said("a Host header that is no host name")
    with serving(env=isolated_env) as local:
        async def rebinding() -> None:
            async with aiohttp.ClientSession() as client:
                async with client.get(local.url, headers={"Host": f"rebound.example:{local.port}"}) as response:
                    assert response.status == 400
                async with client.get(local.url, headers={"Host": f"localhost:{local.port}"}) as response:
                    assert response.status == 200

        asyncio.run(rebinding())
        local.said("not this machine's name")


def test_one_address_gets_max_per_address_seats(isolated_env: dict[str, str]) -> None:
    with serving("--max-per-address", "2", env=isolated_env) as served:
        async def check() -> None:
            async with aiohttp.ClientSession() as client:
                tabs = [await open_tab(client, served) for _ in range(2)]
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await client.ws_connect(websocket_url(served))
                assert refused.value.status == 429
                await tabs[0].websocket.close()
                served.said("session 1: closed")
                third = await open_tab(client, served)  # a seat of its address is free again
                await third.screen_says("Lessons")

        asyncio.run(check())
        served.said("2 tabs are open from its address already")


def test_a_huge_request_line_an_oversized_message_and_a_silent_tab_are_said_in_one_line_each(
        isolated_env: dict[str, str]) -> None:
    """A request line of 100 KB (five times): one line on the console, no traceback. A websocket message over
    the limit, and a tab that stops answering pings, each close their session, and the console says which."""
    with serving(env=isolated_env) as served:
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", served.port)) as raw:
                raw.sendall(b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                assert raw.recv(100).split(b" ")[1] == b"400"

        async def check() -> None:
            async with aiohttp.ClientSession() as client:
                big = await open_tab(client, served)
                await big.screen_says("Lessons")
                with contextlib.suppress(ConnectionError):  # the server may close it before the whole is sent
                    await big.websocket.send_str(json.dumps(["stdin", "x" * (5 * 2**20)]))
                served.said("session 1: closed a message over 4 MB")
                silent = await client.ws_connect(websocket_url(served), autoping=False)
                served.said("session 2: opened")
                served.said("session 2: closed the tab stopped answering", timeout=60)
                await silent.close()

        asyncio.run(check())
    assert len([line for line in served.lines if "refused a malformed request" in line]) == 1, served.lines
    assert any("stopped answering pings" in line for line in served.lines), served.lines
    assert not any("Traceback" in line for line in served.lines), served.lines


def test_on_every_address_the_console_names_this_machines_network_addresses(monkeypatch: pytest.MonkeyPatch
                                                                             ) -> None:
    """With --host 0.0.0.0 the address printed is one students can reach: an interface's, not loopback's, not
    link-local's, not a host name's (which may resolve to 127.0.0.1 alone)."""
    import psutil

    from decode_tui.cli.classroom import ClassroomOptions
    from decode_tui.cli.serve import addresses

    def entry(address: str, family: socket.AddressFamily = socket.AF_INET) -> Any:
        return SimpleNamespace(family=family, address=address)

    def stats(up: bool) -> Any:
        return SimpleNamespace(isup=up)

    monkeypatch.setattr(psutil, "net_if_addrs", lambda: {
        "lo": [entry("127.0.0.1")], "eth0": [entry("192.168.1.23"), entry("fe80::1", socket.AF_INET6)],
        "wlan0": [entry("169.254.3.4")], "down0": [entry("10.0.0.9")]})
    monkeypatch.setattr(psutil, "net_if_stats", lambda: {"lo": stats(True), "eth0": stats(True),
                                                         "wlan0": stats(True), "down0": stats(False)})
    options = ClassroomOptions(host="0.0.0.0", port=8123, token="t0k")
    assert addresses(options) == ["http://192.168.1.23:8123/?token=t0k"]
    monkeypatch.setattr(psutil, "net_if_addrs", lambda: {"lo": [entry("127.0.0.1")]})
    assert addresses(options) == ["http://127.0.0.1:8123/?token=t0k"]  # no network: this machine's own
    assert addresses(ClassroomOptions(port=8123)) == ["http://127.0.0.1:8123/"]


def test_the_theme_reaches_every_process_a_tab_runs(tmp_path: Path) -> None:
    """--theme goes to the start screen, and to the lesson and the replay chosen there."""
    from decode_tui.cli.classroom import ClassroomOptions

    classroom = Classroom(ClassroomOptions(theme="presenter"), lambda _line: None)
    ran = stand_in_runs(classroom, ["lesson:greedy-vs-sampling", "race", None])
    asyncio.run(classroom.run_session(Session(1, None, (80, 24), tmp_path)))  # type: ignore[arg-type]
    assert [argv[argv.index("--theme") + 1] for argv in ran] == ["presenter"] * 5
    assert [next(a for a in argv if a in ("lessons", "lesson", "replay")) for argv in ran] == [
        "lessons", "lesson", "lessons", "replay", "lessons"]
    # Back on the list, the entry played last is highlighted.
    assert [argv[argv.index("--highlight") + 1] if "--highlight" in argv else None for argv in ran[::2]] == [
        None, "lesson:greedy-vs-sampling", "race"]


def test_the_fork_server_runs_commands_reports_their_ends_and_takes_its_children_with_it(tmp_path: Path) -> None:
    """cli/forkserver.py: a child runs a decode-tui command line in its folder with its own environment and pipes,
    and its exit status comes back (0; 2 for a usage error; 137 when its process group is killed); when the
    classroom closes the server, the children it still has end with it."""
    from decode_tui.cli.forkserver import ForkServer

    async def check() -> None:
        forks = ForkServer({**os.environ, **APP_ENV})
        await forks.start()
        listed = await forks.spawn(["lessons", "--list", "--format", "json"], str(tmp_path), dict(os.environ))
        assert listed.stdout is not None
        out = await listed.stdout.read()
        assert await listed.wait() == 0
        assert [lesson["name"] for lesson in json.loads(out)] == [lesson.name for lesson in shipped()]
        refused = await forks.spawn(["lesson", "no-such-lesson"], str(tmp_path), dict(os.environ))
        assert await refused.wait() == EXIT_USAGE
        env = {**os.environ, **APP_ENV, "COLUMNS": "100", "ROWS": "30"}
        waiting = [await forks.spawn(["lessons", "--choice-file", str(tmp_path / f"choice{i}")], str(tmp_path), env)
                   for i in range(2)]
        assert waiting[0].stdout is not None
        assert b"__GANGLION__" in await waiting[0].stdout.readline()  # the web driver's prelude: an app is up
        assert all(psutil.Process(child.pid).cwd() == str(tmp_path) for child in waiting)
        os.killpg(waiting[0].pid, signal.SIGKILL)
        assert await waiting[0].wait() == 137
        still = waiting[1].pid
        await forks.close()
        deadline = time.monotonic() + 10
        while psutil.pid_exists(still) and psutil.Process(still).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "a child outlived its fork server"
            await asyncio.sleep(0.05)

    asyncio.run(check())


def test_tabs_take_ready_start_screens_at_their_own_size_and_the_pool_fills_again(tmp_path: Path,
                                                                                  isolated_env: dict[str, str]
                                                                                  ) -> None:
    """``--ready-tabs 2``: two start screens are started before any tab comes; of three tabs the first two take
    them (their first frames drawn already, then redrawn at the tab's own size) and the third starts its own; a
    ready one plays what its tab chooses in its tab's folder; once the tabs have gone the pool is filled again, and
    SIGTERM then leaves no process and no folder (serving's checks)."""
    log = tmp_path / "sessions.jsonl"
    with serving("--record-sessions", str(log), env=isolated_env, ready_tabs=2) as served:
        served.said("2 start screen(s) ready for the next tabs")
        assert len(served.sessions()) == 2  # started before any tab came

        async def check() -> None:
            async with aiohttp.ClientSession() as client:
                tabs = [await open_tab(client, served) for _ in range(3)]  # sessions 1, 2 and 3
                for tab in tabs:
                    await tab.screen_says("Lessons")
                served.said("session 3: opened")
                opened = [line.split(" ", 1)[1] for line in served.lines if ": opened" in line]
                assert opened == ["session 1: opened on a ready start screen",
                                  "session 2: opened on a ready start screen", "session 3: opened"], served.lines
                number, tab = 2, tabs[1]
                # Started at 80x24, it redraws at the tab's 40 rows: its footer on the 40th.
                deadline = time.monotonic() + 30
                while "\x1b[40;1H" not in tab.received:
                    assert time.monotonic() < deadline, "the ready start screen was not redrawn at the tab's size"
                    message = await tab.websocket.receive(timeout=30)
                    tab.received += message.data.decode("utf-8", "replace")
                await tab.keys("\x1b[B\r")  # the second lesson, chosen on the ready screen
                await tab.screen_says("REPLAY of the lesson's recording")
                served.said(f"session {number}: played lesson {shipped()[1].name}")  # its choice file was read
                for each in tabs:
                    await each.websocket.close()

        asyncio.run(check())
        served.said("session 3: closed")
        deadline = time.monotonic() + 60
        while sum("start screen(s) ready" in line for line in served.lines) < 2:
            assert time.monotonic() < deadline, f"the pool was not filled again: {served.lines}"
            time.sleep(0.1)
    events = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert sum(e["event"] == "opened" and e.get("what") == "on a ready start screen" for e in events) == 2


def ready_screens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_env: dict[str, str], argv: list[str],
                  said: list[str], **constants: float) -> ReadyScreens:
    """A pool of one ready process running ``decode-tui ARGV`` (started from scratch: no fork server), its folders
    in ``tmp_path``; ``constants`` override the pool's (QUIET_S, MAX_KEPT_BYTES...)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for variable, setting in {**isolated_env, **APP_ENV}.items():
        monkeypatch.setenv(variable, setting)
    pool = ReadyScreens(Processes(said.append), lambda _folder: argv, 1)
    for name, value in constants.items():
        monkeypatch.setattr(pool, name, value)
    return pool


def test_a_ready_start_screen_that_ends_by_itself_stops_the_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 isolated_env: dict[str, str]) -> None:
    """A start screen that fails at its start would fail again: the console says so once, no more are started, and
    its folder is removed; the tabs start their own (and show why it failed, as without a pool)."""
    said: list[str] = []
    pool = ready_screens(tmp_path, monkeypatch, isolated_env, ["lesson", "no-such-lesson"], said)

    async def check() -> None:
        await asyncio.wait_for(pool.keep_filled(), 60)  # it returns once the pool has stopped
        assert pool.take() is None
        await pool.close()

    asyncio.run(check())
    assert [line for line in said if "ready" in line] == [
        f"a ready start screen ended by itself (exit {EXIT_USAGE}): no more are kept ready; each tab starts its own"]
    assert list(tmp_path.glob("decode-tui-session-*")) == []


def test_a_ready_start_screen_that_keeps_drawing_with_no_tab_is_replaced(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        isolated_env: dict[str, str]) -> None:
    """Frames kept for no tab past MAX_KEPT_BYTES (here 0: the first frame is past it) replace the process with a
    new one, its folder removed with it; closing the pool ends the last one and removes its folder."""
    said: list[str] = []
    pool = ready_screens(tmp_path, monkeypatch, isolated_env, ["lessons", "--choice-file", "choice"], said,
                         MAX_KEPT_BYTES=0, QUIET_S=0.0)

    async def check() -> None:
        filling = asyncio.create_task(pool.keep_filled())
        pids: list[int] = []
        deadline = time.monotonic() + 60
        while len(pids) < 2:
            assert time.monotonic() < deadline, f"never replaced: {said}"
            if pool.ready and pool.ready[0].process.pid not in pids:
                pids.append(pool.ready[0].process.pid)
            await asyncio.sleep(0.05)
        filling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await filling
        assert not psutil.pid_exists(pids[0]) or psutil.Process(pids[0]).status() == psutil.STATUS_ZOMBIE
        await pool.close()
        assert not psutil.pid_exists(pids[1]) or psutil.Process(pids[1]).status() == psutil.STATUS_ZOMBIE

    asyncio.run(check())
    assert list(tmp_path.glob("decode-tui-session-*")) == []


def test_a_ready_start_screen_whose_tab_went_before_it_was_shown_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     isolated_env: dict[str, str]) -> None:
    """A tab closed between taking a ready start screen and its session's first process: the ready one ends with the
    session, not with the server."""
    from decode_tui.cli.classroom import ClassroomOptions

    said: list[str] = []
    pool = ready_screens(tmp_path, monkeypatch, isolated_env, ["lessons", "--choice-file", "choice"], said,
                         QUIET_S=0.0)

    async def check() -> None:
        filling = asyncio.create_task(pool.keep_filled())
        deadline = time.monotonic() + 60
        while not (pool.ready and pool.ready[0].drawn(0.0)):
            assert time.monotonic() < deadline, said
            await asyncio.sleep(0.05)
        filling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await filling
        ready = pool.take()
        assert ready is not None
        session = Session(1, None, (80, 24), ready.folder, closing="the tab was closed")  # type: ignore[arg-type]
        await Classroom(ClassroomOptions(), said.append).run_session(session, ready)
        assert ready.process.returncode is not None and not ready.folder.exists()
        await pool.close()

    asyncio.run(check())
