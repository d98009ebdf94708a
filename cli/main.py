"""The ``decode-tui`` entry point: the commands (cli/commands.py), with no traceback for Ctrl-C or a closed pipe.

The command line is these files: cli/flags.py (each option's declaration:
name, help, range check), cli/options.py (the options a decoding command
takes, and the config they become), cli/steering.py (--force and --resume),
cli/outputs.py (the files a command writes, checked and claimed),
cli/console.py (stderr, progress lines and a clean failure), cli/loads.py (the
models a command needs, checked before their weights load), cli/headless.py
(``generate``'s output), cli/measure.py (``bench``'s and
``whatif``'s), cli/commands.py (the commands themselves), cli/teaching.py
(the lessons), cli/start.py (the start screen's loop) and cli/serve.py with
cli/classroom.py (the classroom server), cli/admission.py (who may take a seat),
cli/processes.py (a session's processes) and cli/forkserver.py (where they are forked from).
"""

from __future__ import annotations

import signal
import sys
import threading

from ..core.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_TERMINATED, DecodeTuiError
from . import serve, teaching  # noqa: F401  (register serve; lessons, lesson and race on the app)
from .commands import app
from .headless import generate, ignore_signals
from .options import read_prompt

__all__ = ["app", "generate", "main", "read_prompt"]


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``), taken as Ctrl-C is: the same clean ending, with its own exit status."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def _interrupted(terminated: bool) -> None:
    """Say so and exit 130 (143 for SIGTERM), a second signal ignored from here."""
    ignore_signals()
    sys.stderr.write(f"\ndecode-tui: {'terminated' if terminated else 'interrupted'}.\n")
    sys.exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED)


def main() -> None:
    """Console-script entry point: no traceback reaches the user for Ctrl-C, SIGTERM or a closed pipe."""
    if threading.current_thread() is threading.main_thread():
        # A command that holds work (generate's run, an app) takes SIGTERM over while it does; elsewhere (a model
        # loading) it ends the command like Ctrl-C instead of killing it mid-write.
        signal.signal(signal.SIGTERM, _terminate)
    try:
        app()
    except KeyboardInterrupt as exc:
        _interrupted(isinstance(exc, Terminated))
    except SystemExit as exc:
        # typer turns a Ctrl-C it sees into a silent exit 130: say it as above.
        cause = getattr(exc.__context__, "__cause__", None)
        if isinstance(cause, KeyboardInterrupt):
            _interrupted(isinstance(cause, Terminated))
        raise
    except BrokenPipeError:
        # The reader went away (`| head`); stop quietly like other Unix tools.
        sys.stderr.close()
        sys.exit(0)
    except DecodeTuiError as err:  # raised outside a command's own handler
        sys.stderr.write(f"decode-tui: {err.message}\n")
        sys.exit(err.exit_code)
    except Exception as exc:  # a bug: one line, not a traceback, unless asked for
        import os

        if os.environ.get("DECODE_TUI_DEBUG"):
            raise
        sys.stderr.write(f"decode-tui: internal error: {type(exc).__name__}: {exc}. "
                         "Set DECODE_TUI_DEBUG=1 to see the traceback, and please report it.\n")
        sys.exit(EXIT_INTERNAL)
