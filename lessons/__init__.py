"""Lessons: data files (``*.toml``) that pick a prompt and settings so a concept shows, and say what to look at.

A lesson names its ``mode``, its ``prompt``, its decoding ``settings`` (the
options ``decode-tui run`` takes, by their long names with underscores; a
constraint as ``json_schema``, ``regex`` or ``grammar``, its files beside the
lesson), an
``intro``, the ``pause`` points where the run stops for the teacher (on a
notable event, or after a number of tokens) with the text students read
there (and, optionally, what to ``try`` with the keys), a closing
``summary``, and the ``recording`` that plays it with no model. :func:`load` reads a shipped lesson by name
or a teacher's own file by path, and refuses a malformed one with the file,
the line and the field. It knows the format; the decoding options are
checked by whoever runs the lesson (the same check ``run`` makes), and the
narration is shown by the app.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from ..core.errors import UsageError
from ..core.modes import MODE_SPECS, MODES
from ..core.params import WARPERS, DecodeConfig
from ..core.record.events import BeamStepped, DraftProposed, DraftVerified, Event, Finished, TokenEmitted
from ..core.token_tree import TokenTree
from ..core.toml_lines import line_of

# What a pause can wait for: the app's notable events (tui/teaching.AutoPause), three more, or "token N". "second
# branch": a tree round whose kept path left the tree's first branch, so a chain (the first branch alone) would
# have kept fewer of its tokens.
EVENTS = ("first rejection", "lookup miss", "beam finished", "end of text", "resampled", "bonus", "second branch")
FIELDS = {"name", "title", "mode", "prompt", "intro", "summary", "settings", "pause", "recording"}
# The modes in which each event can happen at all, from each mode's entry (core/modes.py); "end of text" and
# "token N" happen in every mode.
PAUSE_MODES = {moment: tuple(m for m in MODES if moment in MODE_SPECS[m].moments)
               for moment in EVENTS if any(moment in spec.moments for spec in MODE_SPECS.values())}
# Settings greedy mode ignores (it takes the argmax): a lesson that sets them says something its run does not do.
SAMPLING_ONLY = (*WARPERS, "seed")
DEFAULT_MAX_NEW_TOKENS = DecodeConfig().max_new_tokens  # what --max-new-tokens is when a lesson leaves it out


class LessonError(UsageError):
    """A lesson file that cannot be used: the message names the file, the line and the field (exit 2)."""


@dataclass(frozen=True)
class Pause:
    on: str  # one of EVENTS, or "token N"
    text: str  # what to look at, what just happened: true of the recording and of a live run alike
    try_: str = ""  # what to try with the keys: a recording cannot change, so it is offered for --live runs
    # The try works in a replay too (a key that only changes the view, such as v, or a command to run elsewhere):
    # then a replay offers it as it is, instead of sending the reader to --live for it.
    try_in_replay: bool = False

    @property
    def after_tokens(self) -> int | None:
        """N for a "token N" pause."""
        found = re.fullmatch(r"token (\d+)", self.on)
        return int(found.group(1)) if found else None


@dataclass(frozen=True)
class Lesson:
    name: str
    title: str
    mode: str
    prompt: str
    intro: str
    settings: dict[str, Any]
    pauses: tuple[Pause, ...]
    summary: str
    source: str  # the file it came from
    recording: str | None = None  # a recording of it (the file's name, beside the lesson file)

    @property
    def ref(self) -> str:
        """How to name it on the command line: a shipped lesson by its name, a teacher's by its path."""
        return self.name if Path(self.source).parent == Path(__file__).parent else self.source

    @property
    def recording_path(self) -> Path | None:
        """Where the lesson's recording is (None when the lesson names none)."""
        return Path(self.source).parent / self.recording if self.recording else None

    def error(self, field: str, why: str) -> LessonError:
        """A LessonError naming this lesson's file, the line where ``field`` is set, and the field."""
        try:
            line = line_of(Path(self.source).read_text(encoding="utf-8"), field)
        except OSError:
            line = 1
        return LessonError(f"{self.source}, line {line}: {field} {why}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "mode": self.mode, "pauses": len(self.pauses),
                "recorded": self.recording is not None, "source": self.source}


def shipped() -> list[Lesson]:
    """The lessons that come with decode-tui, in their files' order (01-..., 02-...)."""
    entries = sorted((e for e in files(__name__).iterdir() if e.name.endswith(".toml")), key=lambda e: e.name)
    return [parse(e.read_text(encoding="utf-8"), str(e)) for e in entries]


def load(name_or_path: str) -> Lesson:
    """A shipped lesson by name, or a lesson file by path; LessonError says what is wrong (and lists the names)."""
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        path = Path(name_or_path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise LessonError(f"Cannot read the lesson file {path}: {exc}.") from None
        return parse(text, str(path))
    lessons = {lesson.name: lesson for lesson in shipped()}
    if name_or_path not in lessons:
        raise LessonError(f"There is no lesson {name_or_path!r}. The lessons are: {', '.join(lessons)} (or give "
                          "the path of a lesson file, ./my-lesson.toml).")
    return lessons[name_or_path]


def parse(text: str, source: str) -> Lesson:
    """A :class:`Lesson` from a TOML text; LessonError with ``source``, the line and the field otherwise."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LessonError(f"{source}: not valid TOML ({exc}).") from None

    def bad(field: str, why: str) -> LessonError:
        return LessonError(f"{source}, line {line_of(text, field)}: {field} {why}")

    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise bad(unknown[0], f"is not a lesson field (the fields: {', '.join(sorted(FIELDS))}).")
    for field in ("name", "title", "mode", "prompt", "intro"):
        if not isinstance(data.get(field), str) or not data[field].strip():
            raise bad(field, "must be a non-empty string.")
    if data["mode"] not in MODES:
        raise bad("mode", f"must be one of {', '.join(MODES)}, not {data['mode']!r}.")
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise bad("settings", "must be a table of decoding options ([settings] max_new_tokens = 48, ...).")
    pauses = []
    for i, item in enumerate(data.get("pause", [])):
        if not isinstance(item, dict) or not {"on", "text"} <= set(item) <= {"on", "text", "try", "try_in_replay"}:
            raise bad("pause", f"number {i + 1} must have `on` and `text`, and may have `try` and "
                      "`try_in_replay`; nothing else.")
        for key in ("text", "try"):
            if key in item and (not isinstance(item[key], str) or not item[key].strip()):
                raise bad(key, f"of pause {i + 1} must be a non-empty string.")
        if not isinstance(item.get("try_in_replay", False), bool):
            raise bad("try_in_replay", f"of pause {i + 1} must be true or false.")
        pause = Pause(str(item["on"]), prose(item["text"]), prose(item.get("try", "")),
                      bool(item.get("try_in_replay", False)))
        if pause.on not in EVENTS and pause.after_tokens is None:
            raise bad("on", f"of pause {i + 1} must be one of {', '.join(map(repr, EVENTS))} or \"token N\", not "
                      f"{pause.on!r}.")
        # A pause its run can never reach would leave a class pressing n for nothing.
        modes = PAUSE_MODES.get(pause.on)
        if modes is not None and data["mode"] not in modes:
            raise bad("on", f"of pause {i + 1} is {pause.on!r}, which cannot happen in mode {data['mode']!r} (only in "
                      f"{' or '.join(modes)}).")
        limit = settings.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        if pause.after_tokens is not None and isinstance(limit, int) and pause.after_tokens > limit:
            raise bad("on", f"of pause {i + 1} waits for token {pause.after_tokens}, but the run stops after "
                      f"max_new_tokens = {limit}.")
        pauses.append(pause)
    if data["mode"] == "greedy":
        ignored = [name for name in SAMPLING_ONLY if name in settings]
        if ignored:
            raise bad(ignored[0], "is a sampling setting, which greedy mode ignores (it takes the argmax): use "
                      "mode = \"sample\", or leave it out.")
    summary = data.get("summary", "")
    if not isinstance(summary, str):
        raise bad("summary", "must be a string.")
    recording = data.get("recording")
    if recording is not None and not isinstance(recording, str):
        raise bad("recording", "must be the name of a recording file beside the lesson.")
    return Lesson(name=data["name"], title=data["title"], mode=data["mode"], prompt=data["prompt"],
                  intro=prose(data["intro"]), settings=dict(settings), pauses=tuple(pauses),
                  summary=prose(summary), source=source, recording=recording)


_ITEM = re.compile(r"\s*(?:[-*•]|\d+[.)])\s")  # a line that starts a list item keeps its own line


def prose(text: str) -> str:
    """A lesson text as the narration panel shows it: the line breaks written to keep the file readable are
    reflowed, so the panel wraps the text to the terminal's width (they broke lines mid-sentence in an
    80-column terminal); a blank line still starts a paragraph, and a list item (``- ``, ``1. ``) its line."""
    paragraphs = []
    for paragraph in re.split(r"\n\s*\n", text.strip()):
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not _ITEM.match(line):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line.strip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


class PauseTracker:
    """Which of a lesson's pauses an event reaches: each pause once, in the order the run reaches them."""

    def __init__(self, pauses: tuple[Pause, ...]) -> None:
        self.pending = list(pauses)
        self.steps = 0  # tokens emitted, or beam steps (beam search emits its tokens at the end)
        self.drafter: str | None = None
        self.proposed: DraftProposed | None = None

    def check(self, event: Event) -> Pause | None:
        kinds = self._kinds(event)
        for pause in self.pending:
            if pause.on in kinds:
                self.pending.remove(pause)
                return pause
        return None

    def _kinds(self, event: Event) -> set[str]:
        kinds: set[str] = set()
        if isinstance(event, TokenEmitted | BeamStepped):
            self.steps += 1
            kinds.add(f"token {self.steps}")
        if isinstance(event, BeamStepped) and any(c.verdict == "finished" for c in event.candidates):
            kinds.add("beam finished")
        if isinstance(event, DraftProposed):
            self.drafter, self.proposed = event.drafter, event
        elif isinstance(event, DraftVerified):
            tree = self.proposed.parents if self.proposed is not None else None
            if event.path and tree is not None and _chain_keeps(tree, event.path) < len(event.path):
                kinds.add("second branch")
            if self.drafter == "lookup" and event.accepted == 0 and event.verdicts:
                kinds.add("lookup miss")
            if event.accepted < len(event.verdicts):
                kinds.add("first rejection")
            if event.extra_kind in ("resampled", "bonus"):
                kinds.add(event.extra_kind)
        elif isinstance(event, Finished):
            kinds.add("end of text")
        return kinds


def _chain_keeps(parents: tuple[int, ...], path: tuple[int, ...]) -> int:
    """How many of a tree round's kept ``path`` its first branch (the first child at every node: the chain a
    chain drafter would have drafted) holds, from the root."""
    first = TokenTree((0,) * len(parents), parents).first_branch()  # the layout alone: tokens play no part
    kept = 0
    while kept < min(len(first), len(path)) and first[kept] == path[kept]:
        kept += 1
    return kept
