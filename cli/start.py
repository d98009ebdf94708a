"""The start screen's loop (``decode-tui lessons`` in a terminal): the list, then the entry chosen, played by the
command a user would type for it (``decode-tui lesson NAME``, ``decode-tui replay FILE``), then the list again.

The entry plays in a child process that takes the terminal, so it plays exactly as that command does and its
memory goes with it. While it runs, Ctrl-C reaches the child alone (the terminal sends it to both; this process
ignores it meanwhile) and ends everything, as it would have ended that command; q in the child comes back here.
SIGTERM here is passed on to the child. Under ``decode-tui serve`` (``--choice-file``) the screen writes the key
chosen there and exits: the server plays it (cli/serve.py).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import NoReturn

import typer

from ..core.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, UsageError
from .commands import need_terminal
from .console import fail


def decode_tui_argv(args: list[str]) -> list[str]:
    """The command line that runs ``decode-tui ARGS`` with this interpreter (the same install as this one)."""
    return [sys.executable, "-m", "decode_tui.cli", *args]


def start_screen(recordings: Path | None, *, live: bool, theme: str | None, choice_file: Path | None,
                 notice: str | None, highlight: str | None = None) -> NoReturn:
    """Show the start screen until the user leaves it (exit 0), Ctrl-C (130) or SIGTERM (143)."""
    from ..tui.catalog import command_for, entries
    from ..tui.start_app import StartApp

    try:
        need_terminal("lessons")
    except UsageError as err:
        fail(err)
    while True:
        app_ = StartApp(entries(recordings), notice=notice, live=live, theme=theme, highlight=highlight)
        key = app_.run()
        if app_.return_code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
            raise typer.Exit(app_.return_code)
        if key is None:
            raise typer.Exit(0)
        if choice_file is not None:
            choice_file.write_text(key, encoding="utf-8")
            raise typer.Exit(0)
        try:
            args = command_for(key, recordings, live=live)
        except UsageError as err:  # the folder changed under the list: say so over the list again
            notice = err.message
            continue
        highlight = key  # back on the list, the entry just played
        code = play(decode_tui_argv([*args, "--from-list", *(["--theme", theme] if theme else [])]))
        if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
            raise typer.Exit(code)
        notice = None if code == 0 else (f"`decode-tui {' '.join(args)}` ended with exit status {code}; what it "
                                         "said is in the terminal once you leave this list.")


def play(argv: list[str]) -> int:
    """Run ``argv`` in the foreground of this terminal and return its exit status: SIGINT is the child's alone
    meanwhile, and a SIGTERM here ends the child first (143)."""
    child = subprocess.Popen(argv)
    terminated = False

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        nonlocal terminated
        terminated = True
        child.terminate()

    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    previous_term = signal.signal(signal.SIGTERM, on_term)
    try:
        code = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)
    return EXIT_TERMINATED if terminated else code
