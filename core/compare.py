"""Comparing two ways of decoding one prompt, fairly: warm runs only, alternated, with the spread.

The protocol every speed-up the project prints follows (``generate --compare``
and the benchmarks): both sides are warmed up first, then timed in rounds
AB, BA, AB, ..., and the speed-up is the median of the rounds' ratios with
its lowest and highest. A cold run against a warm one, or all of A before all
of B, would let the first-run effect or a drifting machine pass for a
speed-up. It knows runs and their ``Finished`` figures; nothing about output.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .events import Finished
from .params import DecodeConfig
from .warmup import warm_up

if TYPE_CHECKING:
    from .drafters import DraftModel
    from .loading import LoadedModel


def greedy_baseline(config: DecodeConfig) -> DecodeConfig:
    """Plain greedy decoding with ``config``'s length, sampling stages, chat template and decoding path."""
    return DecodeConfig(mode="greedy", max_new_tokens=config.max_new_tokens, sampling=config.sampling,
                        use_chat=config.use_chat, fast=config.fast, cuda_graphs=config.cuda_graphs)


def with_comparison(lm: LoadedModel, prompt: str, config: DecodeConfig, result: Finished, *, runs: int,
                    draft: DraftModel | None = None, progress: Callable[[str], None] | None = None) -> Finished:
    """``result`` with its ``comparison`` against plain greedy on the same prompt (see :func:`compare`)."""
    comparison = compare(lm, prompt, config, greedy_baseline(config), runs=runs, draft=draft, progress=progress)
    return dataclasses.replace(result, comparison=comparison)


def compare(lm: LoadedModel, prompt: str, config: DecodeConfig, baseline: DecodeConfig, *, runs: int = 3,
            draft: DraftModel | None = None,
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``config``'s speed over ``baseline``'s on ``prompt``: warm runs only, alternated, with the spread.

    Both sides are warmed up first. Then ``runs`` rounds, each timing one run of each side, in the order
    AB, BA, AB, ... The speed-up is the median of the rounds' ratios; ``speedup_low``/``speedup_high``
    are the lowest and highest. ``identical`` compares the last runs' tokens.
    """
    from .run import Run

    if runs < 1:
        raise ValueError("compare needs at least one run a side")
    warm_up(lm, prompt, baseline, draft)
    warm_up(lm, prompt, config, draft)
    rates: dict[str, list[float]] = {"ours": [], "base": []}
    last: dict[str, Finished] = {}
    for i in range(runs):
        order = (("base", baseline), ("ours", config)) if i % 2 == 0 else (("ours", config), ("base", baseline))
        for side, cfg in order:
            if progress is not None:
                progress(f"comparing: round {i + 1} of {runs}, {cfg.mode}")
            result = None
            for event in Run(lm, prompt, cfg, draft).events():
                result = event
            assert isinstance(result, Finished)
            rates[side].append(result.tokens_per_s)
            last[side] = result
    ratios = [a / b if b else 0.0 for a, b in zip(rates["ours"], rates["base"], strict=True)]
    ours, theirs = last["ours"].token_ids, last["base"].token_ids
    divergence = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None)
    if divergence is None and len(ours) != len(theirs):
        divergence = min(len(ours), len(theirs))
    return {
        "baseline": baseline.mode,
        "runs": runs,
        "protocol": "warm runs, alternated (AB, BA, ...), median of the rounds' ratios",
        "tokens_per_s": statistics.median(rates["ours"]),
        "greedy_tokens_per_s": statistics.median(rates["base"]),
        "speedup": statistics.median(ratios),
        "speedup_low": min(ratios),
        "speedup_high": max(ratios),
        "identical": ours == theirs,
        "first_divergence": divergence,
    }
