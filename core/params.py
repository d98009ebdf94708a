"""The parameters of a run, validated without importing torch.

Front ends build these from user input first, so a bad value is reported in
milliseconds, before any model or heavy library is loaded. Each check says
what to do instead.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from .errors import UsageError
from .modes import DEMO_PROMPT, MODE_SPECS, MODES
from .record.events import Mode

# The prompt each mode opens on when none is given, from its entry in core/modes.py.
DEMO_PROMPTS: dict[str, str] = {mode: spec.demo_prompt for mode, spec in MODE_SPECS.items()}


DEVICE_MAPS = ("auto", "balanced", "sequential")  # accelerate's placements for a model spread over devices


def check_device_map(device: str, device_map: str | None) -> None:
    """A UsageError unless ``device_map`` is one of DEVICE_MAPS and ``device`` is left to it (front ends call this
    before loading anything, so the message comes at once)."""
    if device_map is None:
        return
    if device_map not in DEVICE_MAPS:
        raise UsageError(f"Unknown device map {device_map!r}. Use one of: {', '.join(DEVICE_MAPS)}.")
    if device != "auto":
        raise UsageError(f"--device-map {device_map} places the model itself; it replaces --device {device}. "
                         "Give one of the two.")


def demo_prompt(mode: str) -> str:
    """The prompt ``mode`` shows when the user gives none (see ``DEMO_PROMPTS``)."""
    return DEMO_PROMPTS.get(mode, DEMO_PROMPT)


# The stages only sampling applies (transformers' warpers), by their SamplingParams field, in generate's order:
# greedy decoding takes the argmax, which none of them moves. They read only the row of scores they are given.
WARPERS: tuple[str, ...] = ("temperature", "top_h", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff",
                            "eta_cutoff")


def words_of(text: str) -> tuple[str, ...]:
    """Comma-separated bad words as typed (``"sorry, apologize"``), each stripped; none for a blank text. A
    UsageError when one between the commas is empty."""
    if not text.strip():
        return ()
    words = tuple(word.strip() for word in text.split(","))
    if not all(words):
        raise UsageError(f"{text!r} holds an empty word. Give comma-separated words, for example 'sorry,apologize'.")
    return words


@dataclass(frozen=True)
class SamplingParams:
    """The sampling knobs, with transformers' defaults. ``temperature == 0`` means greedy."""

    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    # The other stages transformers applies to a causal LM's text, off by default as in ``GenerationConfig``
    # (named as its fields; ``bad_words`` holds text, which the output may never contain: core/choosing/bad_words.py).
    min_p: float | None = None
    typical_p: float = 1.0
    epsilon_cutoff: float = 0.0
    eta_cutoff: float = 0.0
    top_h: float | None = None
    no_repeat_ngram_size: int = 0
    bad_words: tuple[str, ...] = ()
    min_new_tokens: int = 0

    def __post_init__(self) -> None:
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise UsageError(f"temperature must be 0 (greedy) or positive, not {self.temperature}. "
                             "Use 0 for greedy decoding, below 1 to sharpen, above 1 to flatten.")
        if self.top_k < 0:
            raise UsageError(f"top_k must be 0 (off) or a positive count, not {self.top_k}. "
                             "Use 0 to keep every token, or a count such as 50.")
        if not (0.0 < self.top_p <= 1.0):
            raise UsageError(f"top_p must be in (0, 1], not {self.top_p}. Use 1 to turn nucleus sampling off.")
        if not math.isfinite(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise UsageError(f"repetition_penalty must be positive, not {self.repetition_penalty}. "
                             "Use 1 for no penalty, above 1 to discourage repeats.")
        self._check_cutoffs()
        if self.no_repeat_ngram_size < 0:
            raise UsageError(f"no_repeat_ngram_size must be 0 (off) or a positive n-gram length, not "
                             f"{self.no_repeat_ngram_size}. Use 3 to forbid repeating any three tokens in a row.")
        if self.min_new_tokens < 0:
            raise UsageError(f"min_new_tokens must be 0 (off) or a positive count, not {self.min_new_tokens}.")
        if any(not word.strip() for word in self.bad_words):
            raise UsageError("A bad word is empty: give each word to forbid as text, for example "
                             "--bad-words 'sorry,apologize'.")
        object.__setattr__(self, "bad_words", tuple(self.bad_words))  # a list from TOML or JSON, kept hashable

    def _check_cutoffs(self) -> None:
        """The probability cut-offs, with the ranges transformers' warpers accept."""
        if self.min_p is not None and not 0.0 <= self.min_p <= 1.0:
            raise UsageError(f"min_p must be in [0, 1], not {self.min_p}. Use 0.05 or 0.1, a fraction of the "
                             "most likely token's probability.")
        if not 0.0 < self.typical_p <= 1.0:
            raise UsageError(f"typical_p must be in (0, 1], not {self.typical_p}. Use 1 to turn typical "
                             "sampling off, 0.9 or 0.95 to turn it on.")
        for name in ("epsilon_cutoff", "eta_cutoff"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise UsageError(f"{name} must be in [0, 1), not {value}. Use 0 for off, or a small "
                                 "probability such as 3e-4.")
        if self.top_h is not None and not 0.0 < self.top_h <= 1.0:
            raise UsageError(f"top_h must be in (0, 1], not {self.top_h}. Use 0.4, a fraction of the "
                             "distribution's entropy.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


EarlyStopping = bool | Literal["never"]


@dataclass(frozen=True)
class BeamParams:
    """Beam search settings, with transformers' defaults."""

    num_beams: int = 4
    length_penalty: float = 1.0
    early_stopping: EarlyStopping = False
    num_return_sequences: int = 1

    def __post_init__(self) -> None:
        if self.num_beams < 1:
            raise UsageError(f"num_beams must be at least 1, not {self.num_beams}. Use 4 for a typical beam search.")
        if not 1 <= self.num_return_sequences <= self.num_beams:
            raise UsageError(f"num_return_sequences ({self.num_return_sequences}) must be between 1 and num_beams "
                             f"({self.num_beams}). Ask for fewer sequences or more beams.")
        if not math.isfinite(self.length_penalty):
            raise UsageError(f"length_penalty must be a finite number, not {self.length_penalty}. Use 1.0 (the "
                             "default), above 0 to favour longer outputs, below 0 for shorter ones.")
        if self.early_stopping not in (True, False, "never"):
            raise UsageError(f"early_stopping must be true, false or never, not {self.early_stopping!r}.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The draft when none is named: the target in 4 bits, a quarter of a target step on the CPU (BENCHMARKS.md).
DEFAULT_DRAFT = "int4"
# A draft made from the target (core/drafting/target_drafts.py): one part, or several joined by "+".
_PART = re.compile(r"^(int4|int8|layers:(-?\d+))$")


@dataclass(frozen=True)
class TargetDraft:
    """What a draft keeps of its target: ``bits`` (4, 8 or None: the target's own dtype) and ``layers`` (None:
    all of them)."""

    bits: int | None = None
    layers: int | None = None

    def describe(self) -> str:
        parts = ([f"int{self.bits} copy"] if self.bits else []) + (
            [f"first {self.layers} layers"] if self.layers else [])
        return " of the ".join(parts) + " of the target" if parts else "the target"


def target_draft(spec: str) -> TargetDraft | None:
    """The draft a spec builds from the target, or None when it names another model (or ``self``).

    ``int4``, ``int8``, ``layers:N`` and their combinations with ``+`` (``int4+layers:20``). A spec that starts
    like one of them but is not (``layers:x``, ``int4+int8``) is a UsageError saying what is accepted."""
    parts = spec.split("+")
    if not any(_PART.match(p) or p.startswith("layers:") for p in parts):
        return None
    bits: int | None = None
    layers: int | None = None
    for part in parts:
        match = _PART.match(part)
        if match is None:
            raise UsageError(f"--draft {spec}: {part!r} is not a draft made from the target. Use int4, int8, "
                             "layers:N (the first N layers) or a combination such as int4+layers:20.")
        if match.group(2) is not None:
            if layers is not None:
                raise UsageError(f"--draft {spec} names the layers twice. Give one layers:N.")
            layers = int(match.group(2))
        else:
            if bits is not None:
                raise UsageError(f"--draft {spec} names two quantisations. Give int4 or int8, not both.")
            bits = int(part.removeprefix("int"))
    return TargetDraft(bits, layers)


@dataclass(frozen=True)
class DraftParams:
    """Speculative and prompt lookup settings.

    ``draft`` is a model spec, ``self`` (the target drafts for itself: greedy
    acceptance must then be 100 %) or a draft made from the target
    (:func:`target_draft`: ``int4``, the default, ``int8``, ``layers:N``, or
    a combination; built by :mod:`decode_tui.core.drafting.target_drafts`).
    ``num_draft_tokens`` is a draft model's draft length (the most the adaptive
    mode uses); prompt lookup copies up to ``num_pred_tokens`` after an n-gram
    of at most ``max_ngram_size`` tokens, its draft length (see :meth:`length`).
    """

    draft: str = DEFAULT_DRAFT
    # transformers' num_assistant_tokens: a draft that stops where it is unsure rarely drafts that many, and on the
    # CPU a long confident draft is what pays (BENCHMARKS.md, "Each mode on the CPU").
    num_draft_tokens: int = 20
    max_ngram_size: int = 3
    num_pred_tokens: int = 10
    adaptive: bool = False
    # A draft model stops a round's draft once it gives its own token less than this probability: such a token
    # is likely rejected, and drafting past it wasted work (transformers' assistant_confidence_threshold, 0.4).
    confidence_threshold: float = 0.4
    # The user named ``draft`` (a flag, the settings): one this device cannot run is refused, not replaced by
    # ``self`` as the default is (core/drafting/draft_models.load_draft).
    named: bool = False
    # The most drafted nodes one verification reads when drafts are trees: prompt lookup then merges every match
    # (None: it drafts the first match's chain, as transformers does); suffix drafting always drafts trees (None:
    # the device's budget, core/drafting/suffix_drafting.py).
    tree_budget: int | None = None
    # Suffix drafting's files of earlier outputs (--history): recordings, jsonl traces or text, read by each run.
    history: tuple[str, ...] = ()
    # Token recycling's guesses kept per token: each row of its matrix holds the target's top recycle_k next tokens
    # (the paper's k, 8).
    recycle_k: int = 8
    # Its matrix between runs (core/drafting/recycled_state.py): the file it starts from and writes back (None: the
    # model's own under the cache folder), ``cold`` to start empty, and ``recycle_keep`` False for runs that must
    # each start from the same state (bench's and race's repeats), which write nothing back.
    recycle_state: str | None = None
    cold: bool = False
    recycle_keep: bool = True
    # Lookahead decoding's window (core/drafting/lookahead.py): W columns, n-grams of N tokens (N - 1 levels) and
    # G pool n-grams checked a forward; None: sized to the device's tree budget.
    lookahead_window: int | None = None
    lookahead_ngram: int | None = None
    lookahead_guesses: int | None = None

    def __post_init__(self) -> None:
        target_draft(self.draft)  # a malformed layers:N or int4+int8 is refused before any model loads
        # Read back from JSON (a recording's header) the files come as a list: one form, so configs compare equal.
        object.__setattr__(self, "history", tuple(str(name) for name in self.history))
        for name in ("num_draft_tokens", "max_ngram_size", "num_pred_tokens"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be at least 1, not {getattr(self, name)}.")
        if not 1 <= self.recycle_k <= MAX_RECYCLE_K:
            raise UsageError(f"--recycle-k takes 1 to {MAX_RECYCLE_K} guesses a token, not {self.recycle_k}.")
        for name, low, high in (("window", 1, MAX_LOOKAHEAD), ("ngram", 2, MAX_NGRAM), ("guesses", 0, MAX_LOOKAHEAD)):
            value = getattr(self, f"lookahead_{name}")
            if value is not None and not low <= value <= high:
                raise UsageError(f"--lookahead-{name} takes {low} to {high}, not {value}.")
        w, n = self.lookahead_window, self.lookahead_ngram
        if w is not None and n is not None:  # checked again once the device has sized what is not given
            check_lookahead(w, n, w if self.lookahead_guesses is None else self.lookahead_guesses)
        if self.tree_budget is not None and not 1 <= self.tree_budget <= MAX_TREE_BUDGET:
            raise UsageError(f"--tree-budget takes 1 to {MAX_TREE_BUDGET} drafted nodes a verification, not "
                             f"{self.tree_budget}. Leave it out for the device's own budget.")
        if not 0.0 <= self.confidence_threshold <= 1.0:
            raise UsageError(f"The draft confidence cut-off must be between 0 and 1 (0 drafts every token), not "
                             f"{self.confidence_threshold}.")

    @property
    def model_spec(self) -> str | None:
        """The draft model to fetch and load, or None when the draft is made from the target (``self``, ``int4``,
        ``layers:N`` ...)."""
        return None if self.draft == "self" or target_draft(self.draft) is not None else self.draft

    def length(self, option: Literal["num_draft_tokens", "num_pred_tokens"]) -> int:
        """The most tokens a round drafts, set by the drafter's ``option`` (its DrafterSpec.length):
        ``num_pred_tokens`` for a copy (transformers' ``prompt_lookup_num_tokens``, 10: a copy costs nothing to draft,
        and verifying 10 tokens costs a GPU about what verifying 5 does), ``num_draft_tokens`` for a draft model (each
        token one of its steps)."""
        return self.num_pred_tokens if option == "num_pred_tokens" else self.num_draft_tokens

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def repeatable(self) -> DraftParams:
        """These settings for runs that must each start from the same state (a benchmark's repeats, whose figures
        must not depend on their order): token recycling's matrix read from the file named, or empty where none is,
        and never written back."""
        return replace(self, cold=self.cold or self.recycle_state is None, recycle_keep=False)


MAX_RECYCLE_K = 64  # guesses a token: the matrix is V x k ids, and a template rarely reaches past the 8th
MAX_TREE_BUDGET = 512  # nodes: a verification that wide costs many steps on any device
MAX_LOOKAHEAD = 64  # lookahead's columns and guesses: the paper's widest window is 15 (W + G nodes a level)
MAX_NGRAM = 8  # lookahead's n-gram length: every level adds a row of W nodes to a forward


def lookahead_nodes(window: int, ngram: int, guesses: int) -> int:
    """The nodes one lookahead forward reads past the pending token (core/drafting/lookahead.py): level 0's columns
    but the first, W for each higher level, N - 1 for each of G n-grams."""
    return (window - 1) + window * (ngram - 2) + guesses * (ngram - 1)


def check_lookahead(window: int, ngram: int, guesses: int) -> None:
    """A UsageError where W, N and G make no window (one column of one level: the pending token alone) or one wider
    than any tree may be."""
    if window == 1 and ngram == 2:
        raise UsageError("A lookahead window of one column needs n-grams of 3 or more (--lookahead-ngram): with one "
                         "level it would hold only the pending token, and guess nothing.")
    nodes = lookahead_nodes(window, ngram, guesses)
    if nodes > MAX_TREE_BUDGET:
        raise UsageError(f"A lookahead window of W = {window}, N = {ngram} and G = {guesses} reads {nodes} nodes a "
                         f"forward, more than the {MAX_TREE_BUDGET} any tree may: narrow --lookahead-window, "
                         "--lookahead-ngram or --lookahead-guesses.")


ConstraintKind = Literal["json_schema", "regex", "grammar"]
CONSTRAINT_NAMES: dict[str, str] = {"json_schema": "JSON schema", "regex": "regex", "grammar": "Lark grammar"}


@dataclass(frozen=True)
class Constraint:
    """What the output must match: a JSON schema, a regex or a Lark grammar in llguidance's syntax (its text),
    compiled by :mod:`decode_tui.core.choosing.grammar`. ``origin``: the file it was read from, if any."""

    kind: ConstraintKind
    text: str
    origin: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in CONSTRAINT_NAMES:
            raise UsageError(f"Unknown constraint {self.kind!r}. Use one of: {', '.join(CONSTRAINT_NAMES)}.")
        if not self.text.strip():
            raise UsageError(f"The {self.describe()} is empty. Give the {CONSTRAINT_NAMES[self.kind]} itself.")

    def describe(self) -> str:
        """``JSON schema (person.json)``, ``regex``."""
        return CONSTRAINT_NAMES[self.kind] + (f" ({self.origin})" if self.origin else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DecodeConfig:
    """Everything about a run except the model and the prompt."""

    mode: Mode = "greedy"
    max_new_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    beam: BeamParams = field(default_factory=BeamParams)
    beam_sample: bool = False  # beam mode: draw the candidates (beam sampling) instead of taking the top ones
    draft: DraftParams = field(default_factory=DraftParams)
    draft_sample: bool = False  # speculative and pld: sampling verification instead of greedy
    seed: int | None = None
    use_chat: bool = True
    top_n: int = 10  # candidates per stage in TokenSampled
    # The fast path for decoding steps and verification: a static KV cache and compiled forward passes
    # (see core/execution/forward.py). Beam search always takes the plain path.
    fast: bool = False
    # On CUDA, decoding steps and verifications replay CUDA graphs of the eager model on a static KV cache
    # (captured in milliseconds, see core/execution/forward.py). Off: the plain path everywhere. Ignored elsewhere.
    cuda_graphs: bool = True
    constraint: Constraint | None = None  # what the output must match (constrained decoding), in every mode

    @property
    def compiles(self) -> bool:
        """Whether the decoding steps run compiled (``fast``; beam search is never compiled)."""
        return self.fast and self.mode != "beam"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UsageError(f"Unknown mode {self.mode!r}. Use one of: {', '.join(MODES)}.")
        if self.max_new_tokens < 1:
            raise UsageError(f"max_new_tokens must be at least 1, not {self.max_new_tokens}.")
        if self.top_n < 1:
            raise UsageError(f"top_n must be at least 1, not {self.top_n}.")
        if self.sampling.min_new_tokens > self.max_new_tokens:
            raise UsageError(f"min_new_tokens ({self.sampling.min_new_tokens}) is more than max_new_tokens "
                             f"({self.max_new_tokens}): the run would stop before it may. Lower the first or raise "
                             "the second.")
