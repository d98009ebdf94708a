"""Greedy decoding and sampling: one token per forward pass.

The loop is the plain autoregressive one: prefill the prompt once into a KV
cache, then feed each new token alone. At every step the next-token logits go
through transformers' own processors (see :mod:`decode_tui.core.choosing.sampling`),
the token is the argmax (greedy) or a draw from the final distribution
(sample), and the step is reported with the top candidates after each stage.
Its output equals ``model.generate(do_sample=False)`` token for token, and
``generate(do_sample=True)`` under the same seed.

It knows the model call and the sampling stages; the transcript decides what
the tokens' text is and when the run is over.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

import torch

from ..choosing.grammar import GrammarMask
from ..choosing.sampling import Draw, StageContext, draw_later, stage_processors, staged_scores
from ..execution.forward import forward
from ..execution.prefill import prefill
from ..execution.prefix_cache import keep, take
from ..execution.transfers import on_device
from ..live import LiveParams
from ..params import SamplingParams
from ..record.events import Candidate, Event, StageCandidates, TokenSampled
from ..record.path import Path
from ..record.transcript import Transcript

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@torch.inference_mode()
def autoregressive(
    model: PreTrainedModel,
    transcript: Transcript,
    params: SamplingParams,
    *,
    greedy: bool,
    generator: torch.Generator | None = None,
    label: Callable[[int], str] = str,
    top_n: int = 10,
    live: LiveParams | None = None,
    fast: bool = False,
    graphs: bool = False,
    run_ahead: bool | None = None,
    path: Path | None = None,
    stages: StageContext | None = None,
) -> Generator[Event, None, None]:
    """Yield ``TokenSampled`` and ``TokenEmitted`` per step, then ``Finished``.

    ``path``: tokens already decided (a branch): emitted first, then decoding goes on after them, as if
    prompt + path were the prompt.
    With ``live``, the sampling parameters are re-read at every step (a front end changed them mid-run).
    ``fast``: a static cache and a compiled step (see :mod:`decode_tui.core.execution.forward`); the same tokens.
    ``graphs``: a static cache and the step replayed as a captured CUDA graph; the same tokens.
    ``run_ahead``: queue each step's forward pass before the last step is read back (default: on CUDA).
    ``stages``: what the stages need besides their values (the prompt length, the EOS ids, a grammar).
    """
    greedy_mode = greedy
    greedy = greedy_mode or params.greedy
    processors = stage_processors(params, greedy, context=stages)
    grammar = stages.grammar if stages is not None and isinstance(stages.grammar, GrammarMask) else None
    version = live.version if live else 0
    device = model.device
    start = [*transcript.prompt_ids, *(path.ids if path else ())]
    # Prompt, path and generated ids in one buffer: the repetition penalty looks at all of them.
    ids = torch.empty((1, len(transcript.prompt_ids) + transcript.max_new_tokens), dtype=torch.long,
                      device=device)  # [1, T+N]
    ids[0, : len(start)] = on_device(start, device)

    # A branch starts from its parent's cache, cropped where they part (core/execution/prefix_cache.py).
    cache, held = take(model, start, reuse=path is not None, fast=fast, graphs=graphs, max_len=ids.shape[1])
    try:
        logits, emitted = prefill(model, transcript, ids[:, : len(start)], cache, path, held)  # [1, V]
        yield from emitted
        if transcript.done:  # the path itself ended the run
            yield transcript.finished()
            return
        # On a GPU, run one forward pass ahead: the next step's pass is queued before this step is read
        # back, so the device computes it while the host waits for the copy and turns the step into
        # events. Otherwise the device idles through every copy and every event (BENCHMARKS.md, "Each mode on
        # a GPU"). The price: at an EOS or a cancel one queued pass is wasted,
        # and not counted. On a CPU nothing would overlap, so the loop stays in order there.
        if run_ahead is None:
            run_ahead = device.type == "cuda"
        length, first, steps = len(start), len(transcript.token_ids), transcript.remaining
        for step in range(first, first + steps):
            if live is not None and (snapshot := live.changed_since(version)) is not None:
                version, params = snapshot.version, snapshot.sampling
                greedy = greedy_mode or params.greedy
                processors = stage_processors(params, greedy, context=stages)
            staged = staged_scores(processors, ids[:, :length], logits)
            pending = draw_later(staged, greedy, generator, top_n, processors)
            # From the device copy: a Python int written into a CUDA tensor is a host-to-device copy, which
            # waits for the device like the step's one read back (CUDA's sync debug mode counts both).
            ids[:, length] = pending.token
            more = step + 1 < first + steps
            if run_ahead and more:
                logits = forward(model, ids[:, length : length + 1], cache)[:, -1]  # [1, V] queued behind the copy
            picked = pending.wait()
            if grammar is not None and more:
                # The next step's mask, computed on the host while the device runs the queued pass (on a CPU,
                # where nothing runs meanwhile, it is the same work the mask's call would do).
                grammar.prepare([*transcript.token_ids, picked.token_id], device)
            yield TokenSampled(
                step=step,
                token_id=picked.token_id,
                text=label(picked.token_id),
                prob=picked.prob,
                greedy=greedy,
                stages=_stage_candidates(picked, label),
                target_forwards=transcript.target_forwards,
            )
            yield transcript.emit(picked.token_id, stats=picked.stats)
            if transcript.done:
                break
            if transcript.cancel_requested:
                yield transcript.finished("cancelled")
                return
            if not run_ahead:
                logits = forward(model, ids[:, length : length + 1], cache)[:, -1]  # [1, V]
            transcript.target_forwards += 1
            length += 1
        yield transcript.finished()
    finally:
        # Kept for a branch of this run (a pooled static cache goes back to its pool when none comes).
        keep(model, cache, [*start, *transcript.token_ids[len(path.ids) if path else 0 :]], fast=fast,
             graphs=graphs)


def _stage_candidates(picked: Draw, label: Callable[[int], str]) -> tuple[StageCandidates, ...]:
    """The step's stages as events: each one's top candidates, where the drawn token stood, and what it cut."""
    return tuple(
        StageCandidates(stage, tuple(Candidate(t, label(t), p) for t, p in zip(ids, probs, strict=True)),
                        chosen_prob=cp, chosen_rank=rank,
                        possible=cut.possible if i else None, removed=cut.removed if i else None,
                        removed_candidates=tuple(Candidate(t, label(t), p) for t, p in
                                                 zip(cut.removed_ids, cut.removed_probs, strict=True)) or None,
                        threshold=cut.threshold, entropy=cut.entropy, detail=cut.detail)
        for i, (stage, ids, probs, cp, rank, cut) in enumerate(zip(
            picked.stages, picked.top_ids, picked.top_probs, picked.chosen_probs, picked.chosen_ranks, picked.cuts,
            strict=True)))
