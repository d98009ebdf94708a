"""The typed events every decoding strategy yields.

Each event is a frozen dataclass named in the past tense, holding only JSON
types (str, int, float, bool, None, tuples and nested event records), so a
run can be written as JSON lines, recorded and replayed without a model.
The events for every mode are defined here: a new mode's strategy or drafter
yields these, and its name is the registry's (core/modes.py).

This module knows nothing about torch, tokenizers or how events are shown.
The field-by-field reference is ``docs/events.md``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from ..token_tree import TokenTree

# A mode's name. The modes are the registry's (core/modes.py), which another package may add to, so a recording
# reads any name here; the run and the front ends check it against the registry.
Mode = str

FinishReason = Literal["eos", "length", "cancelled", "error"]

# Where an emitted token came from: the target model's own choice, an
# accepted draft-model token, an accepted prompt-lookup copy, a token
# resampled from max(0, p - q) after a rejection, the bonus token drawn
# after a fully accepted draft, or a token the user forced (a branch).
TokenSource = Literal["target", "draft", "lookup", "resampled", "bonus", "forced"]

# The sampling stages, named as transformers' GenerationConfig fields, in the order generate applies them;
# ``grammar`` is a constraint, applied where generate applies a caller's logits_processor, and ``bad_words`` bans
# text where generate's bad_words_ids bans token sequences (core/choosing/bad_words.py).
Stage = Literal["raw", "repetition_penalty", "no_repeat_ngram_size", "bad_words", "min_new_tokens", "grammar",
                "temperature", "top_h", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff"]
STAGES: tuple[Stage, ...] = ("raw", "repetition_penalty", "no_repeat_ngram_size", "bad_words", "min_new_tokens",
                             "grammar", "temperature", "top_h", "top_k", "top_p", "min_p", "typical_p",
                             "epsilon_cutoff", "eta_cutoff")


@dataclass(frozen=True)
class Event:
    """Base class: ``name`` is the ``"event"`` field of the JSON form."""

    name: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        """The JSON object for this event; optional fields left at None are dropped."""
        out: dict[str, Any] = {"event": self.name}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = _jsonable(value)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not (getattr(value, f.name) is None and f.metadata.get("omit_none"))}
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _optional() -> Any:
    """A mode-specific field: None by default and left out of the JSON form when None."""
    return field(default=None, metadata={"omit_none": True})


# --------------------------------------------------------------------- common


@dataclass(frozen=True)
class Candidate:
    """One candidate next token and its probability at some stage."""

    token_id: int
    text: str
    prob: float


@dataclass(frozen=True)
class Started(Event):
    """A run began: the prompt is tokenised and the model is about to prefill."""

    name: ClassVar[str] = "started"
    mode: Mode
    model: str
    prompt_token_ids: tuple[int, ...]
    prompt_text: str
    params: Mapping[str, Any]
    # One display label per prompt token (the PLD view highlights matches in the prompt by token index).
    prompt_pieces: tuple[str, ...] | None = _optional()
    # What the run's drafter said it starts from (token recycling's matrix: "matrix: 3,412 rows from earlier runs").
    notes: tuple[str, ...] | None = _optional()


@dataclass(frozen=True)
class TokenEmitted(Event):
    """A token joined the output.

    ``text`` is its piece of the detokenised output: the pieces of all emitted
    tokens concatenate exactly to the final text, and a piece never holds half
    a character (a token that ends inside a UTF-8 sequence gets ``""`` and the
    token that completes the character gets all of it). ``start``/``end`` are
    the piece's character offsets in the output text.
    """

    name: ClassVar[str] = "token_emitted"
    index: int  # position among the new tokens, from 0
    token_id: int
    text: str
    start: int
    end: int
    source: TokenSource = "target"
    # Target forward passes so far, this token's included (the prefill counts as one). Counters in a viewer
    # come from here, never re-derived. None in recordings made before it existed.
    target_forwards: int | None = _optional()
    # Seconds spent decoding so far, this token included: time the run was paused, stepped or held at a
    # lesson's pause is left out, so a viewer's tok/s is true after a pause. None in older recordings.
    elapsed_s: float | None = _optional()
    # How likely the model found this token where it stands, under its raw distribution (the logits before any
    # processor): the natural log of its probability, the entropy of that distribution in nats, and the token's
    # rank in it (1 = the most likely). A drafted token's are the target's, from verification. None in older
    # recordings.
    logprob: float | None = _optional()
    entropy: float | None = _optional()
    rank: int | None = _optional()


@dataclass(frozen=True)
class StageCandidates:
    """The top candidates after one sampling stage (probabilities via softmax of that stage's scores)."""

    stage: Stage
    candidates: tuple[Candidate, ...]
    # The token drawn at this step, seen at this stage: its probability and rank (1: the most likely), so a
    # viewer can show it where it is not among ``candidates``. None in recordings made before it existed.
    chosen_prob: float | None = None
    chosen_rank: int | None = None
    # What the stage cut and why, in its method's words (None where it does not apply, and in recordings made
    # before they existed): ``possible``, how many tokens keep a non-zero probability after it; ``removed``, how
    # many it took away; ``removed_candidates``, the most likely of those, with their probability before it;
    # ``threshold``, the probability below which it cut (min-p: min_p × p_max; epsilon; eta: min(η, √η·e^-H)),
    # or typical sampling's band |-log p - H| and top-h's entropy budget; ``entropy``, the entropy H (nats)
    # of the distribution it was given, where its rule reads it; ``detail``, a stage's own words on where it
    # stands (a grammar: what it expects next).
    possible: int | None = _optional()
    removed: int | None = _optional()
    removed_candidates: tuple[Candidate, ...] | None = _optional()
    threshold: float | None = _optional()
    entropy: float | None = _optional()
    detail: str | None = _optional()

    @property
    def kept(self) -> tuple[Candidate, ...]:
        """The candidates the stage kept. A stage that removes tokens (top-k, top-p) leaves them out of
        ``candidates``; recordings made before it did list them at probability 0, and this drops them too."""
        return tuple(c for c in self.candidates if c.prob > 0)


@dataclass(frozen=True)
class TokenSampled(Event):
    """Greedy and sample modes: the distribution at one step and the token picked from it.

    ``stages`` lists ``raw`` and then each stage that was active, in
    transformers' order; ``prob`` is the chosen token's probability after the
    last stage. In greedy mode only ``raw`` is present and the token is its
    argmax.
    """

    name: ClassVar[str] = "token_sampled"
    step: int
    token_id: int
    text: str
    prob: float
    greedy: bool
    stages: tuple[StageCandidates, ...]
    target_forwards: int | None = _optional()  # forward passes so far, this step's included


# ----------------------------------------------------------------------- beam


@dataclass(frozen=True)
class Beam:
    """A live hypothesis after a beam step."""

    beam: int  # its slot this step
    parent: int  # the slot it grew from in the previous step (the ancestry tree's edge)
    token_ids: tuple[int, ...]  # generated tokens only
    text_tail: str
    sum_logprobs: float
    score: float  # sum_logprobs / len ** length_penalty


@dataclass(frozen=True)
class BeamCandidate:
    """One (parent beam, next token) pair considered at a beam step."""

    parent: int
    token_id: int
    text: str
    sum_logprobs: float
    verdict: Literal["kept", "pruned", "finished"]


@dataclass(frozen=True)
class Hypothesis:
    """A finished beam hypothesis."""

    token_ids: tuple[int, ...]
    text: str
    sum_logprobs: float
    score: float


def rerank(hypotheses: Sequence[Hypothesis], length_penalty: float) -> tuple[Hypothesis, ...]:
    """Re-score finished beam hypotheses for another length penalty, best first, without any forward pass.

    The score is ``sum_logprobs / len ** length_penalty``, as in beam search; it lives here, beside the
    record it rescores, so a viewer can re-rank without importing torch.
    """
    rescored = [
        Hypothesis(h.token_ids, h.text, h.sum_logprobs, h.sum_logprobs / (len(h.token_ids) ** length_penalty))
        for h in hypotheses
    ]
    return tuple(sorted(rescored, key=lambda h: h.score, reverse=True))


@dataclass(frozen=True)
class EarlyStopCheck:
    """The early-stopping test at one beam step."""

    early_stopping: bool | Literal["never"]
    best_attainable_score: float | None  # highest score an open beam could still reach
    worst_finished_score: float | None
    done: bool


def rescored_check(step: BeamStepped, length_penalty: float, max_new_tokens: int | None) -> EarlyStopCheck:
    """The step's early-stopping test with its figures for another length penalty, as beam search computes
    them: the best score an open beam could still reach (its sum of log-probs over the length it is judged at:
    the current length, or ``max_new_tokens`` under ``never`` with a positive penalty) against the worst
    finished score. ``done`` says whether that test would stop the search; with ``early_stopping=True`` it does
    not depend on scores, and stays the run's."""
    check = step.early_stop
    finished = rerank(step.finished, length_penalty)
    worst = min((h.score for h in finished), default=None)
    best = None
    if step.beams:
        length = len(step.beams[0].token_ids)
        if check.early_stopping == "never" and length_penalty > 0 and max_new_tokens:
            length = max_new_tokens
        best = max(b.sum_logprobs for b in step.beams) / (length**length_penalty)
    # Scores decide only once every one of the num_beams finished slots is filled, as in beam search.
    full = len(finished) >= len(step.beams)
    done = check.done if check.early_stopping is True else (best is None or (full and worst is not None
                                                                               and best <= worst))
    return EarlyStopCheck(check.early_stopping, best, worst, done)


@dataclass(frozen=True)
class BeamStepped(Event):
    """Beam mode: one batched step over all beams."""

    name: ClassVar[str] = "beam_stepped"
    step: int
    beams: tuple[Beam, ...]
    candidates: tuple[BeamCandidate, ...]
    finished: tuple[Hypothesis, ...]
    early_stop: EarlyStopCheck
    target_forwards: int | None = _optional()  # forward passes so far (the batched prefill is one)
    elapsed_s: float | None = _optional()  # decoding seconds so far, as in TokenEmitted


# ------------------------------------------------------ speculative and PLD


@dataclass(frozen=True)
class DraftProposed(Event):
    """Speculative and pld modes: a drafter proposed tokens for the target to verify.

    For a draft model ``q_probs`` holds q(x_i) of each drafted token; for
    prompt lookup the draft is a copy (q is one-hot), ``match_start/end`` is
    the matched n-gram's span in the context token ids and ``copy_start/end``
    the span the draft was copied from. ``max_tokens`` is the most the round
    could draft (the draft length in force), and ``stopped`` says why it
    drafted fewer, when it did (a draft model's confidence cut-off, the end of
    what could be copied, an EOS in the copy).

    A tree of drafts (several continuations verified in one forward) has
    ``parents``: node i is ``token_ids[i]`` and follows node ``parents[i]``
    (-1: the last emitted token), parents before children. ``sources`` says
    where each token was copied from, where the drafter says (suffix
    drafting, for chains too).
    """

    name: ClassVar[str] = "draft_proposed"
    round: int
    drafter: str  # who drafted: the mode's DrafterSpec.kind (``model``, ``lookup``, ...)
    token_ids: tuple[int, ...]
    texts: tuple[str, ...]
    q_probs: tuple[float, ...] | None = _optional()
    match_start: int | None = _optional()
    match_end: int | None = _optional()
    copy_start: int | None = _optional()
    copy_end: int | None = _optional()
    max_tokens: int | None = _optional()
    stopped: str | None = _optional()
    parents: tuple[int, ...] | None = _optional()
    sources: tuple[str, ...] | None = _optional()
    # What the drafter drafted from, row by row, where its view shows it (lookahead: the window's levels and the
    # n-grams the last forward harvested; recycle: the matrix rows read, and those written back with what they held).
    rows: tuple[DraftRow, ...] | None = _optional()
    # The drafter's own state after drafting, in words (recycle: its matrix's fill), shown beside the run's figures.
    state: str | None = _optional()

    def __post_init__(self) -> None:
        # A recording read back is checked here too: a malformed tree is refused before it is drawn.
        if self.parents is not None:
            if len(self.parents) != len(self.token_ids):
                raise ValueError(f"draft_proposed.parents has {len(self.parents)} entries for "
                                 f"{len(self.token_ids)} tokens")
            for i, parent in enumerate(self.parents):
                if not -1 <= parent < i:
                    raise ValueError(f"draft_proposed.parents[{i}] is {parent}: a node follows -1 (the last "
                                     "emitted token) or an earlier node")
        if self.sources is not None and len(self.sources) != len(self.token_ids):
            raise ValueError(f"draft_proposed.sources has {len(self.sources)} entries for {len(self.token_ids)} "
                             "tokens")

    @property
    def tree(self) -> TokenTree | None:
        """The draft as a token tree; None for a chain."""
        return TokenTree(self.token_ids, self.parents) if self.parents is not None else None


@dataclass(frozen=True)
class DraftRow:
    """One labelled row of tokens a drafter drafted from, as its view draws it: a level of lookahead's Jacobi
    window, an n-gram it harvested, a row of token recycling's matrix."""

    label: str
    token_ids: tuple[int, ...]
    texts: tuple[str, ...]


@dataclass(frozen=True)
class PositionVerdict:
    """The target's verdict on one drafted position."""

    position: int
    token_id: int
    p: float  # target probability of the drafted token
    q: float  # draft probability of the drafted token (1.0 for a lookup copy)
    u: float | None  # the uniform draw (None under greedy verification, and for an untested position)
    # "untested": after the first rejection; discarded with it, never tested (p and q are still shown).
    # "cut": the grammar refused it before verification (its p under the grammar is 0); the tokens drafted
    # after it are "untested".
    verdict: Literal["accepted", "rejected", "untested", "cut"]

    @property
    def threshold(self) -> float:
        """min(1, p/q): under sampling the draft is accepted where u falls below it (0 where q is 0)."""
        return min(1.0, self.p / self.q) if self.q > 0 else 0.0


@dataclass(frozen=True)
class DraftVerified(Event):
    """Speculative and pld modes: the target verified a draft in one forward pass.

    ``extra_token_id`` is the token the target added after the accepted
    prefix: under greedy verification its own argmax where it disagreed
    (``target``); under sampling one resampled from max(0, p - q) after a
    rejection (``resampled``); or the bonus token after a fully accepted
    draft (``bonus``).

    For a tree, ``verdicts`` has one per node (its ``position`` the node's
    index), ``path`` the accepted nodes from the root down (``accepted`` is
    its length); for a chain the accepted ones are the first ``accepted``.
    """

    name: ClassVar[str] = "draft_verified"
    round: int
    verdicts: tuple[PositionVerdict, ...]
    accepted: int
    extra_token_id: int | None
    extra_kind: Literal["target", "resampled", "bonus"] | None
    target_forwards: int | None = _optional()  # target forward passes so far, this verification's included
    # Seconds the drafter took to propose this round's draft, and the verification took (the target's forward
    # and the acceptance test). None in recordings made before they existed.
    draft_s: float | None = _optional()
    verify_s: float | None = _optional()
    # A plain target step's seconds, timed once at the run's start (one forward of one token, then rolled back):
    # what c and a verification's cost in steps divide by. None where it was not timed (the compiled path).
    step_s: float | None = _optional()
    path: tuple[int, ...] | None = _optional()
    # A draft model's: the context tokens it was fed before drafting this round; more than two is a catch-up on
    # tokens it skipped (after plain steps), which its cost per draft step (c) leaves out. None for a lookup.
    draft_fed: int | None = _optional()

    def __post_init__(self) -> None:
        if self.path is not None and (len(self.path) != self.accepted or list(self.path) != sorted(set(self.path))
                                      or any(not 0 <= i < len(self.verdicts) for i in self.path)):
            raise ValueError(f"draft_verified.path {list(self.path)} is not {self.accepted} nodes, root first, "
                             f"among its {len(self.verdicts)} verdicts")

    @property
    def accepted_verdicts(self) -> tuple[PositionVerdict, ...]:
        """The verdicts of the drafted tokens the round kept, in the order they were emitted."""
        if self.path is not None:
            return tuple(self.verdicts[i] for i in self.path)
        return self.verdicts[: self.accepted]


# ------------------------------------------------------------------ the end


@dataclass(frozen=True)
class Finished(Event):
    """The run ended; always the last event.

    ``token_ids`` are the new tokens only (an EOS that ended the run
    included); ``text`` is their detokenised text, equal to the concatenated
    ``TokenEmitted.text``. Beam mode adds ``hypotheses`` (best first);
    speculative and pld add the draft counters.
    """

    name: ClassVar[str] = "finished"
    mode: Mode
    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    text: str
    finish_reason: FinishReason
    new_tokens: int
    target_forwards: int
    elapsed_s: float
    tokens_per_s: float
    hypotheses: tuple[Hypothesis, ...] | None = _optional()
    # drafted: the nodes drafted (a chain's tokens, a tree's nodes); accepted: the draft tokens kept (each round's
    # kept path); draft_rounds: the rounds that drafted; draft_depth: their longest paths, summed (equal to drafted
    # where every round was a chain). acceptance_rate is accepted / drafted; acceptance_by_position is by depth.
    drafted: int | None = _optional()
    accepted: int | None = _optional()
    draft_rounds: int | None = _optional()
    draft_depth: int | None = _optional()
    draft_forwards: int | None = _optional()
    acceptance_rate: float | None = _optional()
    acceptance_by_position: tuple[float, ...] | None = _optional()
    draft_time_s: float | None = _optional()
    verify_time_s: float | None = _optional()
    # c, a draft forward's time over a plain target step's (medians over the run); what a verification cost, in
    # steps; and the speed-up Leviathan et al.'s formula predicts from c, the per-position acceptance and the
    # mean draft length (core/record/draft_stats.py). None where the run had no timed draft round.
    draft_cost_ratio: float | None = _optional()
    verify_cost_steps: float | None = _optional()
    predicted_speedup: float | None = _optional()
    comparison: Mapping[str, Any] | None = _optional()
    # How likely the whole reply was under the model's raw distributions: the sum and the mean of the emitted
    # tokens' log-probabilities, and the perplexity exp(-mean). None where a token lacks its log-probability.
    sum_logprob: float | None = _optional()
    mean_logprob: float | None = _optional()
    perplexity: float | None = _optional()
    # Under a constraint (a JSON schema, regex or grammar): whether the output satisfies it in full. False where
    # the run stopped first (max_new_tokens, a cancel): the output is then a valid start, incomplete. None
    # without a constraint.
    constraint_complete: bool | None = _optional()
    # Of new_tokens, those this run did not decode: kept from the branch it forks from, and forced by the user
    # (omitted where none). tokens_per_s and tokens per forward count only the tokens it decoded.
    kept_tokens: int | None = _optional()
    forced_tokens: int | None = _optional()
    # finish_reason "error": what ended the run. The core never ends a run so; a recording whose run (or app) failed
    # is closed with it, so a replay says how it ended (tui/sources.py).
    error: str | None = _optional()

    @property
    def decoded_tokens(self) -> int:
        """The tokens this run decoded: ``new_tokens`` less the kept and forced ones."""
        return self.new_tokens - (self.kept_tokens or 0) - (self.forced_tokens or 0)

    @property
    def token_counts(self) -> tuple[int, int, int]:
        """(decoded, kept, forced)."""
        return self.decoded_tokens, self.kept_tokens or 0, self.forced_tokens or 0

    @property
    def tokens_per_forward(self) -> float:
        """Decoded tokens per target forward (the figure drafting raises above 1)."""
        return self.decoded_tokens / self.target_forwards if self.target_forwards else 0.0


@dataclass(frozen=True)
class Branched(Event):
    """This run continues a path it did not choose itself: a branch.

    It keeps the first ``position`` tokens of its parent (emitted again, with their sources, before anything
    else), then emits ``forced_token_ids`` with source ``forced``, then decodes on in its own mode. Comes right
    after ``Started``.
    """

    name: ClassVar[str] = "branched"
    branch: int  # this branch's number in its run's tree (the first run is 0)
    parent: int | None  # the branch it forks from; None for a path read from a file (generate --resume)
    position: int  # how many of the parent's emitted tokens it keeps
    forced_token_ids: tuple[int, ...]
    forced_text: str


@dataclass(frozen=True)
class DraftLengthDecided(Event):
    """Speculative and pld modes with ``--adaptive``: the policy changed what it drafts, and why, in words.

    ``k``: the tokens it now asks the drafter for (0: plain steps, no draft). Emitted before the round it applies
    to, each time its decision or its reason changes (a few times a run), not every round.
    """

    name: ClassVar[str] = "draft_length_decided"
    round: int
    k: int
    reason: str


EVENT_TYPES: tuple[type[Event], ...] = (
    Started,
    TokenEmitted,
    TokenSampled,
    BeamStepped,
    DraftProposed,
    DraftVerified,
    DraftLengthDecided,
    Finished,
    Branched,
)


_BY_NAME: dict[str, type[Event]] = {cls.name: cls for cls in EVENT_TYPES}


def from_dict(data: Mapping[str, Any]) -> Event:
    """The event a :meth:`Event.to_dict` object describes (for replaying a recorded run).

    Raises ``ValueError`` for an unknown ``event`` name, a missing field, or a field of the wrong type or out of
    its range (naming the field), so a damaged recording is reported before it plays, not half-played.
    """
    name = data.get("event")
    cls = _BY_NAME.get(name) if isinstance(name, str) else None
    if cls is None or not isinstance(name, str):
        raise ValueError(f"unknown event {name!r}")
    try:
        return _build(cls, data, name)  # type: ignore[no-any-return]
    except (TypeError, KeyError) as exc:
        raise ValueError(f"a {name!r} event that does not fit its fields: {exc}") from None


# Fields that hold a probability (checked to lie in [0, 1]); every other number a viewer uses is a count, an index
# or a time (never negative), or a log-probability or score (any finite value).
_PROBABILITIES = frozenset({"prob", "p", "q", "u", "chosen_prob", "q_probs", "acceptance_rate",
                            "acceptance_by_position"})
_SIGNED = frozenset({"parents", "sum_logprobs", "score", "best_attainable_score", "worst_finished_score", "logprob",
                     "sum_logprob", "mean_logprob"})


def _build(tp: Any, value: Any, where: str) -> Any:
    """Rebuild a value of type ``tp`` from its JSON form (dataclasses, tuples, optionals, literals), checking
    each value's type and range; ``where`` names it in the error (``token_emitted.index``)."""
    if value is None:
        if tp is Any or type(None) in typing.get_args(tp):
            return None
        raise ValueError(f"{where} is null")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            raise ValueError(f"{where} should be an object, not {_json_type(value)}")
        hints = typing.get_type_hints(tp)
        missing = [f.name for f in dataclasses.fields(tp)
                   if f.name not in value and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ValueError(f"{where} lacks {', '.join(missing)}")
        kwargs = {f.name: _build(hints[f.name], value[f.name], f"{where}.{f.name}")
                  for f in dataclasses.fields(tp) if f.name in value}
        return tp(**kwargs)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _build(inner[0], value, where)
        for option in inner:  # e.g. bool | "never": the first that fits
            try:
                return _build(option, value, where)
            except ValueError:
                continue
        raise ValueError(f"{where} cannot be {value!r}")
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ValueError(f"{where} should be a list, not {_json_type(value)}")
        item = args[0] if args else Any
        return tuple(_build(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is Literal:
        if value not in args or type(value) not in {type(a) for a in args}:
            raise ValueError(f"{where} is {value!r}, not one of {', '.join(map(repr, args))}")
        return value
    if origin is not None and issubclass(origin, Mapping):
        if not isinstance(value, Mapping):
            raise ValueError(f"{where} should be an object, not {_json_type(value)}")
        return value
    return _scalar(tp, value, where)


def _scalar(tp: Any, value: Any, where: str) -> Any:
    field_name = where.rsplit(".", 1)[-1].split("[", 1)[0]
    if tp is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{where} should be true or false, not {value!r}")
    elif tp is str:
        if not isinstance(value, str):
            raise ValueError(f"{where} should be a string, not {_json_type(value)}")
    elif tp in (int, float):
        if isinstance(value, bool) or not isinstance(value, int | float) or (tp is int and not isinstance(value, int)):
            raise ValueError(f"{where} should be {'an integer' if tp is int else 'a number'}, not {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{where} is {value!r}, not a finite number")
        if field_name in _PROBABILITIES and not 0.0 <= value <= 1.0:
            raise ValueError(f"{where} is {value!r}, not a probability in [0, 1]")
        if field_name not in _SIGNED and field_name not in _PROBABILITIES and value < 0:
            raise ValueError(f"{where} is {value!r}, which cannot be negative")
    return value


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)
