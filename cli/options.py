"""The command line's options, each defined once, and what they become: a DecodeConfig and a prompt.

Every option a decoding command takes is a field of :class:`DecodingOptions`,
typed with its Typer annotation (declared in cli/flags.py, with the choices
and range checks); :func:`decoding_command` gives a command all
of them at once, so ``generate`` and ``run`` can never drift apart. Options
are checked here and in :mod:`decode_tui.core.params` before torch or
transformers is imported, so ``--help`` and every bad-option error come back
in well under a second.

It knows Typer, the core's parameter classes and the theme files' names;
nothing about models, output or the app.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..core.errors import UsageError
from ..core.model.registry import DEFAULT_ALIAS
from ..core.modes import COPYING_MODES, DRAFTING_MODES, MODE_ONLY_OPTIONS, modes_taking
from ..core.params import (
    WARPERS,
    BeamParams,
    Constraint,
    DecodeConfig,
    DraftParams,
    SamplingParams,
    demo_prompt,
    words_of,
)
from ..themes import names as theme_names
from .flags import (
    EARLY_STOPPING,
    AdaptiveOpt,
    BadWordsOpt,
    ColdOpt,
    CudaGraphsOpt,
    DeviceMapOpt,
    DeviceOpt,
    DraftConfidenceOpt,
    DraftOpt,
    DtypeChoice,
    DtypeOpt,
    EarlyStoppingOpt,
    EpsilonCutoffOpt,
    EtaCutoffOpt,
    FastOpt,
    GrammarOpt,
    HistoryOpt,
    JsonSchemaOpt,
    LengthPenaltyOpt,
    LookaheadGuessesOpt,
    LookaheadNgramOpt,
    LookaheadWindowOpt,
    MaxNewTokensOpt,
    MaxNgramSizeOpt,
    MinNewTokensOpt,
    MinPOpt,
    ModeChoice,
    ModelOpt,
    ModeOpt,
    NoChatOpt,
    NoRepeatNgramSizeOpt,
    NumBeamsOpt,
    NumDraftTokensOpt,
    NumPredTokensOpt,
    NumReturnSequencesOpt,
    PromptFileOpt,
    PromptOpt,
    RecycleKOpt,
    RecycleStateOpt,
    RegexOpt,
    RepetitionPenaltyOpt,
    SeedOpt,
    TemperatureOpt,
    TopHOpt,
    TopKOpt,
    TopPOpt,
    TreeBudgetOpt,
    TrustRemoteCodeOpt,
    TypicalPOpt,
)

R = TypeVar("R")


# The options that apply to some modes only (every other decoding option applies to all).
# (Each mode's entry in core/modes.py says which options it takes.)
ONLY_FOR: dict[str, frozenset[ModeChoice]] = {
    option: frozenset(ModeChoice(mode) for mode in modes_taking(option)) for option in sorted(MODE_ONLY_OPTIONS)}
_DRAFTING = frozenset(ModeChoice(mode) for mode in DRAFTING_MODES)
GREEDY = ModeChoice("greedy")  # the default mode
_COPYING = frozenset(ModeChoice(mode) for mode in COPYING_MODES)


def parse_modes(modes: str, mode: ModeChoice, command: str, *, at_least: int = 1) -> list[ModeChoice]:
    """``--modes``: greedy first (every speed-up is over it), then the others named, once each; a UsageError for
    ``--mode`` (these commands take --modes), an unknown mode, or fewer than ``at_least`` distinct modes."""
    if mode != "greedy":
        raise UsageError(f"{command} runs the modes named by --modes (e.g. --modes greedy,pld), not --mode.")
    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in ModeChoice.__members__]
    if unknown or not chosen:
        raise UsageError(f"Unknown mode {', '.join(map(repr, unknown)) or '(none given)'} in --modes. Use a "
                         f"comma-separated list of: {', '.join(ModeChoice.__members__)}.")
    distinct = list(dict.fromkeys(ModeChoice(m) for m in chosen))
    if len(distinct) < at_least:
        raise UsageError(f"A {command} needs at least {at_least} modes; --modes gave "
                         f"{', '.join(m.value for m in distinct)}. For example: --modes greedy,pld,speculative.")
    return [ModeChoice("greedy"), *(m for m in distinct if m != "greedy")]


def build_config(options: DecodingOptions, *, compare: bool = False, constraint: Constraint | None = None,
                 ) -> DecodeConfig:
    """The run's settings from the decoding options; UsageError if they clash. ``constraint``: one already read
    (a lesson reads its files from beside it); by default the options' own --json-schema, --regex or --grammar."""
    o = options
    mode, max_new_tokens, temperature, top_k, top_p = o.mode, o.max_new_tokens, o.temperature, o.top_k, o.top_p
    repetition_penalty, seed, num_beams, length_penalty = o.repetition_penalty, o.seed, o.num_beams, o.length_penalty
    early_stopping, num_return_sequences, draft = o.early_stopping, o.num_return_sequences, o.draft
    num_draft_tokens, max_ngram_size, num_pred_tokens = o.num_draft_tokens, o.max_ngram_size, o.num_pred_tokens
    draft_confidence, adaptive, tree_budget, history = o.draft_confidence, o.adaptive, o.tree_budget, o.history
    if constraint is None:
        constraint = constraint_of(o.json_schema, o.regex, o.grammar)
    defaults = SamplingParams()
    stages = o.stages()
    given_stages: dict[str, Any] = {name: value for name, value in stages.items() if value is not None}
    sampling = SamplingParams(
        temperature=defaults.temperature if temperature is None else temperature,
        top_k=defaults.top_k if top_k is None else top_k,
        top_p=defaults.top_p if top_p is None else top_p,
        repetition_penalty=defaults.repetition_penalty if repetition_penalty is None else repetition_penalty,
        **given_stages,
    )
    beam_options = (num_beams, length_penalty, early_stopping, num_return_sequences)
    if mode not in ONLY_FOR["num_beams"] and beam_options != (None, None, None, None):
        raise UsageError(f"--num-beams, --length-penalty, --early-stopping and --num-return-sequences apply to "
                         f"beam search only, not to --mode {mode.value}. Use --mode beam, or leave them out.")
    beam_defaults = BeamParams()
    beam = BeamParams(
        num_beams=beam_defaults.num_beams if num_beams is None else num_beams,
        length_penalty=beam_defaults.length_penalty if length_penalty is None else length_penalty,
        early_stopping=beam_defaults.early_stopping if early_stopping is None else EARLY_STOPPING[early_stopping],
        num_return_sequences=1 if num_return_sequences is None else num_return_sequences,
    )
    drafting = mode in _DRAFTING
    given_options = {"draft": draft, "max_ngram_size": max_ngram_size, "num_pred_tokens": num_pred_tokens,
                     "num_draft_tokens": num_draft_tokens, "draft_confidence": draft_confidence,
                     "adaptive": adaptive, "compare": compare or None, "tree_budget": tree_budget,
                     "history": history or None, "recycle_k": o.recycle_k, "recycle_state": o.recycle_state,
                     "cold": o.cold or None, "lookahead_window": o.lookahead_window,
                     "lookahead_ngram": o.lookahead_ngram, "lookahead_guesses": o.lookahead_guesses}
    for name, given in given_options.items():
        allowed, flag = ONLY_FOR[name], "--" + name.replace("_", "-")
        if given is not None and name == "num_draft_tokens" and mode in _COPYING:
            raise UsageError(f"In --mode {mode.value} the draft length is --num-pred-tokens: the most tokens "
                             "copied in a round (transformers' prompt_lookup_num_tokens, 10 by default).")
        if given is not None and mode not in allowed:
            modes = " or ".join(f"--mode {m.value}" for m in sorted(allowed, key=lambda m: m.value))
            raise UsageError(f"{flag} applies to {modes}, not to --mode {mode.value}.")
    draft_defaults = DraftParams()
    draft_params = DraftParams(
        draft=draft or draft_defaults.draft,
        num_draft_tokens=num_draft_tokens or draft_defaults.num_draft_tokens,
        max_ngram_size=max_ngram_size or draft_defaults.max_ngram_size,
        num_pred_tokens=num_pred_tokens or draft_defaults.num_pred_tokens,
        adaptive=adaptive is not False,  # the cost-aware policy unless --no-adaptive: drafting never loses
        confidence_threshold=draft_defaults.confidence_threshold if draft_confidence is None else draft_confidence,
        named=draft is not None,
        tree_budget=tree_budget,
        history=tuple(str(path) for path in history or ()),
        recycle_k=o.recycle_k or draft_defaults.recycle_k,
        recycle_state=str(o.recycle_state) if o.recycle_state is not None else None,
        cold=bool(o.cold),
        lookahead_window=o.lookahead_window,
        lookahead_ngram=o.lookahead_ngram,
        lookahead_guesses=o.lookahead_guesses,
    )
    if o.recycle_state is not None and o.recycle_state.is_dir():  # the matrix could be neither read nor written back
        raise UsageError(f"--recycle-state {o.recycle_state} is a folder: name a file (made at the run's end if it "
                         "is missing).")
    if history:  # a file that cannot give a draft is refused now, before any model loads
        from ..core.drafting.suffix_drafting import check_history_files

        check_history_files(history)
    # Beam, speculative and pld modes sample (beam sampling, sampling verification) when a sampling
    # parameter is given; otherwise they are greedy.
    sampling_asked = asks_sampling({"temperature": temperature, "top_k": top_k, "top_p": top_p, **given_stages})
    config = DecodeConfig(mode=mode.value, max_new_tokens=max_new_tokens, sampling=sampling, beam=beam,
                          beam_sample=mode == "beam" and sampling_asked, draft=draft_params,
                          draft_sample=drafting and sampling_asked, seed=seed, use_chat=not o.no_chat, fast=o.fast,
                          cuda_graphs=o.cuda_graphs, constraint=constraint)
    return config


def asks_sampling(given: dict[str, Any]) -> bool:
    """Whether the options ``given`` (None: not given) set a stage only sampling applies (core/params.py's
    WARPERS): in beam, speculative and pld modes that asks for sampling."""
    return any(given.get(name) is not None for name in WARPERS)


def bad_words_of(text: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...] | None:
    """``--bad-words 'sorry,apologize'``: the words, each as written (the run also forbids it after a space); a
    lesson's list of words as it is."""
    if text is None:
        return None
    if not isinstance(text, str):
        return tuple(text)
    try:
        words = words_of(text)
    except UsageError as err:
        raise UsageError(f"--bad-words {err.message}") from None
    if not words:
        raise UsageError("--bad-words is empty. Give comma-separated words, for example --bad-words 'sorry,apologize'.")
    return words


def constraint_of(json_schema: str | None, regex: str | None, grammar: Path | str | None,
                  base: Path = Path()) -> Constraint | None:
    """The constraint from ``--json-schema`` (a file, or the schema itself), ``--regex`` or ``--grammar`` (a Lark
    file), checked at once (core/choosing/constraints.py); a UsageError for more than one, or an unreadable file.
    ``base``: where a relative file is read from (a lesson's files are beside the lesson)."""
    given = [name for name, value in (("--json-schema", json_schema), ("--regex", regex), ("--grammar", grammar))
             if value is not None]
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)} each constrain the output: give one of them.")
    if json_schema is not None:
        path = base / json_schema
        if json_schema.lstrip().startswith(("{", "[")) or not path.suffix:
            constraint = Constraint("json_schema", json_schema)
        else:
            constraint = Constraint("json_schema", _read_text(path, "JSON schema"), origin=path.name)
    elif regex is not None:
        constraint = Constraint("regex", regex)
    elif grammar is not None:
        path = base / grammar
        constraint = Constraint("grammar", _read_text(path, "grammar"), origin=path.name)
    else:
        return None
    from ..core.choosing.constraints import grammar_text

    grammar_text(constraint)
    return constraint


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"The {what} file {path} does not exist. Check the path.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read the {what} file {path}: {exc}.") from None




@dataclasses.dataclass(frozen=True)
class DecodingOptions:
    """Every option a decoding command takes (``generate``, ``run``): the one place each is defined."""

    model: ModelOpt = None  # see model_name
    device: DeviceOpt = "auto"
    dtype: DtypeOpt = DtypeChoice.auto
    device_map: DeviceMapOpt = None
    trust_remote_code: TrustRemoteCodeOpt = False
    prompt: PromptOpt = None
    prompt_file: PromptFileOpt = None
    no_chat: NoChatOpt = False
    mode: ModeOpt = GREEDY
    max_new_tokens: MaxNewTokensOpt = 128
    fast: FastOpt = False
    cuda_graphs: CudaGraphsOpt = True
    temperature: TemperatureOpt = None
    top_k: TopKOpt = None
    top_p: TopPOpt = None
    repetition_penalty: RepetitionPenaltyOpt = None
    min_p: MinPOpt = None
    typical_p: TypicalPOpt = None
    epsilon_cutoff: EpsilonCutoffOpt = None
    eta_cutoff: EtaCutoffOpt = None
    top_h: TopHOpt = None
    no_repeat_ngram_size: NoRepeatNgramSizeOpt = None
    bad_words: BadWordsOpt = None
    min_new_tokens: MinNewTokensOpt = None
    json_schema: JsonSchemaOpt = None
    regex: RegexOpt = None
    grammar: GrammarOpt = None
    seed: SeedOpt = None
    num_beams: NumBeamsOpt = None
    length_penalty: LengthPenaltyOpt = None
    early_stopping: EarlyStoppingOpt = None
    num_return_sequences: NumReturnSequencesOpt = None
    draft: DraftOpt = None
    num_draft_tokens: NumDraftTokensOpt = None
    max_ngram_size: MaxNgramSizeOpt = None
    num_pred_tokens: NumPredTokensOpt = None
    draft_confidence: DraftConfidenceOpt = None
    adaptive: AdaptiveOpt = None
    tree_budget: TreeBudgetOpt = None
    history: HistoryOpt = None
    recycle_k: RecycleKOpt = None
    recycle_state: RecycleStateOpt = None
    cold: ColdOpt = None
    lookahead_window: LookaheadWindowOpt = None
    lookahead_ngram: LookaheadNgramOpt = None
    lookahead_guesses: LookaheadGuessesOpt = None

    def config(self, *, compare: bool = False) -> DecodeConfig:
        """The run's settings; a UsageError names the options that clash."""
        return build_config(self, compare=compare)

    def stages(self) -> dict[str, Any]:
        """The other sampling stages, by their ``SamplingParams`` field; None where not given."""
        return {"min_p": self.min_p, "typical_p": self.typical_p, "epsilon_cutoff": self.epsilon_cutoff,
                "eta_cutoff": self.eta_cutoff, "top_h": self.top_h, "no_repeat_ngram_size": self.no_repeat_ngram_size,
                "bad_words": bad_words_of(self.bad_words), "min_new_tokens": self.min_new_tokens}

    @property
    def warpers_given(self) -> bool:
        """Whether a stage only sampling applies was given (see :func:`asks_sampling`)."""
        return asks_sampling({"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                              **self.stages()})

    @property
    def model_name(self) -> str:
        """--model, else the default (see :meth:`with_default_model`)."""
        return self.model or DEFAULT_ALIAS

    def with_default_model(self, configured: str | None) -> DecodingOptions:
        """The options with the config file's model where --model was not given."""
        return dataclasses.replace(self, model=self.model or configured or DEFAULT_ALIAS)

    def for_mode(self, mode: ModeChoice) -> DecodingOptions:
        """These options for ``mode``, without the ones that apply to other modes only (a benchmark's modes)."""
        defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(self)}
        dropped = {name: defaults[name] for name, modes in ONLY_FOR.items() if name in defaults and mode not in modes}
        return dataclasses.replace(self, mode=mode, **dropped)

    def with_prompt_argument(self, text: str | None) -> DecodingOptions:
        """The options with a command's positional prompt (``decode-tui generate "Hi"``) as --prompt.

        The positional prompt belongs to the commands that have no other positional argument (a lesson's
        name is one), so it is not among the shared options; a prompt given twice is refused, not chosen."""
        if text is None:
            return self
        if self.prompt is not None or self.prompt_file is not None:
            given = "--prompt" if self.prompt is not None else "--prompt-file"
            raise UsageError(f"The prompt was given twice: as an argument and with {given}. Pass one of them.")
        return dataclasses.replace(self, prompt=text)

    def prompt_text(self) -> str:
        return read_prompt(self.prompt, self.prompt_file, self.mode.value)

    @property
    def device_map_name(self) -> str | None:
        return self.device_map.value if self.device_map else None


def decoding_command(command: Callable[..., R]) -> Callable[..., R]:
    """``command(options: DecodingOptions, **its_own)`` as a Typer command taking every decoding option too.

    Typer reads a command's options from its signature; this one is built from the fields of
    :class:`DecodingOptions` followed by the command's own parameters, and the call gathers the decoding
    ones back into a :class:`DecodingOptions`. (Typer has no shared-options mechanism of its own: click's
    decorators would bypass its type annotations.)
    """
    hints = typing.get_type_hints(DecodingOptions, include_extras=True)
    shared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name])
              for f in dataclasses.fields(DecodingOptions)]
    own_hints = typing.get_type_hints(command, include_extras=True)
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=own_hints[name])
           for name, p in inspect.signature(command).parameters.items() if name != "options"]
    names = [f.name for f in dataclasses.fields(DecodingOptions)]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> R:
        options = DecodingOptions(**{name: kwargs.pop(name) for name in names})
        return command(options, **kwargs)

    wrapper.__signature__ = inspect.Signature(shared + own)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in shared + own}
    return wrapper


def read_prompt(prompt: str | None, prompt_file: Path | None, mode: str = "greedy") -> str:
    """The prompt text from --prompt, --prompt-file (``-`` for stdin) or the built-in demo prompt."""
    if prompt is not None and prompt_file is not None:
        raise UsageError("Pass either --prompt or --prompt-file, not both.")
    if prompt_file is not None:
        if str(prompt_file) == "-":
            try:  # decoded here, strictly: the stream's own decoding may let bad bytes through as surrogates
                text = sys.stdin.buffer.read().decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UsageError(f"The prompt on standard input is not UTF-8 text (bad byte at offset {exc.start}). "
                                 "Convert it, e.g. `iconv -t utf-8`.") from None
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
        text, source = prompt, "the command line"
    else:
        return demo_prompt(mode)  # the mode's own demo prompt (core/params.py)
    if not text.strip():
        raise UsageError(f"The prompt from {source} is empty. Give the model some text to continue.")
    return text


def theme_name(theme: str | None) -> str | None:
    """The theme file's name for ``--theme`` (``presenter`` or ``decode-presenter``); UsageError if none has it."""
    if theme is None:
        return None
    known = theme_names()
    name = theme if theme.startswith("decode-") else f"decode-{theme}"
    if name not in known:
        short = ", ".join(n.removeprefix("decode-") for n in known)
        raise UsageError(f"Unknown theme {theme!r}. Use one of: {short}.")
    return name
