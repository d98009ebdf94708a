"""Comparing two ways of decoding one prompt, fairly: warm runs only, alternated, with the spread.

The protocol every speed-up the project prints follows (``generate --compare``,
``decode-tui bench`` and the benchmarks): both sides are warmed up first, then timed in rounds
AB, BA, AB, ..., and the speed-up is the ratio of the two sides' median speeds (so it agrees with the speeds
printed beside it), with the lowest and highest round's own ratio as its range. A cold run against a
warm one, or all of A before all of B, would let the first-run effect or a drifting machine pass for a
speed-up. It knows runs and their ``Finished`` figures, and greedy's two best candidates at each step, to say
where an output parted from greedy's by rounding; nothing else about output.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..modes import DRAFTING_MODES
from ..params import DecodeConfig
from ..record.events import Candidate, Finished, TokenSampled
from ..record.timeline import ForwardRow, Timeline
from ..warmup import warm_up

if TYPE_CHECKING:
    from ..drafting.draft_models import DraftModel
    from ..model.loading import LoadedModel


def greedy_baseline(config: DecodeConfig) -> DecodeConfig:
    """Plain greedy decoding with ``config``'s length, sampling stages, chat template and decoding path."""
    return DecodeConfig(mode="greedy", max_new_tokens=config.max_new_tokens, sampling=config.sampling,
                        use_chat=config.use_chat, fast=config.fast, cuda_graphs=config.cuda_graphs)


def with_comparison(lm: LoadedModel, prompt: str, config: DecodeConfig, result: Finished, *, runs: int,
                    draft: DraftModel | None = None, progress: Callable[[str], None] | None = None) -> Finished:
    """``result`` with its ``comparison`` against plain greedy on the same prompt (see :func:`compare`)."""
    comparison = compare(lm, prompt, config, greedy_baseline(config), runs=runs, draft=draft, progress=progress)
    return dataclasses.replace(result, comparison=comparison)


def timed_rounds(lm: LoadedModel, prompt: str, configs: Mapping[str, DecodeConfig], *, runs: int,
                 draft: DraftModel | None = None, progress: Callable[[str], None] | None = None,
                 timelines: dict[str, list[ForwardRow]] | None = None,
                 tops: dict[str, list[tuple[Candidate, ...]]] | None = None) -> dict[str, list[Finished]]:
    """The protocol: every config warmed up, then ``runs`` rounds timing one run of each, the order reversed
    from one round to the next (ABC, CBA, ABC, ...), so a drift in the machine's speed falls on all alike.

    Returns each config's results, round by round; ``timelines`` receives each config's last timed run's
    forward-pass timeline (:mod:`~decode_tui.core.record.timeline`), ``tops`` its two most likely raw candidates at
    each step where the mode shows them (greedy and sampling), for :func:`divergence_note`.
    """
    from ..run import Run

    if runs < 1:
        raise ValueError("at least one timed run a side is needed")
    # Each run starts from the same drafting state: a figure never depends on the order of the repeats.
    configs = {name: dataclasses.replace(c, draft=c.draft.repeatable()) for name, c in configs.items()}
    for config in configs.values():
        warm_up(lm, prompt, config, draft)
    names = list(configs)
    results: dict[str, list[Finished]] = {name: [] for name in names}
    for i in range(runs):
        for name in names if i % 2 == 0 else reversed(names):
            if progress is not None:
                progress(f"round {i + 1} of {runs}: {name}")
            result = None
            timeline = Timeline()
            steps: list[tuple[Candidate, ...]] = []
            for event in timeline.watch(Run(lm, prompt, configs[name], draft).events()):
                result = event
                if tops is not None and isinstance(event, TokenSampled) and event.stages:
                    steps.append(event.stages[0].candidates[:2])
            assert isinstance(result, Finished)
            results[name].append(result)
            if timelines is not None:
                timelines[name] = timeline.rows
            if tops is not None:
                tops[name] = steps
    return results


def divergence_note(config: DecodeConfig, at: int | None, ours: Sequence[int],
                    greedy_tops: Sequence[tuple[Candidate, ...]], dtype: torch.dtype) -> str | None:
    """Why a drafting mode's greedy output parted from greedy's at token ``at``, where the numbers say it is
    rounding and not a fault: the model computes in a reduced precision (bf16, fp16), and the drafting output took
    greedy's runner-up there. A verification multiplies several tokens at once, in other shapes than greedy's
    one-token step, so its sums round otherwise, and where greedy's two best tokens are nearly tied that picks the
    other; in float32 the two agree token for token, so a divergence there gets no excuse, nor does one of a mode
    that samples or searches (its output is not meant to be greedy's). None otherwise."""
    greedy = not config.draft_sample or config.sampling.greedy  # as the drafting strategies decide it
    # A drafting mode's greedy form must give greedy's tokens exactly: it only changes how many tokens a forward checks.
    if config.mode not in DRAFTING_MODES or not greedy or at is None or at >= len(ours) or \
            at >= len(greedy_tops) or dtype not in (torch.bfloat16, torch.float16):
        return None
    top = greedy_tops[at]
    if len(top) < 2 or ours[at] != top[1].token_id:
        return None
    precision = str(dtype).removeprefix("torch.")
    return (f"greedy's two most likely tokens there were {top[0].text!r} ({top[0].prob:.3g}) and {top[1].text!r} "
            f"({top[1].prob:.3g}), and this run took the second: in {precision}, a pass over several tokens "
            "rounds otherwise than greedy's one-token step, which tips a near-tie (in float32 they agree)")


def compare(lm: LoadedModel, prompt: str, config: DecodeConfig, baseline: DecodeConfig, *, runs: int = 3,
            draft: DraftModel | None = None,
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``config``'s speed over ``baseline``'s on ``prompt`` by :func:`timed_rounds` (AB, BA, AB, ...).

    The speed-up is the ratio of the two median speeds reported beside it, so the ratio and the speeds agree;
    ``speedup_low``/``speedup_high`` are the lowest and highest round's ratio. ``unreliable`` says why the figure
    cannot be trusted when the rounds disagree too much (None otherwise). ``identical`` compares the last runs' tokens.
    """
    if runs < 1:
        raise ValueError("compare needs at least one run a side")
    # Named by mode, as the progress lines show them ("round 2 of 3: greedy (baseline)").
    base_name, ours_name = f"{baseline.mode} (baseline)", config.mode
    tops: dict[str, list[tuple[Candidate, ...]]] = {}
    results = timed_rounds(lm, prompt, {base_name: baseline, ours_name: config}, runs=runs, draft=draft,
                           progress=progress, tops=tops)
    ours_rates = [r.tokens_per_s for r in results[ours_name]]
    base_rates = [r.tokens_per_s for r in results[base_name]]
    ratios = [a / b if b else 0.0 for a, b in zip(ours_rates, base_rates, strict=True)]
    ours_median, base_median = statistics.median(ours_rates), statistics.median(base_rates)
    ours, theirs = results[ours_name][-1].token_ids, results[base_name][-1].token_ids
    parted = first_divergence(ours, theirs)
    return {
        "baseline": baseline.mode,
        "runs": runs,
        "protocol": "warm runs, alternated (AB, BA, ...): the ratio of the median speeds, the rounds' ratios its range",
        "tokens_per_s": ours_median,
        "greedy_tokens_per_s": base_median,
        "speedup": ours_median / base_median if base_median else 0.0,
        "speedup_low": min(ratios),
        "speedup_high": max(ratios),
        "unreliable": unreliable(ratios),
        "identical": ours == theirs,
        "first_divergence": parted,
        "divergence_note": divergence_note(config, parted, ours, tops[base_name], lm.dtype),
    }


# Rounds whose ratios differ by more than this factor (highest over lowest) did not measure one speed-up: a
# quiet machine keeps them within a few percent of each other.
SPREAD_LIMIT = 1.5


def unreliable(ratios: Sequence[float], unit: str = "x") -> str | None:
    """Why a figure measured in these rounds (speed-ups, or with ``unit`` " tok/s" speeds) is not reliable, in words
    for the user; None when it is."""
    low, high = min(ratios), max(ratios)
    if len(ratios) < 2 or (low > 0 and high / low <= SPREAD_LIMIT):
        return None
    shown = ".2f" if unit == "x" else ".1f"
    return (f"the rounds disagree ({low:{shown}}{unit} to {high:{shown}}{unit}): the machine was busy with something "
            "else, or its speed drifted, while they ran, so no single figure describes them. Run it again on a quiet "
            "machine, or with more rounds")


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two token sequences differ (one ending early counts), or None if they are equal."""
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if at is None and len(a) != len(b):
        at = min(len(a), len(b))
    return at


@dataclasses.dataclass(frozen=True)
class BenchRow:
    """One mode's figures in a benchmark: medians over the timed runs, with their range."""

    mode: str
    runs: int
    tokens_per_s: float
    tokens_per_s_low: float
    tokens_per_s_high: float
    # Over greedy: this mode's median tok/s over greedy's, so that it agrees with the tok/s column (1.0 for greedy);
    # its range is the lowest and highest round's own ratio (a round times every mode back to back).
    speedup: float
    speedup_low: float
    speedup_high: float
    new_tokens: int
    target_forwards: int
    tokens_per_forward: float
    acceptance_rate: float | None  # speculative, pld
    identical: bool  # the same tokens as greedy's
    first_divergence: int | None
    divergence_note: str | None  # where the numbers say the divergence is rounding (:func:`divergence_note`)
    acceptance_by_position: tuple[float, ...] | None = None  # speculative, pld: of the last timed run
    # speculative: the draft's cost ratio c and the speed-up Leviathan et al.'s formula predicts, medians of the
    # timed runs (core/record/draft_stats.py), to set beside the measured speed-up
    draft_cost_ratio: float | None = None
    predicted_speedup: float | None = None
    timeline: tuple[ForwardRow, ...] = ()  # the last timed run's, one row per target forward
    unreliable: str | None = None  # why its figures cannot be trusted: its speeds spread more than SPREAD_LIMIT
    # Round by round, for a reader who wants more than the median and range (a confidence interval, a paired test):
    # each round's ratio over greedy's run of the same round, and each run's target forwards.
    round_speedups: tuple[float, ...] = ()
    round_forwards: tuple[int, ...] = ()

    def to_dict(self, timeline: bool = False) -> dict[str, Any]:
        """The JSON form; the timeline (a row per forward) only when asked for."""
        data = dataclasses.asdict(self)
        if not timeline:
            del data["timeline"]
        return data


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def bench(lm: LoadedModel, prompt: str, configs: Mapping[str, DecodeConfig], *, runs: int,
          draft: DraftModel | None = None, progress: Callable[[str], None] | None = None) -> list[BenchRow]:
    """Every config in ``configs`` (keyed by name; ``greedy`` is the baseline) timed by :func:`timed_rounds`,
    each row with its last timed run's forward-pass timeline."""
    if "greedy" not in configs:
        raise ValueError("a benchmark needs plain greedy as its baseline")
    timelines: dict[str, list[ForwardRow]] = {}
    tops: dict[str, list[tuple[Candidate, ...]]] = {}
    results = timed_rounds(lm, prompt, configs, runs=runs, draft=draft, progress=progress, timelines=timelines,
                           tops=tops)
    base = results["greedy"]
    base_rate = statistics.median(b.tokens_per_s for b in base)
    rows = []
    for name, finished in results.items():
        rates = [r.tokens_per_s for r in finished]
        ratios = [r.tokens_per_s / b.tokens_per_s if b.tokens_per_s else 0.0 for r, b in zip(finished, base,
                                                                                             strict=True)]
        last = finished[-1]
        parted = first_divergence(last.token_ids, base[-1].token_ids)
        rows.append(BenchRow(
            mode=name, runs=runs, tokens_per_s=statistics.median(rates), tokens_per_s_low=min(rates),
            tokens_per_s_high=max(rates), speedup=statistics.median(rates) / base_rate if base_rate else 0.0,
            speedup_low=min(ratios),
            speedup_high=max(ratios), new_tokens=last.new_tokens, target_forwards=last.target_forwards,
            tokens_per_forward=last.new_tokens / last.target_forwards if last.target_forwards else 0.0,
            acceptance_rate=last.acceptance_rate, identical=last.token_ids == base[-1].token_ids,
            first_divergence=parted,
            divergence_note=divergence_note(configs[name], parted, last.token_ids, tops["greedy"], lm.dtype),
            acceptance_by_position=last.acceptance_by_position,
            draft_cost_ratio=_median(r.draft_cost_ratio for r in finished),
            predicted_speedup=_median(r.predicted_speedup for r in finished),
            timeline=tuple(timelines[name]), unreliable=unreliable(rates, " tok/s"), round_speedups=tuple(ratios),
            round_forwards=tuple(r.target_forwards for r in finished)))
    return rows
