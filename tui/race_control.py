"""The app's race key (R): greedy, prompt lookup and speculative decoding (and the mode on screen) on the prompt on
screen, each measured alone through the app's own source (tui/race_runner.py), then replayed side by side.

While it measures, the stats bar and the header say which mode and round it is at, until the race screen opens
(a toast alone went after a few seconds and left seconds of an unchanged screen). It knows the app only through
:class:`RaceHost`, what it needs of it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from ..core.record.events import Mode, Started
from .pump import EventPump
from .race_runner import RUNS, measure
from .run_view import Severity
from .screens.race import RaceScreen
from .settings import Settings
from .settings_control import replay_advice
from .sources import SourceFactory


class RaceHost(Protocol):
    """What a race needs of the app."""

    settings: Settings
    make_source: SourceFactory
    replaying: str | None
    from_list: bool
    pump: EventPump | None
    race_stop: threading.Event

    def say(self, message: str, severity: Severity = ...) -> None: ...
    def show_state(self, state: str) -> None: ...
    def stop_run(self) -> None: ...
    def call_from_thread(self, callback: Callable[..., Any], *args: Any) -> Any: ...
    def push_screen(self, screen: Any) -> Any: ...
    def run_worker(self, work: Callable[[], None], *, thread: bool, exclusive: bool, group: str,
                   name: str) -> Any: ...


def start_race(app: RaceHost) -> None:
    """Stop the run on screen and measure the race in the decoder thread (a replay refuses: it has no model)."""
    if app.replaying is not None:
        app.say(f"This is a replay of {app.replaying}, with no model: a race runs each mode on the model. "
                + replay_advice(app.from_list, "Race this prompt with `decode-tui race -p ...`, or press R in "
                                "`decode-tui run`."), severity="warning")
        return
    modes: list[Mode] = ["greedy", "pld", "speculative"]
    if app.settings.mode not in modes:
        modes.append(app.settings.mode)
    app.stop_run()  # the run on screen stops: each mode of the race must have the device to itself
    app.say(f"race: running {', '.join(modes)} on this prompt, each alone and warm, 3 rounds alternated; then "
            "they are replayed side by side (esc closes the race; r here restarts the run)")
    app.show_state(progress("starting"))
    app.race_stop.clear()
    after = app.pump.finished if app.pump is not None else None
    app.run_worker(lambda: _measure(app, modes, after), thread=True, exclusive=True, group="decoder", name="race")


def progress(message: str | None) -> str:
    """The state the stats bar and header show while a race is measured (None: the measuring is over)."""
    return f"measuring the race: {message}" if message is not None else "stopped (r runs again)"


def _measure(app: RaceHost, modes: list[Mode], after: threading.Event | None) -> None:
    """In the decoder thread: the race measured, then its screen. Messages reach the UI a few per mode, never one
    per token."""
    if after is not None:
        after.wait(30)
    try:
        lanes = measure(app.make_source, app.settings, modes, app.race_stop,
                        lambda message: app.call_from_thread(app.show_state, progress(message)), RUNS)
    except Exception as exc:  # shown, and the app stays usable
        message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        app.call_from_thread(app.say, f"The race stopped: {message}", "error")
        app.call_from_thread(app.show_state, progress(None))
        return
    app.call_from_thread(app.show_state, progress(None))
    if lanes is None:
        return
    first = lanes[0].events[0][1] if lanes[0].events else None
    params = first.params if isinstance(first, Started) else {}
    device = f"{params.get('device', '')} {params.get('dtype', '')}"
    app.call_from_thread(app.push_screen, RaceScreen(app.settings, lanes, device))
