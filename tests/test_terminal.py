"""The command line against terminals, signals and paths: no terminal, a pipe on stdin, SIGTERM, bad outputs,
bad caches and config files. Each runs the console script as a user would (tmux stands in for a terminal)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from decode_tui.core.errors import EXIT_TERMINATED, EXIT_USAGE

from .serving import SCRIPT
from .test_cli import assert_clean_failure, cli, signalled_jsonl_run

LESSON = Path(__file__).parent.parent / "lessons" / "01-greedy-vs-sampling.jsonl"


def test_an_app_with_no_terminal_to_read_keys_from_is_refused(isolated_env: dict[str, str]) -> None:
    """`echo hi | decode-tui run` with no terminal behind it drew the app, ignored every key and spun."""
    for args in (["run"], ["replay", str(LESSON)], ["lesson", "greedy-vs-sampling"]):
        done = subprocess.run([SCRIPT, *args], input="hi\n", capture_output=True, text=True, env=isolated_env,
                              timeout=60, start_new_session=True)  # a new session: no controlling terminal
        assert_clean_failure(done, EXIT_USAGE, "reads its keys from a terminal", "decode-tui generate")
    dumb = subprocess.run([SCRIPT, "replay", str(LESSON)], capture_output=True, text=True, timeout=60,
                          env={**isolated_env, "TERM": "dumb"})
    assert_clean_failure(dumb, EXIT_USAGE, "TERM=dumb")


def test_an_app_served_to_a_browser_takes_its_pipes_for_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """textual-serve runs the app with textual's web driver, whose keys and frames travel over standard input and
    output, pipes by design: that is not refused. The control: any other driver with pipes and no terminal is."""
    import io
    import sys

    from decode_tui.cli import commands
    from decode_tui.core.errors import UsageError

    monkeypatch.setattr(sys, "stdin", io.StringIO())  # a pipe, not a terminal
    monkeypatch.delenv("TERM", raising=False)

    def no_terminal(*args: object) -> int:
        raise OSError("no controlling terminal")

    monkeypatch.setattr(os, "open", no_terminal)
    monkeypatch.setenv("TEXTUAL_DRIVER", commands.WEB_DRIVER)
    commands.need_terminal("lesson")  # no UsageError, no /dev/tty opened
    monkeypatch.setenv("TEXTUAL_DRIVER", "textual.drivers.headless_driver:HeadlessDriver")
    with pytest.raises(UsageError, match="reads its keys from a terminal"):
        commands.need_terminal("lesson")


@pytest.fixture()
def tmux(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``tmux(*args)`` on a server of this test's own; the server is killed afterwards."""
    socket = f"decode-tui-term-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "TERM": "xterm-256color", "DECODE_TUI_CACHE": str(tmp_path / "cache"),
           "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    env.pop("NO_COLOR", None)
    for size in ("COLUMNS", "LINES"):  # Textual takes these over the terminal's size; a pytest worker may have them
        env.pop(size, None)
    base = ["tmux", "-L", socket, "-f", "/dev/null"]

    def run(*args: str) -> str:
        return subprocess.run([*base, *args], capture_output=True, text=True, env=env, check=True).stdout

    yield run
    subprocess.run([*base, "kill-server"], capture_output=True, env=env)


def wait(condition: Callable[[], bool], what: str, timeout: float = 60, shows: Callable[[], str] | None = None
         ) -> None:
    """Wait for ``condition``; on a timeout, say what ``shows`` (the terminal's screen, say) shows then."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f"; it shows:\n{shows()}" if shows else ""))
        time.sleep(0.2)


def test_with_a_pipe_on_stdin_the_app_reads_keys_from_the_terminal(tmux: Callable[..., str], tmp_path: Path) -> None:
    status = tmp_path / "status"
    command = f"echo hi | {shlex.quote(SCRIPT)} replay --paused {shlex.quote(str(LESSON))}; echo $? > {status}"
    tmux("new-session", "-d", "-s", "t", "-x", "120", "-y", "36", command)
    wait(lambda: "decode-tui" in tmux("capture-pane", "-p", "-t", "t"), "the app to draw")
    tmux("send-keys", "-t", "t", "q")
    wait(status.exists, "the app to quit on q")
    assert status.read_text().strip() == "0"


def test_sigterm_ends_the_app_as_ctrl_c_does_and_gives_the_terminal_back(tmux: Callable[..., str],
                                                                           tmp_path: Path) -> None:
    """Killed by the default handler the app left the terminal in the alternate screen with mouse tracking on."""
    status = tmp_path / "status"
    # The shell stays (remain-on-exit is not needed): after the app, it waits, so the pane's modes can be read.
    command = (f"{shlex.quote(SCRIPT)} replay --paused {shlex.quote(str(LESSON))}; echo $? > {status}; "
               "sleep 30")
    tmux("new-session", "-d", "-s", "t", "-x", "120", "-y", "36", command)
    wait(lambda: "decode-tui" in tmux("capture-pane", "-p", "-t", "t"), "the app to draw")
    assert tmux("display", "-p", "-t", "t", "#{alternate_on}").strip() == "1"
    shell = int(tmux("display", "-p", "-t", "t", "#{pane_pid}").strip())
    children = subprocess.run(["pgrep", "-P", str(shell)], capture_output=True, text=True).stdout.split()
    app = next(int(pid) for pid in children if "decode-tui" in Path(f"/proc/{pid}/cmdline").read_text())
    os.kill(app, signal.SIGTERM)
    wait(status.exists, "the app to end on SIGTERM")
    assert status.read_text().strip() == str(EXIT_TERMINATED)
    modes = tmux("display", "-p", "-t", "t", "#{alternate_on} #{mouse_any_flag} #{mouse_standard_flag}").split()
    assert modes == ["0", "0", "0"], "the alternate screen and the mouse tracking were left on"


def test_sigterm_during_generate_writes_the_finished_event(tiny_model_dir: Path,
                                                           isolated_env: dict[str, str]) -> None:
    code, lines, err = signalled_jsonl_run(tiny_model_dir, isolated_env, signal.SIGTERM)
    assert code == EXIT_TERMINATED, err
    assert "Traceback" not in err and "terminated after" in err
    final = lines[-1]
    assert final["event"] == "finished" and final["finish_reason"] == "cancelled"
    assert final["token_ids"] == [x["token_id"] for x in lines if x["event"] == "token_emitted"]


def test_output_paths_are_checked_before_any_work(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    """A race measured for a minute then lost to a folder given as --record; `run --record DIR` opened an app
    that never decoded and exited 0."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for path, says in ((tmp_path, "it is a folder"), (a_file / "x.jsonl", "Not a directory"),
                       (Path("/proc/decode-tui.jsonl"), "Pick a file in a folder you can write")):
        for args in (["race", "--no-play", "--record", str(path)], ["run", "--record", str(path)],
                     ["replay", str(LESSON), "--cast", str(path)]):
            started = time.monotonic()
            assert_clean_failure(cli(*args, env=isolated_env), EXIT_USAGE, says)
            assert time.monotonic() - started < 60, "refused before any model was loaded or measured"
    assert a_file.read_text() == "x" and not (tmp_path / "run.jsonl").exists()


def test_a_cache_that_cannot_be_written_and_a_named_config_that_is_missing_say_what_to_do(
        tmp_path: Path, isolated_env: dict[str, str]) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for cache in ("/proc/decode-tui-cache", str(a_file / "cache")):
        env = {**isolated_env, "DECODE_TUI_CACHE": cache}
        assert_clean_failure(cli("generate", "-p", "hi", env=env), EXIT_USAGE, f"cache folder {cache} cannot be "
                             "written", "Set DECODE_TUI_CACHE")
        assert_clean_failure(cli("run", env=env), EXIT_USAGE, "Set DECODE_TUI_CACHE")
    env = {**isolated_env, "DECODE_TUI_CONFIG": str(tmp_path / "nonexistent.toml")}
    assert_clean_failure(cli("generate", "-p", "hi", env=env), EXIT_USAGE, "DECODE_TUI_CONFIG names the config file",
                         "does not exist")


@pytest.mark.parametrize("gap", [0.0, 0.05])
def test_ctrl_c_twice_exits_130_without_a_traceback(tiny_model_dir: Path, isolated_env: dict[str, str],
                                                    gap: float) -> None:
    """A second Ctrl-C while the first is being handled (or while the interpreter shuts down) printed an atexit
    traceback, or ended the process by the signal instead of exit status 130."""
    proc = subprocess.Popen([SCRIPT, "generate", "--model", str(tiny_model_dir), "-p",
                             "the quick brown fox the quick brown fox", "--max-new-tokens", "4000", "--no-chat"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=isolated_env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(20)  # it is decoding
    proc.send_signal(signal.SIGINT)
    time.sleep(gap)
    proc.send_signal(signal.SIGINT)
    rest, err = proc.stdout.read(), proc.stderr.read()
    proc.wait(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err + rest and "interrupted" in err


def test_a_second_ctrl_c_still_pending_when_the_clean_cut_begins_does_not_cut_it_short(
        byte_bpe: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The race behind a rare traceback, made certain: the first Ctrl-C lands mid-run, and a second is pending when
    the cut sets the handlers to ignore, a call that runs pending handlers (CPython's signal.signal checks for
    them), so our handler runs once more from inside it. The cut still ends the run cleanly: its text and figures
    out, exit 130, no KeyboardInterrupt escaping."""
    import typer

    from decode_tui.cli import headless
    from decode_tui.cli.flags import FormatChoice
    from decode_tui.core.errors import EXIT_INTERRUPTED
    from decode_tui.core.params import DecodeConfig

    from .conftest import tiny_model
    from .test_autoregressive import loaded

    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4), byte_bpe, 2)  # type: ignore[arg-type]
    real_signal = signal.signal

    def pending_second(signum: int, handler: object) -> object:
        current = signal.getsignal(signum)
        if handler is signal.SIG_IGN and callable(current):
            current(signum, None)  # the second Ctrl-C, pending until this call
        return real_signal(signum, handler)  # type: ignore[arg-type]

    writes = 0
    real_write = headless._write

    def write(out: object, text: str) -> None:
        nonlocal writes
        writes += 1
        if writes == 3:  # the first Ctrl-C, as the third piece of text goes out
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # type: ignore[operator, misc]
        real_write(out, text)  # type: ignore[arg-type]

    monkeypatch.setattr(signal, "signal", pending_second)
    monkeypatch.setattr(headless, "_write", write)
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(typer.Exit) as ended:
            headless._decode(lm, "ab ab ab", DecodeConfig(max_new_tokens=40), FormatChoice.text)
    except KeyboardInterrupt:  # caught here, so that a regression fails this test instead of stopping pytest
        pytest.fail("the second Ctrl-C escaped the clean cut as a KeyboardInterrupt")
    finally:  # the cut leaves the signals ignored, as a command about to exit wants; this process goes on
        for s, handler in previous.items():
            real_signal(s, handler)
    assert ended.value.exit_code == EXIT_INTERRUPTED
    assert "interrupted after" in capsys.readouterr().err


CRASHING_APP = '''
import sys
from pathlib import Path

import typer

from decode_tui.cli.commands import _run_app
from decode_tui.tui.app import DecodeApp
from decode_tui.tui.settings import Settings, with_mode
from tests.fake_decoder import FakeDecoder


class Broken(DecodeApp):
    """A bug in the app's drain, as suffix mode's busy label was: a KeyError half a second into the run."""

    CSS_PATH = str(Path(sys.modules[DecodeApp.__module__].__file__).parent / "app.tcss")

    def drain(self) -> None:
        super().drain()
        if self.view.counters.tokens >= 3:
            raise KeyError("suffix")


app = Broken(with_mode(Settings(), "suffix"), FakeDecoder(delay=0.3).source, record=Path(sys.argv[1]))
try:
    _run_app(app)
except typer.Exit as ended:
    sys.exit(ended.exit_code)
'''


def test_an_unexpected_exception_in_the_app_exits_1_restores_the_terminal_and_closes_the_recording(
        tmux: Callable[..., str], tmp_path: Path) -> None:
    """A crash exited 0, with a traceback and a recording cut off mid-run."""
    import json
    import sys

    script, record, status = tmp_path / "crash.py", tmp_path / "run.jsonl", tmp_path / "status"
    script.write_text(CRASHING_APP)
    root = Path(__file__).resolve().parents[1]
    command = (f"cd {shlex.quote(str(root))} && PYTHONPATH=. {shlex.quote(sys.executable)} {shlex.quote(str(script))} "
               f"{shlex.quote(str(record))}; echo $? > {status}; sleep 30")
    tmux("new-session", "-d", "-s", "t", "-x", "200", "-y", "36", command)
    wait(status.exists, "the app to end on its error")
    assert status.read_text().strip() == "1"
    modes = tmux("display", "-p", "-t", "t", "#{alternate_on} #{mouse_any_flag} #{mouse_standard_flag}").split()
    assert modes == ["0", "0", "0"], "the terminal was given back"
    said = " ".join(tmux("capture-pane", "-p", "-J", "-t", "t").split())
    assert "Traceback" not in said and "unexpected error (KeyError: 'suffix')" in said, said
    reports = list((tmp_path / "cache" / "crashes").glob("crash-*.txt"))
    assert len(reports) == 1 and "KeyError: 'suffix'" in reports[0].read_text()
    assert str(reports[0]) in said.replace(" ", ""), "the one line says where (a narrow console may wrap it)"
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    final = lines[-1]
    assert final["event"] == "finished" and final["finish_reason"] == "error" and "KeyError" in final["error"]
    tokens = [x["token_id"] for x in lines if x["event"] == "token_emitted"]
    assert tokens and final["token_ids"] == tokens and final["new_tokens"] == len(tokens)
