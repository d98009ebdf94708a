"""Each command-line option's declaration: its Typer annotation (name, type, help, panel) and its range check,
and the choices some of them take.

One module of declarations, so that cli/options.py holds what the options become (a DecodeConfig and a prompt)
and the commands take their annotations from here. It imports typer and the core's parameter names, never torch:
`decode-tui --help` stays light.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from ..core.model.registry import DEFAULT_ALIAS
from ..core.modes import DRAFTING_MODES, MODES
from ..core.params import EarlyStopping

# The help panel of the options for drafting modes: it names them (a test holds each option's help to its check).
DRAFTING_PANEL = "Drafting: " + ", ".join(DRAFTING_MODES[:-1]) + " and " + DRAFTING_MODES[-1]


# Every mode of the registry, added ones too (core/modes.py), as the command line's choices. Built from the registry,
# which the type checker cannot read through, so it checks ModeChoice as a StrEnum of unknown members.
ModeChoice = StrEnum("ModeChoice", [(mode, mode) for mode in MODES])  # type: ignore[misc]


class FormatChoice(StrEnum):
    text = "text"
    jsonl = "jsonl"


class TableFormatChoice(StrEnum):
    text = "text"
    json = "json"


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


def finite(value: float | None) -> float | None:
    """Python reads ``inf``, ``-inf`` and ``nan`` as numbers, and a range check lets some through (nan compares false
    with any bound): a setting is a finite number, refused otherwise while the command line is read. Every float
    option takes this check (tests/test_cli.py walks them all)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number. Give a number such as 0.5.")
    return value


def at_least(bound: float) -> Callable[[float | None], float | None]:
    """The check of a float option that has a lower bound: a finite number first (Typer's own range check says
    that nan is not above the bound, which is true and no help), then the bound."""
    def check(value: float | None) -> float | None:
        finite(value)
        if value is not None and value < bound:
            raise typer.BadParameter(f"{value} is below {bound:g}. Give a number of at least {bound:g}.")
        return value

    return check


def _check_top_p(value: float | None) -> float | None:
    finite(value)
    if value is not None and not (0.0 < value <= 1.0):
        raise typer.BadParameter(f"{value} is not in (0, 1]. Use 1 to turn nucleus sampling off.")
    return value


def _check_penalty(value: float | None) -> float | None:
    finite(value)
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value} is not positive. Use 1 for no penalty, above 1 to discourage repeats.")
    return value


def _check_device(value: str) -> str:
    import re

    if not re.match(r"^(auto|cpu|mps|cuda(:\d+)?)$", value):
        raise typer.BadParameter(f"unknown device {value!r}. Use auto, cpu, cuda, cuda:N or mps.")
    return value


def _check_utf8(value: str | None, instead: str) -> str | None:
    """Text that goes to a tokenizer or a grammar must be text: an argument typed in a terminal set to another
    encoding (Latin-1's é) reaches Python as a lone surrogate, which no tokenizer or regex compiler takes, and each
    failed in its own way deep in a run."""
    if value is None:
        return None
    bad = next((c for c in value if "\udc80" <= c <= "\udcff"), None)  # Python's stand-ins for undecodable bytes
    if bad is not None:
        raise typer.BadParameter(f"byte 0x{ord(bad) - 0xDC00:02X} at character {value.index(bad)} is not UTF-8 "
                                 f"text. {instead}")
    return value


def utf8_text(value: str | None) -> str | None:
    # One parameter only: typer hands a callback's other parameters the context.
    return _check_utf8(value, "Set the terminal to UTF-8.")


def utf8_prompt(value: str | None) -> str | None:
    return _check_utf8(value, "Set the terminal to UTF-8, or save the prompt as a UTF-8 file and pass --prompt-file.")


def utf8_text_or_file(value: str | None) -> str | None:
    """As :func:`utf8_text`, for an option that takes a file or the text itself: a file's name may be in any
    encoding."""
    try:
        if value is not None and Path(value).exists():
            return value
    except OSError:  # too long a name for a file: the text itself
        pass
    return _check_utf8(value, "Set the terminal to UTF-8.")


ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="Alias (see `decode-tui models`), Hugging "
                                              "Face repo id, local folder or .gguf file. \\[default: the config "
                                              f"file's model, else {DEFAULT_ALIAS}]", rich_help_panel="Model")]
DeviceOpt = Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N or mps.", callback=_check_device,
                                        rich_help_panel="Model")]
DtypeOpt = Annotated[DtypeChoice, typer.Option(help="auto: bf16 on CUDA and on a CPU with AMX or AVX512-BF16, "
                                               "else fp32.", rich_help_panel="Model")]
TrustRemoteCodeOpt = Annotated[bool, typer.Option("--trust-remote-code", help="Allow a checkpoint's own "
                                                    "Python code to run.", rich_help_panel="Model")]
PromptOpt = Annotated[str | None, typer.Option("--prompt", "-p", help="The prompt text.", callback=utf8_prompt,
                                               rich_help_panel="Prompt")]
PromptArg = Annotated[str | None, typer.Argument(help="The prompt text, as with --prompt (quote it). "
                                                 "\\[default: a demo prompt]", show_default=False,
                                                 metavar="PROMPT", callback=utf8_prompt)]
PromptFileOpt = Annotated[Path | None, typer.Option(help="Read the prompt from a UTF-8 file (- for stdin).",
                                                     rich_help_panel="Prompt")]
NoChatOpt = Annotated[bool, typer.Option("--no-chat", help="Feed the prompt as-is, without the chat "
                                          "template.", rich_help_panel="Prompt")]
ModeOpt = Annotated[ModeChoice, typer.Option(help="Decoding strategy.", rich_help_panel="Decoding")
                    ]
MaxNewTokensOpt = Annotated[int, typer.Option(min=1, help="Stop after this many new tokens.",
                                                rich_help_panel="Decoding")]
TemperatureOpt = Annotated[float | None, typer.Option(help="Sampling temperature; 0 is greedy. "
                                                      "\\[default: 1.0]", rich_help_panel="Sampling",
                                                      callback=at_least(0.0))]
TopKOpt = Annotated[int | None, typer.Option(min=0, help="Keep the k most likely tokens; 0 is off. "
                                              "\\[default: 50]", rich_help_panel="Sampling")]
TopPOpt = Annotated[float | None, typer.Option(callback=_check_top_p, help="Nucleus sampling mass in "
                                                "(0, 1]. \\[default: 1.0]", rich_help_panel="Sampling")]
RepetitionPenaltyOpt = Annotated[float | None, typer.Option(callback=_check_penalty, help="> 1 discourages "
                                                             "tokens already seen. \\[default: 1.0]",
                                                             rich_help_panel="Sampling")]
MinPOpt = Annotated[float | None, typer.Option(help="min-p: drop tokens below min_p × the top token's "
                                               "probability, in [0, 1] (0.05 is common). \\[default: off]",
                                               rich_help_panel="Sampling", callback=finite)]
TypicalPOpt = Annotated[float | None, typer.Option(help="Typical sampling: keep the tokens whose surprisal is "
                                                   "closest to the entropy, up to this mass, in (0, 1]. "
                                                   "\\[default: 1.0, off]", rich_help_panel="Sampling",
                                                   callback=finite)]
EpsilonCutoffOpt = Annotated[float | None, typer.Option(help="Drop tokens below this probability, in [0, 1) "
                                                        "(3e-4 is common). \\[default: 0, off]",
                                                        rich_help_panel="Sampling", callback=finite)]
EtaCutoffOpt = Annotated[float | None, typer.Option(help="Eta sampling: drop tokens below min(eta, √eta·e^-H), "
                                                    "in [0, 1). \\[default: 0, off]", rich_help_panel="Sampling",
                                                    callback=finite)]
TopHOpt = Annotated[float | None, typer.Option(help="Top-h: keep the top tokens while their entropy stays below "
                                               "this fraction of the entropy of the 100 most likely (transformers "
                                               "looks no further), in (0, 1]. \\[default: off]",
                                               rich_help_panel="Sampling", callback=finite)]
NoRepeatNgramSizeOpt = Annotated[int | None, typer.Option(help="Forbid any n-gram of this size from appearing "
                                                          "twice (prompt included). \\[default: 0, off]",
                                                          rich_help_panel="Sampling")]
BadWordsOpt = Annotated[str | None, typer.Option(help="Comma-separated words the output must not contain, "
                                                 "however the tokenizer would spell them: matched as written (case "
                                                 "too), anywhere, also inside a longer word.",
                                                 callback=utf8_text, rich_help_panel="Sampling")]
MinNewTokensOpt = Annotated[int | None, typer.Option(help="Forbid the end of text before this many new tokens. "
                                                     "\\[default: 0]", rich_help_panel="Sampling")]
JsonSchemaOpt = Annotated[str | None, typer.Option(help="Constrain the output to this JSON schema: a file, or "
                                                   "the schema itself.", callback=utf8_text_or_file,
                                                   rich_help_panel="Constrained decoding")]
RegexOpt = Annotated[str | None, typer.Option(help="Constrain the output to match this regex in full. \\d means "
                                              "an ASCII digit, [0-9], as in a JSON schema's pattern.",
                                              callback=utf8_text, rich_help_panel="Constrained decoding")]
GrammarOpt = Annotated[Path | None, typer.Option(help="Constrain the output to this Lark grammar file "
                                                 "(llguidance's syntax; in its /regexes/ \\d is any "
                                                 "Unicode digit: write [0-9]).",
                                                 rich_help_panel="Constrained decoding")]
SeedOpt = Annotated[int | None, typer.Option(min=0, help="Seed for sampling; the same seed gives the same "
                                             "tokens.", rich_help_panel="Sampling")]
NumBeamsOpt = Annotated[int | None, typer.Option(min=1, help="Beams kept at each step. \\[default: 4]",
                                                  rich_help_panel="Beam search")]
LengthPenaltyOpt = Annotated[float | None, typer.Option(help="Score = sum log-prob / length ** this; > 0 favours "
                                                         "longer outputs. \\[default: 1.0]",
                                                         rich_help_panel="Beam search", callback=finite)]
EarlyStoppingOpt = Annotated[EarlyStoppingChoice | None, typer.Option(help="true: stop once num-beams "
                                                                       "hypotheses are finished; false: when no "
                                                                       "open beam can win (heuristic); never: the "
                                                                       "exact test. \\[default: false]",
                                                                       rich_help_panel="Beam search")]
NumReturnSequencesOpt = Annotated[int | None, typer.Option(min=1, help="Hypotheses to return, best first "
                                                             "(<= num-beams). \\[default: 1]",
                                                             rich_help_panel="Beam search")]
DraftOpt = Annotated[str | None, typer.Option(help="speculative: the draft model: a model spec, self (the "
                                              "target's own weights), int4 or int8 (the target quantised), "
                                              "layers:N (its first N layers) or a combination such as "
                                              "int4+layers:20. \\[default: int4]",
                                              rich_help_panel=DRAFTING_PANEL)]
NumDraftTokensOpt = Annotated[int | None, typer.Option(min=1, help="speculative: tokens drafted per round (the "
                                                         "most, with --adaptive). \\[default: 20]",
                                                         rich_help_panel=DRAFTING_PANEL)]
MaxNgramSizeOpt = Annotated[int | None, typer.Option(min=1, help="pld: the longest n-gram to look up. "
                                                       "\\[default: 3]", rich_help_panel=DRAFTING_PANEL)
                              ]
NumPredTokensOpt = Annotated[int | None, typer.Option(
    min=1, help="pld, suffix, recycle and lookahead: the most tokens copied per match (suffix, recycle and "
                "lookahead: the deepest path of a tree), the "
                "draft length (the most, with --adaptive). \\[default: 10]", rich_help_panel=DRAFTING_PANEL)]
RecycleKOpt = Annotated[int | None, typer.Option(
    min=1, max=64, help="recycle: the target's guesses kept per token, each row of the recycled matrix (the paper's "
                        "k). \\[default: 8]", rich_help_panel=DRAFTING_PANEL)]
RecycleStateOpt = Annotated[Path | None, typer.Option(
    metavar="FILE", help="recycle: the matrix file a run starts from and writes back at its end. \\[default: the "
                         "model's own, under the cache folder's recycled/]", rich_help_panel=DRAFTING_PANEL)]
ColdOpt = Annotated[bool | None, typer.Option(
    "--cold", help="recycle: start from an empty matrix (the run still writes its own back).",
    rich_help_panel=DRAFTING_PANEL)]
LookaheadWindowOpt = Annotated[int | None, typer.Option(
    min=1, max=64, help="lookahead: the Jacobi window's columns (the paper's W). \\[default: sized to the device's "
                        "tree budget]", rich_help_panel=DRAFTING_PANEL)]
LookaheadNgramOpt = Annotated[int | None, typer.Option(
    min=2, max=8, help="lookahead: the n-grams' length (the paper's N; the window keeps N - 1 levels). \\[default: "
                       "sized to the device's tree budget]", rich_help_panel=DRAFTING_PANEL)]
LookaheadGuessesOpt = Annotated[int | None, typer.Option(
    min=0, max=64, help="lookahead: the pool's n-grams verified a forward (the paper's G). \\[default: the window's "
                        "columns]", rich_help_panel=DRAFTING_PANEL)]
TreeBudgetOpt = Annotated[int | None, typer.Option(
    help="speculative, pld, suffix, recycle and lookahead: the most drafted nodes one verification reads when drafts "
         "are trees (speculative then adds the draft model's runner-up where it is unsure; pld drafts every earlier "
         "match, not the first only; lookahead sizes its window to it). \\[default: speculative and pld: a chain; "
         "suffix, recycle and lookahead: the device's, measured]",
    rich_help_panel=DRAFTING_PANEL)]
HistoryOpt = Annotated[list[Path] | None, typer.Option(
    "--history", metavar="FILE", help="suffix: an earlier output to draft from (a recording, a `generate "
                                      "--format jsonl` trace or a text file); repeat for more.",
    rich_help_panel=DRAFTING_PANEL)]
DraftConfidenceOpt = Annotated[float | None, typer.Option(
    help="speculative: the draft model stops a round's draft once it gives its own token less than this "
         "probability (transformers' assistant_confidence_threshold; 0 always drafts the full length). "
         "\\[default: 0.4]", rich_help_panel=DRAFTING_PANEL, callback=finite)]
AdaptiveOpt = Annotated[bool | None, typer.Option(
    "--adaptive/--no-adaptive", help="Choose the draft length from the measured acceptance and verify cost, so "
    "drafting never runs much slower than greedy (chains and trees alike). --no-adaptive drafts the full length "
    "every round: the raw behaviour, as the lessons show it. \\[default: adaptive]",
    rich_help_panel=DRAFTING_PANEL, show_default=False)]
CompareOpt = Annotated[bool, typer.Option("--compare", help="Also run plain greedy on the same prompt; report "
                                          "the speedup and whether the outputs are identical.",
                                          rich_help_panel=DRAFTING_PANEL)]
FastOpt = Annotated[bool, typer.Option("--fast", help="Static KV cache and compiled decoding steps and "
                                       "verifications (torch.compile; CUDA graphs on a GPU): the same tokens, "
                                       "faster on a GPU once compiled (the first run compiles for tens of "
                                       "seconds). On a CPU it loads float32 (the dtype whose compiled steps keep "
                                       "their bits at every width) and rarely pays for a demo: minutes of "
                                       "compiling for a modest gain. Not for beam search.", rich_help_panel="Decoding")]
CompareRunsOpt = Annotated[int, typer.Option("--compare-runs", min=1, help="With --compare: timed runs a side, "
                                             "alternated, after a warm-up of each; the speed-up is their median "
                                             "ratio, printed with its range.", rich_help_panel=DRAFTING_PANEL)]
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
ThemeOpt = Annotated[str | None, typer.Option(help="dark (default), presenter (light, high contrast), colorblind "
                                              "or mono (the default when NO_COLOR is set).", rich_help_panel="App")]
# Opened from the start screen (``decode-tui lessons``, a tab of ``decode-tui serve``), which q goes back to.
FromListOpt = Annotated[bool, typer.Option("--from-list", hidden=True)]
