"""What the start screen offers: the lessons, the race on its recording, and the recordings in a teacher's folder.

Each offer is an :class:`Entry` with a ``key`` (``lesson:NAME``, ``race``,
``recording:FILE``; ``live:NAME`` asks for the lesson on a model): the start screen returns the key chosen, and
:func:`command_for` turns a key back into the ``decode-tui`` command that plays
it, the same command a user would type (``lesson NAME``, ``replay FILE``). A
key that is not on the list as it stands now is refused there, so a tab of
``decode-tui serve`` can name nothing else: no path, no option, no other file.

A recording that cannot be read is offered as an entry with its ``problem`` (and
cannot be chosen), so one bad file does not hide the rest. Messages name files by
their name alone: a browser sees them, and the server's paths are not its business.

It knows the lessons' and recordings' formats (through their readers); it draws nothing and starts nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from ..core.errors import UsageError
from ..lessons import LessonError, prose, shipped

# The race that ships with decode-tui: greedy, PLD and speculative on a code edit, measured on the embedded model.
RACE_RECORDING = "race-code-edit.jsonl"
# A recording bigger than this is not read to check it (the shipped ones are well under 1 MB).
MAX_RECORDING_BYTES = 64 * 1024 * 1024
LINE_CHARS = 96  # an entry's one line, at most


@dataclass(frozen=True)
class Entry:
    key: str  # what choosing it means (see the module's docstring)
    kind: str  # "lesson", "race" or "recording"
    title: str
    mode: str  # the decoding mode it shows ("race": several)
    line: str  # one line about it
    problem: str | None = None  # why it cannot be played (an unreadable recording); None when it can

    def __post_init__(self) -> None:
        # A file's name and what it holds are anyone's: shown as they are, an escape sequence in them would reach
        # the tab's terminal emulator and a newline would break the list.
        for name in ("title", "mode", "line", "problem"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, printable(value))

    @property
    def playable(self) -> bool:
        return self.problem is None


def printable(text: str) -> str:
    """``text`` with each character that is not printable (a control character, an escape, a line break, a
    direction override) written as its Python escape (``\\x1b``, ``\\n``, ``\\u202e``): for a name that came from
    outside, shown in a terminal, a browser's or the teacher's console. No library call does just this: ``repr``
    also escapes quotes and backslashes."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def race_path() -> Path:
    """The shipped race's recording (in the lessons' package data)."""
    return Path(str(files("decode_tui.lessons") / RACE_RECORDING))


def one_line(text: str) -> str:
    """The first sentence of ``text`` as one line, cut to :data:`LINE_CHARS` characters."""
    flat = " ".join(prose(text).split())
    return cut(flat.split(". ", 1)[0].rstrip(".") + ".")


def cut(line: str) -> str:
    """``line`` as the list shows it: cut to :data:`LINE_CHARS` characters, with an ellipsis where it was cut."""
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS - 1].rstrip() + "…"


def check_folder(folder: Path) -> Path:
    """``folder`` if it is a readable folder; a UsageError that says what it is otherwise."""
    if not folder.exists():
        raise UsageError(f"--recordings {folder}: there is no such folder. Name the folder that holds the "
                         "recordings (.jsonl) to offer.")
    if not folder.is_dir():
        raise UsageError(f"--recordings {folder} is a file, not a folder. Name the folder that holds it (the "
                         "start screen offers every .jsonl file in it).")
    try:
        next(folder.iterdir(), None)
    except OSError as exc:
        raise UsageError(f"--recordings {folder} cannot be read ({exc.strerror or exc}).") from None
    return folder


def entries(recordings: Path | None = None) -> list[Entry]:
    """Everything on offer, in the order the start screen lists it. A LessonError means a broken install."""
    lessons = shipped()
    out = [Entry(f"lesson:{lesson.name}", "lesson", lesson.title, lesson.mode, one_line(lesson.intro))
           for lesson in lessons]
    out.append(Entry("race", "race", "A race: greedy, prompt lookup and speculative decoding on a code edit",
                     "race", "Each mode ran alone, warm, on the embedded model; replayed together at its pace."))
    if recordings is not None:
        out += [recording_entry(path) for path in recording_files(recordings)]
    return out


def recording_files(folder: Path) -> list[Path]:
    """The folder's recordings: its ``.jsonl`` files (not its subfolders'), by name; none if it went away."""
    try:
        return sorted((p for p in folder.iterdir() if p.suffix == ".jsonl" and p.is_file()), key=lambda p: p.name)
    except OSError:
        return []


def recording_entry(path: Path) -> Entry:
    """``path`` as an entry: what it holds, or why it cannot be played."""
    from .recording import is_race, read_race, read_recording

    key = f"recording:{path.name}"
    try:
        size = path.stat().st_size
        if size > MAX_RECORDING_BYTES:
            raise UsageError(f"{path.name} is {size // 2**20} MB, more than a recording this list reads "
                             f"({MAX_RECORDING_BYTES // 2**20} MB).")
        if is_race(path):
            settings, device, lanes = read_race(path)
            return Entry(key, "recording", path.name, "race",
                         cut(f"A race of {', '.join(lane.name for lane in lanes)} ({device})."))
        header, events = read_recording(path)
    except UsageError as err:
        return Entry(key, "recording", path.name, "", "", problem=err.message.replace(str(path), path.name))
    except OSError as exc:
        return Entry(key, "recording", path.name, "", "", problem=f"cannot be read ({exc.strerror or exc}).")
    settings = header.get("settings", {})
    config = settings.get("config", {}) if isinstance(settings, dict) else {}
    mode = str(config.get("mode", "")) if isinstance(config, dict) else ""
    prompt = str(settings.get("prompt", "")) if isinstance(settings, dict) else ""
    return Entry(key, "recording", path.name, mode, cut(f"{len(events)} events; prompt: {json.dumps(prompt)[1:-1]}"))


def entry_for(key: str, recordings: Path | None) -> Entry | None:
    """The entry ``key`` names on the list as it stands now (None if none), reading only the one recording it may
    name rather than the whole folder."""
    kind, _, name = key.partition(":")
    if kind == "recording":
        path = next((p for p in recording_files(recordings) if p.name == name), None) if recordings else None
        return recording_entry(path) if path is not None else None
    return next((entry for entry in entries() if entry.key == key), None)


def command_for(key: str, recordings: Path | None, *, live: bool = False) -> list[str]:
    """The ``decode-tui`` arguments that play the entry ``key`` names (``live:NAME``: the lesson NAME on the model,
    where ``live`` allows it). A UsageError refuses a key that is not on the list or cannot be played, so nothing
    outside the list can be asked for."""
    if key.startswith("live:"):
        if not live:
            raise UsageError("Live runs are off here: play the lesson's recording.")
        return [*command_for("lesson:" + key.removeprefix("live:"), recordings), "--live"]
    chosen = entry_for(key, recordings)
    if chosen is None:
        raise UsageError(f"{key[:80]!r} is not on the list.")
    if chosen.problem is not None:
        raise UsageError(f"{chosen.title} cannot be played: {chosen.problem}")
    kind, _, name = key.partition(":")
    if kind == "lesson":
        return ["lesson", name]
    if kind == "race":
        return ["replay", str(race_path())]
    assert kind == "recording" and recordings is not None
    return ["replay", str(recordings / name)]


__all__ = ["Entry", "LessonError", "check_folder", "command_for", "entries", "entry_for", "printable", "race_path"]
