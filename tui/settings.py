"""What the app is set to run, and how each key changes it.

:class:`Settings` is everything a run needs except the loaded model: the model
spec, the prompt, the :class:`~decode_tui.core.params.DecodeConfig`, and the
slow-motion delay (a display setting). The knobs are the parameters the
keyboard raises and lowers; :func:`adjust` returns the new settings and *how*
the change lands:

- ``live``: the running strategy picks it up at its next step
  (:class:`~decode_tui.core.live.LiveParams`): temperature, top-k, top-p,
  repetition penalty, draft length, n-gram size;
- ``restart``: it changes the search itself (beams), so the run restarts;
- ``rerank``: the length penalty re-ranks the finished beam hypotheses at once
  (a pure function of their scores); the search uses it from the next run;
- ``view``: display only (slow motion).

It also says, in words, when a knob does nothing in the current mode, so the
app can tell the user instead of silently ignoring the key. Pure logic: no
widgets, no threads, no torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.errors import UsageError
from ..core.model.registry import DEFAULT_ALIAS
from ..core.modes import COPYING_MODES, DEMO_PROMPT, DRAFTING_MODES, MODES, SAMPLING_MODES, drafter_of, modes_taking
from ..core.params import DEMO_PROMPTS, WARPERS, DecodeConfig, demo_prompt, words_of
from ..core.record.events import STAGES, Mode
from .branches import BranchRequest

Applies = Literal["live", "restart", "rerank", "view"]

SLOW_MOTION_S: tuple[float, ...] = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
# The draft lengths d and D step through: one at a time where each token shows, then by the few that still differ.
DRAFT_LENGTH_LADDER: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24, 32)
TOP_K_LADDER: tuple[int, ...] = (0, 1, 2, 3, 5, 10, 20, 50, 100, 200)


@dataclass(frozen=True)
class Settings:
    model: str = DEFAULT_ALIAS
    device: str = "auto"
    dtype: str = "auto"
    trust_remote_code: bool = False
    prompt: str = DEMO_PROMPT
    device_map: str | None = None  # auto|balanced|sequential: the model spread over devices (replaces device)
    config: DecodeConfig = field(default_factory=DecodeConfig)
    slow_motion_s: float = 0.0  # pause after every step, so a class can follow
    for_timing: bool = False  # a timed run (a race): it waits until the kernels it runs on will not change
    branch: BranchRequest | None = None  # a run that starts from a path the user forked (tui/branches.py)

    @property
    def mode(self) -> Mode:
        return self.config.mode

    def replace_config(self, **changes: object) -> Settings:
        return dataclasses.replace(self, config=dataclasses.replace(self.config, **changes))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Knob:
    id: str
    label: str
    keys: tuple[str, str]  # (lower, raise)
    applies: Applies
    modes: tuple[Mode, ...]  # where it changes anything
    get: Callable[[Settings], float]
    step: Callable[[float, int], float]  # (value, +1/-1) -> new value
    put: Callable[[Settings, float], Settings]
    fmt: Callable[[float], str] = field(default=lambda v: f"{v:g}")
    says: tuple[str, str] | None = None  # what its two keys do, where "Lower/Raise <label>" would mislead

    def describe(self, direction: int) -> str:
        if self.says is not None:
            return self.says[direction > 0]
        return f"{'Raise' if direction > 0 else 'Lower'} {self.label}"


def _ladder(values: Sequence[float]) -> Callable[[float, int], float]:
    def step(value: float, direction: int) -> float:
        if direction > 0:
            return next((v for v in values if v > value), values[-1])
        return next((v for v in reversed(values) if v < value), values[0])

    return step


def _linear(delta: float, low: float, high: float) -> Callable[[float, int], float]:
    def step(value: float, direction: int) -> float:
        return round(min(high, max(low, value + direction * delta)), 4)

    return step


def _put(part: Literal["sampling", "beam", "draft"], name: str, cast: type = float,
         ) -> Callable[[Settings, float], Settings]:
    """A setter for one field of the config's ``sampling``, ``beam`` or ``draft`` parameters."""

    def put(s: Settings, v: float) -> Settings:
        changes: dict[str, Any] = {name: cast(v)}
        return s.replace_config(**{part: dataclasses.replace(getattr(s.config, part), **changes)})

    return put


def _length_option(settings: Settings) -> Literal["num_draft_tokens", "num_pred_tokens"]:
    """The option that sets the draft length in the settings' (drafting) mode."""
    drafter = drafter_of(settings.mode)
    return drafter.length if drafter is not None else "num_draft_tokens"


KNOBS: tuple[Knob, ...] = (
    Knob("temperature", "temperature", ("t", "T"), "live", SAMPLING_MODES,
         lambda s: s.config.sampling.temperature, _linear(0.1, 0.0, 5.0), _put("sampling", "temperature")),
    Knob("top_k", "top-k", ("k", "K"), "live", SAMPLING_MODES,
         lambda s: s.config.sampling.top_k, _ladder(TOP_K_LADDER), _put("sampling", "top_k", int),
         fmt=lambda v: "off" if v == 0 else f"{int(v)}"),
    Knob("top_p", "top-p", ("p", "P"), "live", SAMPLING_MODES,
         lambda s: s.config.sampling.top_p, _linear(0.05, 0.05, 1.0), _put("sampling", "top_p")),
    Knob("repetition_penalty", "repetition penalty", ("u", "U"), "live", MODES,
         lambda s: s.config.sampling.repetition_penalty, _linear(0.05, 0.5, 3.0),
         _put("sampling", "repetition_penalty")),
    Knob("num_beams", "beams", ("w", "W"), "restart", ("beam",),
         lambda s: s.config.beam.num_beams, _linear(1, 1, 16), _put("beam", "num_beams", int),
         fmt=lambda v: f"{int(v)}"),
    Knob("length_penalty", "length penalty", ("l", "L"), "rerank", ("beam",),
         lambda s: s.config.beam.length_penalty, _linear(0.25, -3.0, 3.0), _put("beam", "length_penalty")),
    # One key for the draft length in both modes; prompt lookup's is its copy length (DraftParams.length).
    Knob("num_draft_tokens", "draft length", ("d", "D"), "live", DRAFTING_MODES,
         lambda s: s.config.draft.length(_length_option(s)), _ladder(DRAFT_LENGTH_LADDER),
         lambda s, v: _put("draft", _length_option(s), int)(s, v),
         fmt=lambda v: f"{int(v)}"),
    Knob("confidence_threshold", "draft confidence cut-off", ("o", "O"), "live", modes_taking("draft_confidence"),
         lambda s: s.config.draft.confidence_threshold, _linear(0.05, 0.0, 1.0), _put("draft", "confidence_threshold"),
         fmt=lambda v: f"{v:.2f}"),
    Knob("max_ngram_size", "n-gram size", ("g", "G"), "live", modes_taking("max_ngram_size"),
         lambda s: s.config.draft.max_ngram_size, _linear(1, 1, 8), _put("draft", "max_ngram_size", int),
         fmt=lambda v: f"{int(v)}"),
    # s slows the run down (more slow motion), S speeds it up: the README's order, and what "s" suggests.
    Knob("slow_motion", "slow motion", ("S", "s"), "view", MODES,
         lambda s: s.slow_motion_s, _ladder(SLOW_MOTION_S), lambda s, v: dataclasses.replace(s, slow_motion_s=v),
         fmt=lambda v: "off" if v == 0 else f"{v:g} s/step",
         says=("Faster: less slow motion", "Slower: more slow motion")),
)

def _off(value: float | None) -> float:
    return 0.0 if value is None else value


def _put_or_off(name: str) -> Callable[[Settings, float], Settings]:
    """A setter for a stage whose "off" is None in GenerationConfig (min-p, top-h): 0 turns it off."""
    def put(s: Settings, v: float) -> Settings:
        changes: dict[str, Any] = {name: v or None}
        return s.replace_config(sampling=dataclasses.replace(s.config.sampling, **changes))

    return put


def _cut(v: float) -> str:
    return "off" if v == 0 else f"{v:g}"


# The other stages transformers applies, changed in the stage editor (z): no keys of their own.
STAGE_KNOBS: tuple[Knob, ...] = (
    Knob("min_p", "min-p", ("", ""), "live", SAMPLING_MODES, lambda s: _off(s.config.sampling.min_p),
         _ladder((0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)), _put_or_off("min_p"), fmt=_cut),
    Knob("typical_p", "typical-p", ("", ""), "live", SAMPLING_MODES, lambda s: s.config.sampling.typical_p,
         _linear(0.05, 0.05, 1.0), _put("sampling", "typical_p"), fmt=lambda v: "off" if v >= 1 else f"{v:g}"),
    Knob("epsilon_cutoff", "epsilon cutoff", ("", ""), "live", SAMPLING_MODES,
         lambda s: s.config.sampling.epsilon_cutoff, _ladder((0.0, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)),
         _put("sampling", "epsilon_cutoff"), fmt=_cut),
    Knob("eta_cutoff", "eta cutoff", ("", ""), "live", SAMPLING_MODES, lambda s: s.config.sampling.eta_cutoff,
         _ladder((0.0, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)), _put("sampling", "eta_cutoff"), fmt=_cut),
    Knob("top_h", "top-h", ("", ""), "live", SAMPLING_MODES, lambda s: _off(s.config.sampling.top_h),
         _ladder((0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)), _put_or_off("top_h"), fmt=_cut),
    Knob("no_repeat_ngram_size", "no-repeat n-gram size", ("", ""), "live", MODES,
         lambda s: s.config.sampling.no_repeat_ngram_size, _linear(1, 0, 8), _put("sampling", "no_repeat_ngram_size",
                                                                                  int),
         fmt=lambda v: "off" if v == 0 else f"{int(v)}"),
    Knob("min_new_tokens", "min new tokens", ("", ""), "live", MODES, lambda s: s.config.sampling.min_new_tokens,
         _ladder((0, 1, 2, 4, 8, 16, 32, 64, 128)), _put("sampling", "min_new_tokens", int),
         fmt=lambda v: "off" if v == 0 else f"{int(v)}"),
)
KNOBS_BY_ID = {knob.id: knob for knob in (*KNOBS, *STAGE_KNOBS)}
# The editor's rows: every stage with a knob, in the order generate applies the stages.
EDITOR_ORDER: tuple[str, ...] = tuple(stage for stage in STAGES if stage in KNOBS_BY_ID)


@dataclass(frozen=True)
class Change:
    settings: Settings
    applies: Applies | None  # None: nothing changed (already at the limit)
    message: str


def _effective(settings: Settings, knob: Knob) -> str | None:
    """Why a knob changes nothing right now, or None when it does."""
    mode = settings.mode
    if mode not in knob.modes:
        where = ", ".join(knob.modes)
        return f"no effect in {mode} mode (it applies to {where}; m cycles the mode)"
    if knob.id in WARPERS:
        c = settings.config
        if mode == "beam" and not c.beam_sample:
            return "no effect: this beam search is not sampling (start it with --temperature to sample beams)"
        if mode in DRAFTING_MODES and not c.draft_sample:
            return "no effect: this run verifies greedily (start it with --temperature to verify by sampling)"
    return None


def _from_when(running: bool) -> str:
    """When a live change takes effect: at the running strategy's next step, or, once the run has ended, in the
    next run (saying "from the next step" after the last step told the user something would still happen)."""
    return ", from the next step" if running else ", for the next run (this one has ended; r restarts)"


def adjust(settings: Settings, knob_id: str, direction: int, *, running: bool = True) -> Change:
    """Raise (``direction=+1``) or lower (-1) one knob. Out-of-range values stop at the limit. ``running``: a run
    is under way (or paused) that a live change reaches at its next step."""
    knob = KNOBS_BY_ID[knob_id]
    old = knob.get(settings)
    new = knob.step(old, direction)
    if new == old:
        limit = "upper" if direction > 0 else "lower"
        return Change(settings, None, f"{knob.label} stays at {knob.fmt(old)} (its {limit} limit)")
    try:
        changed = knob.put(settings, new)
    except UsageError as err:
        return Change(settings, None, err.message)
    message = f"{knob.label} {knob.fmt(old)} → {knob.fmt(new)}"
    why_not = _effective(changed, knob)
    if why_not:
        return Change(changed, "view", f"{message}: {why_not}")
    if knob.applies == "live":
        message += _from_when(running)
    elif knob.applies == "restart":
        message += ": the number of beams shapes the search, so the run restarts"
    elif knob.applies == "rerank":
        message += ": finished hypotheses re-ranked now; the search uses it from the next restart (r)"
    return Change(changed, knob.applies, message)


def said_words(words: tuple[str, ...]) -> str:
    """Bad words as the editor and its messages show them: ``'sorry', 'apologize'``, or ``none``."""
    return ", ".join(repr(word) for word in words) if words else "none"


def with_bad_words(settings: Settings, text: str, *, running: bool = True) -> Change:
    """The bad words set to the comma-separated ``text`` (blank: none); they apply in every mode, from the
    next step (of the next run, where ``running`` is false)."""
    try:
        words = words_of(text)
    except UsageError as err:
        return Change(settings, None, err.message)
    old = settings.config.sampling.bad_words
    if words == old:
        return Change(settings, None, f"bad words stay {said_words(old)}")
    changed = settings.replace_config(sampling=dataclasses.replace(settings.config.sampling, bad_words=words))
    return Change(changed, "live", f"bad words {said_words(old)} → {said_words(words)}{_from_when(running)}")


def next_mode(settings: Settings) -> Settings:
    """The same settings in the next mode (greedy → sample → beam → speculative → pld → greedy)."""
    mode = MODES[(MODES.index(settings.mode) + 1) % len(MODES)]
    return with_mode(settings, mode)


def with_mode(settings: Settings, mode: Mode) -> Settings:
    """``settings`` in ``mode``; a demo prompt (none was given) becomes the new mode's own demo prompt."""
    changed = settings.replace_config(mode=mode)
    if settings.prompt in DEMO_PROMPTS.values():
        changed = dataclasses.replace(changed, prompt=demo_prompt(mode))
    return changed


def params_line(settings: Settings, seed: object = None, width: int | None = None) -> str:
    """The live parameters that matter in the current mode, for the header; ``seed``: the one the run drew with
    (a run given none picks one, and it is what makes the draws repeatable). Within ``width`` cells: the spaces
    narrow, then the least telling parts go from the end (a wrapped line pushed the prompt out of the header)."""
    c = settings.config
    s = c.sampling
    parts: list[str] = []
    if settings.mode != "greedy" and (settings.mode == "sample" or c.beam_sample or c.draft_sample):
        parts += [f"T={s.temperature:g}", f"top-k={'off' if s.top_k == 0 else s.top_k}", f"top-p={s.top_p:g}"]
        if isinstance(seed, int):
            parts.append(f"seed={seed}")
    if s.repetition_penalty != 1.0 or settings.mode in ("greedy", "sample"):
        parts.append(f"rep={s.repetition_penalty:g}")
    parts += [f"{knob.label.split()[0]}={knob.fmt(knob.get(settings))}" for knob in STAGE_KNOBS
              if knob.get(settings) != knob.get(Settings()) and _effective(settings, knob) is None]
    if s.bad_words:
        parts.append(f"bad words={','.join(s.bad_words)}")
    if c.constraint is not None:
        parts.append(c.constraint.describe())
    if settings.mode == "beam":
        parts += [f"beams={c.beam.num_beams}", f"lp={c.beam.length_penalty:g}",
                  f"early-stop={str(c.beam.early_stopping).lower()}"]
    if settings.mode == "speculative":
        parts += [f"draft={c.draft.draft}", f"k≤{c.draft.num_draft_tokens}",
                  f"stop at q<{c.draft.confidence_threshold:g}"]
    if settings.mode == "pld":
        parts += [f"k≤{c.draft.num_pred_tokens}", f"ngram≤{c.draft.max_ngram_size}"]
    if settings.mode == "suffix":
        parts += [f"depth≤{c.draft.num_pred_tokens}"]
    if settings.mode in COPYING_MODES and c.draft.tree_budget is not None:
        parts += [f"tree≤{c.draft.tree_budget}"]
    if settings.mode in DRAFTING_MODES:
        parts.append("adaptive" if c.draft.adaptive else "fixed k")
        parts.append("sampling verify" if c.draft_sample else "greedy verify")
    parts.append(f"max={c.max_new_tokens}")
    if settings.slow_motion_s:
        parts.append(f"slow={settings.slow_motion_s:g}s")
    line = "  ".join(parts)
    if width is None or len(line) <= width:
        return line
    while len(parts) > 1 and len(" ".join(parts)) > width:
        parts.pop()
    return " ".join(parts)



def settings_from_dict(data: dict[str, object]) -> Settings:
    """Settings from their ``dataclasses.asdict`` form (a recording's header); unknown keys are ignored."""
    from ..core.params import BeamParams, Constraint, DraftParams, SamplingParams

    def pick(cls: type, values: object) -> dict[str, object]:
        names = {f.name for f in dataclasses.fields(cls)}
        return {k: v for k, v in (values if isinstance(values, dict) else {}).items() if k in names}

    try:
        raw = data.get("config", {})
        config_values = pick(DecodeConfig, raw)
        nested = raw if isinstance(raw, dict) else {}
        config_values["sampling"] = SamplingParams(**pick(SamplingParams, nested.get("sampling")))  # type: ignore[arg-type]
        config_values["beam"] = BeamParams(**pick(BeamParams, nested.get("beam")))  # type: ignore[arg-type]
        config_values["draft"] = DraftParams(**pick(DraftParams, nested.get("draft")))  # type: ignore[arg-type]
        constraint = nested.get("constraint")
        config_values["constraint"] = Constraint(**pick(Constraint, constraint)) if constraint else None  # type: ignore[arg-type]
        config = DecodeConfig(**config_values)  # type: ignore[arg-type]
        top = {k: v for k, v in pick(Settings, data).items() if k not in ("config", "branch")}
        return Settings(**top, config=config)  # type: ignore[arg-type]
    except TypeError as exc:
        raise UsageError(f"The recording's settings do not fit this decode-tui ({exc}).") from None
