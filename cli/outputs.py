"""Files a command writes to (a recording, a race, a cast): checked before any work starts, and claimed.

A run measured for a minute, or an app that opens, must not end in a write error that loses the work, and two
processes must not write one file at once: each rewrites it, and the file would hold one run while the other, with
nothing said, is gone. So a command checks its output file before it loads anything and takes an exclusive
advisory lock on it (``flock``) that it holds until it exits; a second decode-tui that names the same file is
refused at once, with the file it could use instead. It knows paths and locks, nothing about what is written.
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path
from typing import TextIO

from ..core.errors import UsageError

# The files this process has claimed, by their real path: held open (and locked) until the process exits, when the
# operating system drops the locks. One process claims a file once: a second check of it (another command run in
# the same process, as tests do) finds it already its own.
_CLAIMED: dict[Path, TextIO] = {}


def check_output(path: Path, what: str) -> None:
    """Refuse, before any work starts, an output file that cannot be written or that another process is writing,
    and claim it for this one. Opened for appending (never truncated) as the real write will be, so a read-only
    folder, a path under a file or /proc are all caught; a file made only for the check is removed at exit if
    nothing was written to it."""
    if path.is_dir():
        raise UsageError(f"Cannot {what} to {path}: it is a folder. Name a file in it, e.g. {path / 'run.jsonl'}.")
    folder = path.parent
    if not folder.exists():
        raise UsageError(f"Cannot {what} to {path}: the folder {folder} does not exist.")
    key = path.resolve()
    if key in _CLAIMED:
        return
    existed = path.exists()
    try:
        handle = path.open("a", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"Cannot {what} to {path}: {exc.strerror or exc}. Pick a file in a folder you can write."
                         ) from None
    if not _lock(handle):
        handle.close()
        other = path.with_name(f"{path.stem}-2{path.suffix}")
        raise UsageError(f"Cannot {what} to {path}: another process (another decode-tui?) is writing to it now, and "
                         f"one of the two runs would be lost. Name another file, e.g. {other}.")
    _CLAIMED[key] = handle
    if not existed:
        atexit.register(_remove_if_empty, path)


def _lock(handle: TextIO) -> bool:
    """An exclusive lock on the open file, without waiting; True where the platform has no flock (Windows):
    there the file is checked but not claimed."""
    try:
        import fcntl
    except ImportError:
        return True
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _remove_if_empty(path: Path) -> None:
    """A file this process made for its check and never wrote (the app closed before a run) is not left behind."""
    try:
        if path.exists() and os.path.getsize(path) == 0:
            path.unlink()
    except OSError:
        pass
