"""The ``decode-tui`` entry point: the commands (cli/commands.py), with no traceback for Ctrl-C or a closed pipe.

The command line is four files: cli/options.py (each option defined once,
and the config they become), cli/headless.py (``generate``'s output),
cli/commands.py (the commands themselves) and cli/teaching.py (the lessons).
"""

from __future__ import annotations

import sys

from ..core.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, DecodeTuiError
from . import teaching  # noqa: F401  (registers the lessons, lesson and race commands on the app)
from .commands import app
from .headless import generate
from .options import read_prompt

__all__ = ["app", "generate", "main", "read_prompt"]


def main() -> None:
    """Console-script entry point: no traceback reaches the user for Ctrl-C or a closed pipe."""
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("\ndecode-tui: interrupted.\n")
        sys.exit(EXIT_INTERRUPTED)
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
