"""Warm-up after loading, and a fair speed comparison between two ways of decoding one prompt.

A process's first decode is slower than its later ones wherever the device
does work once: on CUDA, the cuBLAS handles, the kernels loaded on first use
and the CUDA graphs captured for the static cache's size (an H100 measured
13-16 tok/s for a first run against 33-46 for a later one). So a front end
warms up right after loading, while its progress display says so: it runs
the decode it is about to run, on the same prompt and settings (so the
cache size, and the graphs captured for it, are the same), for a few steps,
and stops. The warm-up's events are thrown away.

A speed-up printed by this tool is teaching material, so :func:`compare`
times warm runs only, alternates the two sides (ABBA, so a drift in the
machine's speed falls on both), and reports the median ratio with its range.

It knows runs and their results; nothing about how they are shown.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .events import BeamStepped, DraftVerified, Finished, TokenEmitted
from .forward import graphs_available

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from .loading import LoadedModel
    from .params import DecodeConfig

WARM_TOKENS = 8  # tokens (or beam steps) a warm-up decodes before it stops
WARM_ROUNDS = 2  # draft rounds a speculative or PLD warm-up verifies, if the prompt gives any


def warm_up(lm: LoadedModel, prompt: str, config: DecodeConfig,
            draft: tuple[PreTrainedModel, int] | None = None) -> float:
    """Decode the first few steps of ``prompt`` under ``config`` and stop; the seconds it took.

    Prefill, steps, and (speculative, PLD) the verification of the configured draft length, whose
    CUDA graph is captured right after the prefill. The generator is closed early, as any consumer
    may: the strategy's ``finally`` hands the cache and its graphs back for the real run.
    """
    from .run import Run

    started = time.perf_counter()
    seeded = dataclasses.replace(config, seed=0 if config.seed is None else config.seed)
    run = Run(lm, prompt, seeded, draft)
    # On CUDA the plain path (beam search, --no-cuda-graphs) grows its cache a step at a time, and each new
    # size is a new block for CUDA's caching allocator to get from the driver: an H100 measured such first
    # runs at 0.29-0.44x of the third after an 8-token warm-up, and the second run already at full speed.
    # So there the warm-up decodes the whole length once. The graph path's cache is static, and on the
    # CPU a first run measured as fast as a third (BENCHMARKS.md): a few steps do.
    whole = lm.device.type == "cuda" and run.path == "plain"
    events = run.events()
    tokens = rounds = 0
    try:
        for event in events:
            tokens += isinstance(event, TokenEmitted | BeamStepped)
            rounds += isinstance(event, DraftVerified)
            if whole or tokens < WARM_TOKENS:
                continue
            if config.mode not in ("speculative", "pld") or rounds >= WARM_ROUNDS or tokens >= 4 * WARM_TOKENS:
                break
    finally:
        events.close()
    _synchronize(lm)
    return time.perf_counter() - started


def describe(lm: LoadedModel, config: DecodeConfig) -> str:
    """What the warm-up of ``config`` does besides decoding a few steps, for a progress line ("" if nothing)."""
    if config.compiles:
        return ("compiling the steps with torch.compile: tens of seconds on a GPU, a minute or more on a CPU, less "
                "once Inductor's cache in decode-tui's cache folder has them")
    if config.cuda_graphs and graphs_available(lm.model):
        return "capturing CUDA graphs"
    return ""


def _synchronize(lm: LoadedModel) -> None:
    if lm.device.type == "cuda":
        import torch

        torch.cuda.synchronize(lm.device)


def compare(lm: LoadedModel, prompt: str, config: DecodeConfig, baseline: DecodeConfig, *, runs: int = 3,
            draft: tuple[PreTrainedModel, int] | None = None,
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
