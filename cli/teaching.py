"""The teaching commands: ``lessons`` (the list), ``lesson NAME`` (play or run one).

A lesson (decode_tui.lessons) plays its shipped recording by default: no model,
no GPU, no network, the same screen in every classroom. ``--live`` runs it on a
model instead, with the lesson's settings under any decoding option given on
the command line; ``--live --record FILE`` writes a lesson's recording without
opening the app (how the shipped ones were made). Errors print one paragraph
and exit non-zero, as every command does (cli/commands.py).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..core.errors import DecodeTuiError, UsageError
from ..core.model.registry import EMBEDDED_ALIASES, resolve
from ..core.modes import DRAFT_MODEL_MODES, MODES
from ..core.params import Constraint, DecodeConfig
from ..lessons import Lesson, load, shipped
from ..tui.numbers import count
from .commands import WEB_DRIVER, _run_app, app, configured_model_exists, need_terminal, user_config
from .console import fail
from .flags import FromListOpt, ModeChoice, PromptArg, TableFormatChoice, ThemeOpt, at_least
from .loads import check_placement, with_draft_model
from .options import (
    ONLY_FOR,
    DecodingOptions,
    build_config,
    constraint_of,
    decoding_command,
    parse_modes,
    theme_name,
)
from .outputs import check_output

if TYPE_CHECKING:
    from ..core.analysis.race import Lane
    from ..tui.app import DecodeApp
    from ..tui.settings import Settings

# How a lesson constrains its output, as the command line does: a JSON schema (the schema itself, or a file
# beside the lesson), a regex, or a Lark grammar file beside the lesson; one at a time.
CONSTRAINTS = ("json_schema", "regex", "grammar")
# The decoding options a lesson's [settings] may hold: every field of DecodingOptions but the model, the device,
# the prompt and the mode (the lesson's own fields), the constraints last.
SETTINGS = (*(f.name for f in dataclasses.fields(DecodingOptions)
              if f.name not in ("model", "device", "dtype", "device_map", "trust_remote_code", "prompt",
                                "prompt_file", "mode", *CONSTRAINTS)), *CONSTRAINTS)


@app.command("lessons")
def lessons_cmd(
    listing: Annotated[bool, typer.Option("--list", help="Print the lessons as a table instead of opening the "
                                          "start screen (what a pipe or a file gets anyway).")] = False,
    output_format: Annotated[TableFormatChoice, typer.Option("--format", help="text: a table. json: a JSON list "
                                                             "of {name, title, mode, pauses, recorded, source}.")
                             ] = TableFormatChoice.text,
    recordings: Annotated[Path | None, typer.Option("--recordings", help="A folder whose recordings (.jsonl) the "
                                                    "start screen offers too.")] = None,
    live: Annotated[bool, typer.Option("--live", help="On the start screen, l runs the highlighted lesson on a "
                                       "model instead of playing its recording.")] = False,
    theme: ThemeOpt = None,
    choice_file: Annotated[Path | None, typer.Option("--choice-file", hidden=True)] = None,
    notice: Annotated[str | None, typer.Option("--notice", hidden=True)] = None,
    highlight: Annotated[str | None, typer.Option("--highlight", hidden=True)] = None,
) -> None:
    """The lessons, the race and your recordings on a start screen: Enter plays one, q in it comes back to the
    list. With --list (or into a pipe), the lessons as a table."""
    try:
        lessons = shipped()
        if recordings is not None:
            from ..tui.catalog import check_folder

            check_folder(recordings)
    except DecodeTuiError as err:  # a broken install (say which file), or a folder that is not one
        fail(err)
    if output_format is TableFormatChoice.json:
        typer.echo(json.dumps([lesson.to_dict() for lesson in lessons], indent=1))
        return
    if listing or not (interactive() or choice_file is not None):
        _lessons_table(lessons)
        return
    from .start import start_screen

    start_screen(recordings, live=live, theme=theme_name(theme) or user_config().theme, choice_file=choice_file,
                 notice=notice, highlight=highlight)


def interactive() -> bool:
    """Whether the start screen can open here: a terminal, or a browser's page (textual-serve's web driver)."""
    import os

    return (sys.stdin.isatty() and sys.stdout.isatty()) or os.environ.get("TEXTUAL_DRIVER") == WEB_DRIVER


def _lessons_table(lessons: list[Lesson]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="decode-tui lessons", title_justify="left")
    table.add_column("name", overflow="fold")
    table.add_column("mode")
    table.add_column("title", overflow="fold")
    for lesson in lessons:
        table.add_row(lesson.name, lesson.mode, lesson.title)
    console = Console(soft_wrap=True)
    console.print(table)
    console.print("Play one with `decode-tui lesson NAME` (a recording: no model needed), or add --live to run it "
                  "on a model.")


def given(options: DecodingOptions) -> dict[str, Any]:
    """The decoding options the command line set (those that differ from their defaults)."""
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options)
            if getattr(options, f.name) != f.default}


def lesson_config(lesson: Lesson, overrides: dict[str, Any]) -> DecodeConfig:
    """The lesson's decoding settings, with the command line's ``overrides`` on top; a LessonError or UsageError
    says what does not fit."""
    unknown = sorted(set(lesson.settings) - set(SETTINGS))
    if unknown:
        raise lesson.error(unknown[0], f"is not a decoding option a lesson can set (those are: {', '.join(SETTINGS)}).")
    mode = ModeChoice(overrides.get("mode", lesson.mode))
    # Another mode than the lesson's drops the lesson's settings that only apply to its own mode.
    settings = {k: v for k, v in lesson.settings.items() if k not in ONLY_FOR or mode in ONLY_FOR[k]}
    ours = {k: settings.pop(k) for k in list(settings) if k in CONSTRAINTS}  # in the file's order
    theirs = {k: overrides[k] for k in CONSTRAINTS if overrides.get(k) is not None}
    if "history" in settings:  # earlier outputs shipped beside the lesson (suffix drafting's --history)
        files = settings["history"] if isinstance(settings["history"], list) else [settings["history"]]
        settings["history"] = [Path(lesson.source).parent / str(name) for name in files]
    settings.update({k: v for k, v in overrides.items() if k in SETTINGS and k not in CONSTRAINTS})
    # A constraint given on the command line replaces the lesson's, whichever kind each is.
    constraint = constraint_of(theirs.get("json_schema"), theirs.get("regex"), theirs.get("grammar")) if theirs \
        else _lesson_constraint(lesson, ours)
    try:
        config = build_config(DecodingOptions(mode=mode, **settings), constraint=constraint)
    except UsageError as err:
        raise UsageError(f"{lesson.source}: {err.message}") from None
    except (TypeError, ValueError) as err:
        raise UsageError(f"{lesson.source}: its [settings] do not fit ({err}).") from None
    # A lesson shows drafting's raw behaviour, every round at full length, unless it (or the command line) says
    # adaptive: the command line's own default is the policy.
    adaptive = bool(settings.get("adaptive", False))
    return dataclasses.replace(config, draft=dataclasses.replace(config.draft, adaptive=adaptive))


def _lesson_constraint(lesson: Lesson, given: dict[str, Any]) -> Constraint | None:
    """The lesson's own constraint, its files read from beside the lesson; a LessonError names the field's line."""
    if not given:
        return None
    if len(given) > 1:
        first, second = list(given)[:2]  # in the file's order: the line named is the second one's
        raise lesson.error(second, f"and {first} each constrain the output: keep one of them.")
    (field, value), = given.items()
    if not isinstance(value, str) or not value.strip():
        raise lesson.error(field, "must be a non-empty string (a JSON schema or a file beside the lesson, a regex, "
                           "or a Lark grammar file beside the lesson).")
    try:
        return constraint_of(given.get("json_schema"), given.get("regex"), given.get("grammar"),
                             base=Path(lesson.source).parent)
    except UsageError as err:
        raise lesson.error(field, f"does not work: {err.message}") from None


@app.command("lesson", short_help="Play a lesson: one concept, narrated, pausing where it matters.")
@decoding_command
def lesson_cmd(
    options: DecodingOptions,
    name: Annotated[str, typer.Argument(help="A lesson's name (see `decode-tui lessons`) or the path of a lesson "
                                        "file (./my-lesson.toml).", show_default=False, metavar="NAME")],
    live: Annotated[bool, typer.Option("--live", help="Run the lesson on a model (the embedded one unless --model) "
                                       "instead of playing its recording; decoding options change its settings.",
                                       rich_help_panel="Lesson")] = False,
    record: Annotated[Path | None, typer.Option(help="With --live: run the lesson without the app and save the run "
                                                "as the lesson's recording (.jsonl).", rich_help_panel="Lesson")
                      ] = None,
    speed: Annotated[float, typer.Option(help="Playback speed of the recording: 1 is the recorded pace.",
                                         rich_help_panel="Lesson", callback=at_least(0.0))] = 1.0,
    theme: ThemeOpt = None,
    from_list: FromListOpt = False,
) -> None:
    """Play a lesson: a prompt and settings that show one concept, with narration, pausing at the moments that
    matter (n goes on). By default it plays the lesson's recording, with no model; --live runs it on a model."""
    try:
        user = user_config()
        theme_choice = theme_name(theme) or user.theme
        lesson = load(name)
        overrides = given(options)
        if not live:
            if overrides or record is not None:
                flags = ", ".join("--" + k.replace("_", "-") for k in overrides) or "--record"
                raise UsageError(f"{flags} changes a live run: add --live to run the lesson on a model. Without it the "
                                 "lesson plays its recording exactly as it was recorded.")
            player = playback(lesson, speed=speed, theme=theme_choice, keymap=user.keys, from_list=from_list)
        else:
            if speed != 1.0:
                raise UsageError("--speed sets the pace of a recording's playback; a --live run goes at the model's "
                                 "own pace (slow it down in the app with s).")
            settings = _live_settings(lesson, options.with_default_model(user.model), overrides)
            configured_model_exists(options, user)
    except DecodeTuiError as err:
        fail(err)
    from ..tui.app import DecodeApp
    from ..tui.sources import ModelRunner

    if not live:
        _run_app(player, "lesson")
    if record is not None:
        _record(settings, record)
    app_ = DecodeApp(settings, ModelRunner().source, start_paused=True, theme=theme_choice, keymap=user.keys,
                     lesson=lesson, from_list=from_list)
    _run_app(app_, "lesson")


def playback(lesson: Lesson, *, speed: float = 1.0, theme: str | None = None,
             keymap: Mapping[str, str] | None = None, from_list: bool = False) -> DecodeApp:
    """The app playing ``lesson`` from its recording, paused on its intro: no model is loaded or needed.
    A UsageError says what to do when the lesson has no recording."""
    from ..tui.app import DecodeApp
    from ..tui.recording import read_recording, replay
    from ..tui.settings import settings_from_dict

    path = lesson.recording_path
    if path is None or not path.exists():
        missing = f"its recording {path} is missing" if path is not None else "it names no recording"
        raise UsageError(f"The lesson {lesson.name!r} cannot play without a model: {missing}. Run it on a model with "
                         f"`decode-tui lesson {lesson.ref} --live`, or record it once with `--live --record "
                         f"{lesson.name}.jsonl` and add `recording = \"{lesson.name}.jsonl\"` to the lesson file.")
    header, events = read_recording(path)
    return DecodeApp(settings_from_dict(header.get("settings", {})), lambda _settings, _live: replay(events, speed),
                     start_paused=True, theme=theme, replaying=f"the lesson's recording ({path.name})",
                     keymap=keymap, lesson=lesson, branches=header["branches"], from_list=from_list)


def _live_settings(lesson: Lesson, options: DecodingOptions, overrides: dict[str, Any]) -> Settings:
    """What a live lesson runs: the lesson's prompt and settings, under the options given; the model checked."""
    from ..tui.settings import Settings

    config = lesson_config(lesson, overrides)
    check_placement(options.device, options.device_map_name)
    prompt = options.prompt_text() if "prompt" in overrides or "prompt_file" in overrides else lesson.prompt
    # A missing model (or draft) is reported before the app opens, as `run` does; the embedded one is fetched.
    for spec in (options.model_name, config.draft.model_spec if config.mode in DRAFT_MODEL_MODES else None):
        if spec is not None and spec not in EMBEDDED_ALIASES:
            resolve(spec)
    return Settings(model=options.model_name, device=options.device, dtype=options.dtype.value,
                    trust_remote_code=options.trust_remote_code, prompt=prompt, config=config,
                    device_map=options.device_map_name)


def _record(settings: Settings, path: Path) -> None:
    """Run once to load and warm up, then run again writing the recording: its pace is a warm run's."""
    from ..core.live import LiveParams
    from ..core.record.events import TokenEmitted
    from ..tui.pump import Notice
    from ..tui.recording import recorded
    from ..tui.sources import ModelRunner

    try:
        check_output(path, "record the lesson")
    except UsageError as err:
        fail(err)
    # No background compile: a switch to compiled kernels midway would give the recording two paces.
    runner = ModelRunner(background_compile=False)
    try:
        for event in runner.source(settings, LiveParams(settings.config.sampling, settings.config.draft))():
            if isinstance(event, Notice):
                sys.stderr.write(f"decode-tui: {event.message}\n")
        tokens = 0
        source = recorded(runner.source(settings, LiveParams(settings.config.sampling, settings.config.draft)),
                          path, settings)
        for event in source():
            tokens += isinstance(event, TokenEmitted)
    except DecodeTuiError as err:
        fail(err)
    typer.echo(f"{path} written: {count(tokens, 'token')}. Play it with `decode-tui lesson` (name it in the lesson "
               f"file as recording = \"{path.name}\").")
    raise typer.Exit(0)


def _save_race(path: Path, settings: Settings, lanes: list[Lane], device: str) -> None:
    """Write the measured race to ``path``; if that fails now (checked before measuring, but a disk can fill or
    a folder go meanwhile), to a file in the temporary folder instead, so the minute of measuring is not lost."""
    from ..tui.recording import write_race

    try:
        write_race(path, settings, lanes, device)
    except OSError as exc:
        fallback = Path(tempfile.mkstemp(prefix="decode-tui-race-", suffix=".jsonl")[1])
        write_race(fallback, settings, lanes, device)
        typer.echo(f"decode-tui: cannot write {path} ({exc.strerror or exc}); the race is saved in {fallback} "
                   "instead.", err=True)
        path = fallback
    typer.echo(f"{path} written: replay it with `decode-tui replay {path}`", err=True)


@app.command("race", short_help="Race decoding modes side by side on one prompt.")
@decoding_command
def race_cmd(
    options: DecodingOptions,
    prompt_arg: PromptArg = None,
    modes: Annotated[str, typer.Option("--modes", help=f"Comma-separated modes to race: {', '.join(MODES)} (at "
                                       "least two; greedy joins as the baseline).",
                                       rich_help_panel="Race")] = "greedy,pld,speculative",
    record: Annotated[Path | None, typer.Option(help="Save the race (.jsonl) to replay it with `decode-tui replay`, "
                                                "with no model.", rich_help_panel="Race")] = None,
    play: Annotated[bool, typer.Option("--play/--no-play", help="Show the race (--no-play: measure and save it "
                                       "with --record only).", rich_help_panel="Race")] = True,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Timed runs a mode, after a warm-up each, the "
                                         "order alternating from round to round; each lane shows its median run, "
                                         "its speed-up the median of the rounds' ratios with their range.",
                                         rich_help_panel="Race")] = 3,
    speed: Annotated[float, typer.Option(help="Playback speed: 1 is the measured pace.",
                                         rich_help_panel="Race", callback=at_least(0.0))] = 1.0,
    theme: ThemeOpt = None,
) -> None:
    """Race decoding modes side by side on one prompt. Each mode runs alone first (warm, so none slows another),
    then all are replayed together at the pace each had: text, target forwards, acceptance, speed-up over greedy."""
    from .console import status
    from .loads import load_models
    from .measure import _bench_prompt

    try:
        options = options.with_prompt_argument(prompt_arg)
        user = user_config()
        configured_model_exists(options, user)
        options = options.with_default_model(user.model)
        theme_choice = theme_name(theme) or user.theme
        chosen = parse_modes(modes, options.mode, "race", at_least=2)
        if not play and record is None:
            raise UsageError("--no-play with nothing to save: add --record FILE.jsonl.")
        if record is not None:
            check_output(record, "record the race")
        if play:
            need_terminal("race")  # before a minute of measuring, not after
        check_placement(options.device, options.device_map_name)
        configs = {m.value: options.for_mode(m).config() for m in chosen}
        prompt = options.prompt_text() if options.prompt or options.prompt_file else _bench_prompt(chosen)
        lm, draft = load_models(options, prompt, next(iter(configs.values())), with_draft_model(*configs.values()))
        from ..core.analysis.race import measure

        with status(f"Racing {', '.join(configs)}: a warm-up each, then {repeats} rounds of each alone, "
                    "alternated") as progress:
            lanes = measure(lm, prompt, configs, runs=repeats, draft=draft, progress=progress)
    except DecodeTuiError as err:
        fail(err)
    from ..tui.settings import Settings

    device = f"{lm.device.type} {str(lm.dtype).removeprefix('torch.')}"
    settings = Settings(model=options.model_name, device=options.device, dtype=options.dtype.value, prompt=prompt,
                        config=configs["greedy"], device_map=options.device_map_name)
    if record is not None:
        _save_race(record, settings, lanes, device)
    if not play:
        raise typer.Exit(0)
    from ..tui.race_app import RaceApp

    _run_app(RaceApp(settings, lanes, device, speed=speed, theme=theme_choice), "race")
