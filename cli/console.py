"""The console every command speaks on: stderr, a spinner or plain progress lines, and a clean failure."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

import typer

from ..core.errors import DecodeTuiError

if TYPE_CHECKING:
    from rich.console import Console


def stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def fail(err: DecodeTuiError) -> NoReturn:
    stderr().print(f"[bold red]decode-tui:[/] {err.message}", soft_wrap=True, markup=True)
    raise typer.Exit(err.exit_code)


@contextmanager
def status(message: str) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr when it is a terminal, plain lines otherwise; yields a callback for progress messages."""
    console = stderr()
    if console.is_terminal:
        with console.status(message) as status:
            yield lambda msg: status.update(msg)
    else:
        console.print(message)
        said = [message]

        def say(msg: str) -> None:
            if msg != said[-1]:  # the callee often opens with the words the caller just printed
                console.print(msg)
                said.append(msg)

        yield say
