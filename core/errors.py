"""Errors the core raises for problems a user can fix.

Each error carries a one-paragraph message that says what is wrong and what to
do, and the process exit code a command-line front end should use. The core
does not print or exit: front ends decide how to show these.
"""

from __future__ import annotations

# Exit codes, shared by every front end.
EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2  # bad option, prompt or parameter
EXIT_MODEL_UNAVAILABLE = 3  # the model is not on this machine and cannot be fetched
# A constrained run that stopped (--max-new-tokens) before its output satisfied the constraint: the output is a valid
# start, not a valid whole, and a script that reads it must be able to tell without parsing stderr.
EXIT_INCOMPLETE = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell convention for Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM: ended by `kill`, as cleanly as by Ctrl-C


class DecodeTuiError(Exception):
    """A problem with a message meant for the user, not a traceback."""

    exit_code: int = EXIT_INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(DecodeTuiError):
    """Bad input: an option, a parameter or a prompt the user can correct."""

    exit_code = EXIT_USAGE


class ModelUnavailableError(DecodeTuiError):
    """The model is not on disk here and there is no way to get it now."""

    exit_code = EXIT_MODEL_UNAVAILABLE


class ModelLoadError(DecodeTuiError):
    """The files are there but transformers could not build a model from them."""

    exit_code = EXIT_MODEL_UNAVAILABLE


def first_line(exc: BaseException, width: int) -> str:
    """An unexpected error in one line for a note: its type and the first line (at most ``width`` characters) of its
    root cause. torch.compile wraps a backend's error in one that names only the backend, hence the unwrapping."""
    while True:
        inner = getattr(exc, "inner_exception", None) or exc.__cause__
        if not isinstance(inner, BaseException):
            break
        exc = inner
    line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"{type(exc).__name__}: {line[:width]}"
