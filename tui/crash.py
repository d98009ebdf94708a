"""An unexpected exception in the app or its decoder thread: its traceback written to a file, and the one line that
says where.

The app draws on the terminal it would print a traceback to, so the traceback goes to a file under the cache
(``$DECODE_TUI_CACHE`` or ``~/.cache/decode-tui``, ``crashes/``; the system's temporary folder where that cannot be
written) and the user is told where, once the terminal is restored. It knows nothing of widgets or runs.
"""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from pathlib import Path

from ..core.model.registry import cache_root


def write_report(error: BaseException) -> Path | None:
    """Write ``error``'s traceback to a new file; its path, or None where no folder could take it."""
    text = "".join(traceback.format_exception(error))
    name = f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    for folder in (cache_root() / "crashes", Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / name
            path.write_text(text, encoding="utf-8")
            return path
        except OSError:
            continue
    return None


def one_line(error: BaseException, report: Path | None, what: str = "the app") -> str:
    """What the user reads of ``error``, which stopped ``what`` (the app, or a run in the decoder thread)."""
    where = f"the traceback is in {report}" if report is not None else "its traceback could not be written"
    return (f"decode-tui: {what} stopped on an unexpected error ({type(error).__name__}: {error}); {where}. "
            "Please report it.")
