"""Warm-up after loading: the first decode of a process runs at the speed of the later ones.

A process's first decode is slower than its later ones wherever the device
does work once: on CUDA, the cuBLAS handles, the kernels loaded on first use
and the CUDA graphs captured for the static cache's size (BENCHMARKS.md,
"Time to first token"). So a front end
warms up right after loading, while its progress display says so: it runs
the decode it is about to run, on the same prompt and settings (so the
cache size, and the graphs captured for it, are the same), for a few steps,
and stops. The warm-up's events are thrown away.

The fair comparison that builds on it is :mod:`~decode_tui.core.analysis.compare`.

It knows runs and their results; nothing about how they are shown.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

from .model.acquire import drive
from .modes import DRAFTING_MODES, drafter_of
from .record.events import BeamStepped, DraftVerified, TokenEmitted

if TYPE_CHECKING:
    from .drafting.draft_models import DraftModel
    from .model.loading import LoadedModel
    from .params import DecodeConfig

WARM_TOKENS = 8  # tokens (or beam steps) a warm-up decodes before it stops
WARM_ROUNDS = 2  # draft rounds a speculative or PLD warm-up verifies, if the prompt gives any
WARM_PROMPT_CHARS = 2000  # off CUDA, a longer prompt warms up on its start alone (see warming)


def warm_up(lm: LoadedModel, prompt: str, config: DecodeConfig, draft: DraftModel | None = None,
            progress: Callable[[str], None] | None = None) -> float:
    """Decode the first few steps of ``prompt`` under ``config`` and stop; the seconds it took. ``progress`` hears
    how far along it is (:func:`warming`'s lines)."""
    return drive(warming(lm, prompt, config, draft), progress)


def warming(lm: LoadedModel, prompt: str, config: DecodeConfig,
            draft: DraftModel | None = None) -> Generator[str, None, float]:
    """:func:`warm_up`, yielding a line on how far along it is at each token or draft round (a front end shows
    them: a speculative warm-up on a busy machine takes tens of seconds, and a wait must not be silent); returns
    the seconds it took.

    Prefill, steps, and (speculative, PLD) the verification of the configured draft length, whose
    CUDA graph is captured right after the prefill. Off CUDA a long prompt warms up on its first
    WARM_PROMPT_CHARS characters: nothing there depends on its size, and its prefill is then paid once.
    The generator is closed early, as any consumer may: the strategy's ``finally`` hands the cache and
    its graphs back for the real run.
    """
    from .execution.model_state import state_of
    from .execution.threads import choose_threads, offered_now, use_threads
    from .run import Run

    started = time.perf_counter()
    if config.draft.history:  # (only suffix takes it) read and indexed here, saying how far along; once
        from .drafting.suffix_drafting import history_files_for

        yield from history_files_for(lm, config)
    if lm.device.type == "cpu" and state_of(lm.model).threads is None:
        # First: every width timed after it is priced at the count it chooses.
        counts = offered_now()
        if len(counts) > 1:
            yield (f"warming up {config.mode}: timing forwards on {' and '.join(map(str, counts))} threads, for "
                   "the count to decode on")
        choose_threads(lm.model)
    use_threads(lm.model)
    drafter = drafter_of(config.mode)
    if drafter is not None and drafter.trees == "measured" and config.draft.tree_budget is None \
            and lm.device.type == "cpu":
        from .execution.tree_budget import tree_budget

        yield f"warming up {config.mode}: timing forwards of a few widths, for the draft trees' size"
        tree_budget(lm.model)  # measured once a process: the run reads it
    # A warm-up leaves no state behind: token recycling's matrix is read as the run will read it, but not written
    # back, or the run would say it starts from an earlier run's rows where the user named a new file.
    seeded = dataclasses.replace(config, seed=0 if config.seed is None else config.seed,
                                 draft=dataclasses.replace(config.draft, recycle_keep=False))
    if lm.device.type != "cuda" and len(prompt) > WARM_PROMPT_CHARS:
        # Off CUDA nothing is captured for the prompt's size, so its start warms up as well as all of it, and a
        # long prompt's prefill is paid once, by the run, not twice.
        prompt = prompt[:WARM_PROMPT_CHARS]
    run = Run(lm, prompt, seeded, draft)
    drafting = config.mode in DRAFTING_MODES
    from .execution.tree_budget import time_widths, widths_to_time
    from .execution.widths import MAX_WIDTH

    # The widths a CPU's verifications may pad to are timed here, not by the run's own verifications.
    if drafting and lm.device.type == "cpu" and run.path == "plain" and widths_to_time(lm.model):
        yield f"warming up {config.mode}: timing verifications of 2 to {MAX_WIDTH} positions"
        time_widths(lm.model)
    # On CUDA the plain path (beam search, --no-cuda-graphs) grows its cache a step at a time, and each new
    # size is a new block for CUDA's caching allocator to get from the driver, so a short warm-up leaves the
    # first run slow: there the warm-up decodes the whole length once. The graph path's cache is static, and on
    # the CPU a first run is as fast as a third: a few steps do.
    whole = lm.device.type == "cuda" and run.path == "plain"
    events = run.events()
    tokens = rounds = 0
    yield f"warming up {config.mode}: the prompt's prefill"
    try:
        for event in events:
            tokens += isinstance(event, TokenEmitted | BeamStepped)
            rounds += isinstance(event, DraftVerified)
            if isinstance(event, TokenEmitted | BeamStepped | DraftVerified):
                yield _how_far(config.mode, tokens, rounds, whole, config.max_new_tokens, drafting)
            if whole or tokens < WARM_TOKENS:
                continue
            if not drafting or rounds >= WARM_ROUNDS or tokens >= 4 * WARM_TOKENS:
                break
    finally:
        events.close()
    _synchronize(lm)
    return time.perf_counter() - started


def _how_far(mode: str, tokens: int, rounds: int, whole: bool, max_new: int, drafting: bool) -> str:
    """``warming up speculative: 12 tokens, draft round 1 of 2 verified``."""
    goal = max_new if whole else WARM_TOKENS
    # A drafting warm-up goes on past its tokens until its rounds are verified: then the count alone.
    said = f"warming up {mode}: {tokens} of {goal} tokens" if tokens <= goal else f"warming up {mode}: {tokens} tokens"
    if drafting:
        said += f", draft round {min(rounds, WARM_ROUNDS)} of {WARM_ROUNDS} verified"
    return said


def describe(lm: LoadedModel, config: DecodeConfig) -> str:
    """What the warm-up of ``config`` does besides decoding a few steps, for a progress line ("" if nothing)."""
    if config.compiles:
        return ("compiling the steps with torch.compile: tens of seconds on a GPU, a minute or more on a CPU, less "
                "once Inductor's cache in decode-tui's cache folder has them")
    from .execution.forward import graphs_available  # here, not at the top: the app imports this module before torch

    if config.cuda_graphs and graphs_available(lm.model):
        return "capturing CUDA graphs"
    return ""


def reads_history(config: DecodeConfig) -> str:
    """What the warm-up reads first, for a front end's opening line: a suffix run's ``--history`` ("" if none)."""
    if not config.draft.history:
        return ""
    from pathlib import Path

    size = sum(Path(p).stat().st_size for p in config.draft.history if Path(p).is_file())
    amount = f"{size / 2**20:.1f} MB" if size >= 2**20 else f"{max(1, round(size / 1024))} KB"
    return f"reading and indexing {amount} of --history first"


def _synchronize(lm: LoadedModel) -> None:
    if lm.device.type == "cuda":
        import torch

        torch.cuda.synchronize(lm.device)
