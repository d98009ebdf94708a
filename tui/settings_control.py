"""The keys that change what runs: the mode, a parameter, the prompt, the model.

Each change says what it does and how it applies: at the next step (through the run's
:class:`~decode_tui.core.live.LiveParams`), by restarting the run, or by re-ranking finished beams. A replay
refuses what would change what was recorded, with a message that says how to record a new run. It knows the
app only through :class:`SettingsHost`, what it needs of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from ..core.live import LiveParams
from ..core.record.events import Mode
from .pump import EventPump
from .run_view import Severity
from .screens.model_picker import ModelPicker, cannot_load, known_models
from .screens.prompt_editor import PromptEditor
from .settings import Change, Settings, adjust, next_mode, with_bad_words, with_mode

# What a replay cannot do (its events were recorded): the footer leaves these keys out there, rather than offer
# keys that are refused.
# Opened from the start screen (a browser's tab of a classroom, say), a replay's user may have no shell to type a
# command in: what to do instead is the list's.
FROM_LIST_ADVICE = ("q goes back to the list, where another lesson plays (and l runs one on the model, where live "
                    "runs are on).")


def replay_advice(from_list: bool, command: str) -> str:
    """What to do instead of what a replay cannot: ``command`` (a decode-tui command to type), or the list's way
    where the app was opened from the start screen."""
    return FROM_LIST_ADVICE if from_list else command


class SettingsHost(Protocol):
    settings: Settings
    replaying: str | None
    from_list: bool
    live: LiveParams
    pump: EventPump | None

    def say(self, message: str, severity: Severity = ...) -> None: ...
    def start_run(self) -> None: ...
    def rerank_beams(self) -> None: ...
    def push_screen(self, screen: Any, callback: Callable[[Any], None] | None = ...) -> Any: ...


class SettingsControl:
    def __init__(self, host: SettingsHost) -> None:
        self.host = host

    def replay_refuses(self, what: str) -> bool:
        if self.host.replaying is None:
            return False
        self.host.say(f"This is a replay of {self.host.replaying}: {what} cannot change what was recorded. "
                      + replay_advice(self.host.from_list, "Record a new run with `decode-tui run --record "
                                      "FILE.jsonl`."), "warning")
        return True

    def _restart(self, settings: Settings, message: str) -> None:
        self.host.settings = settings
        self.host.say(message)
        self.host.start_run()

    def mode(self, mode: Mode | None = None) -> None:
        """Switch to ``mode``, or to the next one."""
        if self.replay_refuses("the mode"):
            return
        host = self.host
        settings = next_mode(host.settings) if mode is None else with_mode(host.settings, mode)
        self._restart(settings, f"mode → {settings.mode}: a new mode is a new run, so it restarts")

    def knob(self, knob_id: str, direction: int) -> str:
        """Turn one knob; returns what happened, in the words the status line shows."""
        return self._apply(adjust(self.host.settings, knob_id, direction, running=self._running()), knob_id)

    def bad_words(self, text: str) -> str:
        """Set the bad words from comma-separated ``text``; returns what happened."""
        return self._apply(with_bad_words(self.host.settings, text, running=self._running()), "bad_words")

    def _running(self) -> bool:
        """A run is under way, or paused, so a live change reaches it; false once it has ended (or failed). Before
        the first run starts (the model loading) there is no pump, and that run takes the change from its first
        step."""
        pump = self.host.pump
        return pump is None or not pump.finished.is_set()

    def _apply(self, change: Change, knob_id: str) -> str:
        host = self.host
        # A replay can re-rank its finished beams (a pure function of their scores) and change its pace, nothing else.
        if change.applies in ("live", "restart") and self.replay_refuses("parameters"):
            return "a replay cannot change what was recorded"
        if change.applies is None:
            host.say(change.message, "warning")
            return change.message
        host.settings = change.settings
        host.say(change.message)
        if change.applies == "live":
            host.live.update(sampling=host.settings.config.sampling, draft=host.settings.config.draft)
        elif change.applies == "restart":
            host.start_run()
        elif change.applies == "rerank":
            host.rerank_beams()
        elif knob_id == "slow_motion" and host.pump is not None:
            host.pump.slow_motion_s = host.settings.slow_motion_s
        return change.message

    def stages(self, changed: Callable[[], None]) -> None:
        """The stage editor: every stage's value, changed with the arrow keys; ``changed`` after each change."""
        from .screens.stage_editor import StageEditor

        host = self.host

        def then_changed(said: str) -> str:
            changed()
            return said

        host.push_screen(StageEditor(lambda: host.settings, lambda knob_id, direction: then_changed(
            self.knob(knob_id, direction)), lambda text: then_changed(self.bad_words(text))))

    def prompt(self) -> None:
        if self.replay_refuses("the prompt"):
            return
        host = self.host

        def done(prompt: str | None) -> None:
            if prompt is not None and prompt != host.settings.prompt:
                self._restart(dataclasses.replace(host.settings, prompt=prompt), "new prompt: the run restarts")

        host.push_screen(PromptEditor(host.settings.prompt), done)

    def model(self) -> None:
        if self.replay_refuses("the model"):
            return
        host = self.host

        def done(spec: str | None) -> None:
            if spec is None or spec == host.settings.model:
                return
            if (why := cannot_load(spec)) is not None:
                host.say(why, "error")
                return
            self._restart(dataclasses.replace(host.settings, model=spec),
                          f"model → {spec}: loading it restarts the run")

        host.push_screen(ModelPicker(host.settings.model, known_models()), done)
