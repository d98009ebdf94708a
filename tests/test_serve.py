"""``decode-tui serve`` over HTTP and its websocket, as a browser speaks to it but with no browser (the browser
tests are tests/test_browser.py): the token, the caps, the idle timeout, hostile messages, a tab closed mid-lesson,
SIGTERM and a port in use. Each test runs the console script as a teacher would, on a port of its own."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from pathlib import Path

import aiohttp
import pytest

from decode_tui.core.errors import EXIT_TERMINATED, EXIT_USAGE
from decode_tui.lessons import shipped

from .serving import all_end, free_port, open_tab, serving, websocket_url
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
    with serving(env=isolated_env) as served:
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


def test_a_crafted_choice_is_refused_in_the_tab_and_the_list_comes_back(tmp_path: Path,
                                                                        isolated_env: dict[str, str]) -> None:
    """The start screen's process writes the key chosen; the server plays only a key on the list. Where another
    comes back (here from a stand-in for the start screen's process that writes crafted keys), nothing else runs:
    the list comes back, with the refusal said in it."""
    from decode_tui.cli.classroom import Classroom, ClassroomOptions, Session

    said: list[str] = []
    classroom = Classroom(ClassroomOptions(), said.append)
    ran: list[list[str]] = []
    choices = iter(["lesson:../../etc/passwd", "recording:x.jsonl", "live:why-trees", None])

    async def fake_run(session: Session, argv: list[str]) -> int:
        ran.append(argv)
        choice_file = Path(argv[argv.index("--choice-file") + 1])
        choice = next(choices)
        if choice is not None:
            choice_file.write_text(choice, encoding="utf-8")
        return 0

    classroom.run_process = fake_run  # type: ignore[method-assign]
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
    from decode_tui.cli.classroom import Classroom, ClassroomOptions, Session

    said: list[str] = []
    classroom = Classroom(ClassroomOptions(live=True, max_live=1), said.append)
    other = Session(2, None, (80, 24), tmp_path / "other", playing="lesson why-trees (live)",  # type: ignore[arg-type]
                    live=True)
    classroom.sessions[2] = other
    (tmp_path / "mine").mkdir()
    session = Session(1, None, (80, 24), tmp_path / "mine")  # type: ignore[arg-type]
    classroom.sessions[1] = session
    ran: list[list[str]] = []
    choices = iter(["live:greedy-vs-sampling", "live:greedy-vs-sampling", None])

    async def fake_run(session: Session, argv: list[str]) -> int:
        ran.append(argv)
        if "lessons" in argv:
            choice = next(choices)
            if choice is not None:
                (session.folder / "choice").write_text(choice, encoding="utf-8")
            if "--notice" in argv:  # the refusal was shown: the other tab's live run ends meanwhile
                other.live = False
        return 0

    classroom.run_process = fake_run  # type: ignore[method-assign]
    asyncio.run(classroom.run_session(session))
    notice = ran[1][ran[1].index("--notice") + 1]
    assert "Live runs are full: 1 of 1" in notice and "--live" in ran[1]
    assert ran[2][-3:] == ["lesson", "greedy-vs-sampling", "--live"]  # under the cap now: it plays
    assert len(ran) == 4 and "lessons" in ran[3]
