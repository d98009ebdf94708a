"""Beam search (and beam sampling) that reports every step, deciding exactly as ``generate`` does.

The algorithm is transformers' vectorised ``_beam_search`` (5.x), written for
one prompt with the same names and the same arithmetic, so the returned
sequences and their scores match ``generate(num_beams=N, ...)``:

- every step runs one batched forward over the N running beams (the KV cache
  is reordered with the surviving beams' parents, never recomputed);
- scores are accumulated log-probabilities: ``log_softmax`` first, then the
  logits processors (so temperature and top-k/top-p act on log-probs);
- ``K = max(2, 1 + #eos) * N`` candidates are kept from all beams' N x V
  continuations (top-K, or K drawn without replacement when sampling), so at
  least N stay open even if the best ones end;
- a candidate "hits" when it ends in EOS or reaches ``max_new_tokens``; hits
  among the top N may enter the N finished slots with the score
  ``sum_logprobs / generated_len ** length_penalty`` (EOS counted in the
  length), merged with earlier ones by score. At the length limit every
  candidate hits, which is how the open beams are finalised;
- the early-stopping test: ``True`` stops once N hypotheses are finished;
  ``False`` stops when the best running beam, scored at its current length,
  cannot beat the worst finished one; ``"never"`` does the same but, with a
  positive length penalty, scores the running beam at the maximum length.

As in ``generate``, one beam is greedy decoding, not a one-beam search.
It knows the model call and the scores; the transcript knows the text.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

import torch

from ..choosing.grammar import GrammarMask
from ..choosing.sampling import StageContext, processed, stage_processors
from ..execution.figures import token_stats
from ..execution.forward import forward, new_cache, release
from ..execution.prefill import prefill
from ..execution.transfers import on_device
from ..live import LiveParams
from ..params import BeamParams, SamplingParams
from ..record.events import Event, Finished, FinishReason, Hypothesis, Stage, TokenSampled
from ..record.path import Path
from ..record.transcript import TokenStats, Transcript
from .autoregressive import autoregressive
from .beam_state import NEG, BeamState, hypotheses_of, queue_step, step_event

if TYPE_CHECKING:
    from transformers import LogitsProcessor, PreTrainedModel
    from transformers.cache_utils import Cache

@torch.inference_mode()
def beam_search(
    model: PreTrainedModel,
    transcript: Transcript,
    beam: BeamParams,
    sampling: SamplingParams,
    *,
    do_sample: bool = False,
    generator: torch.Generator | None = None,
    label: Callable[[int], str] = str,
    decode: Callable[[list[int]], str] = str,
    live: LiveParams | None = None,
    graphs: bool = False,
    run_ahead: bool = False,
    path: Path | None = None,
    stages: StageContext | None = None,
) -> Generator[Event, None, None]:
    """Yield one ``BeamStepped`` per step, then the best hypothesis as ``TokenEmitted`` and ``Finished``.

    ``path``: tokens already decided (a branch), emitted first; the search starts from prompt + path as its
    prompt, as ``generate`` would on that prompt, so hypotheses hold the tokens after the path.
    With ``live``, the sampling stages are re-read at every step; the beam settings never change mid-run.
    ``graphs``: the batched step of the N beams replayed as a captured CUDA graph on a static cache
    (reordered in place); the same scores and sequences. ``run_ahead``: queue each step's pass before the last
    step is read back; the same events. Off on every device until a GPU has timed it against the steps in order
    (``benchmarks/gpu.py --only beamahead``): a draft model's steps, timed so, were faster in order.
    ``stages``: what the stages need besides their values (with a grammar, each beam keeps its own grammar state,
    copied when the beams are reordered).
    """
    if beam.num_beams == 1:
        yield from _one_beam(model, transcript, beam, sampling, do_sample, generator, label, decode, live, graphs,
                             path, stages)
        return

    # Beam sampling keeps one token more than there are EOS ids, as generate does.
    processors = stage_processors(sampling, greedy=not do_sample, min_tokens_to_keep=len(transcript.eos_token_ids) + 1,
                                  context=stages)
    max_length = len(transcript.prompt_ids) + transcript.max_new_tokens
    cache = new_cache(model, graphs=graphs, max_len=max_length, batch=beam.num_beams)
    try:
        yield from _search(model, transcript, beam, cache, processors, do_sample, generator, label, decode, live, path,
                           stages, run_ahead)
    finally:
        release(cache)  # a pooled static cache (and its graph) goes back for the next run


def _search(model: PreTrainedModel, transcript: Transcript, beam: BeamParams, cache: Cache,
            processors: list[tuple[Stage, LogitsProcessor]], do_sample: bool, generator: torch.Generator | None,
            label: Callable[[int], str], decode: Callable[[list[int]], str], live: LiveParams | None,
            path: Path | None, stages: StageContext | None, run_ahead: bool) -> Generator[Event, None, None]:
    """The search itself, on a cache of N rows; :func:`beam_search` owns the cache."""
    N = beam.num_beams
    eos = on_device(sorted(transcript.eos_token_ids), model.device)
    K = max(2, 1 + len(eos)) * N  # beams_to_keep
    lp, early_stopping = beam.length_penalty, beam.early_stopping
    start = [*transcript.prompt_ids, *(path.ids if path else ())]
    T0 = len(start)  # the search's prompt: the prompt and the path
    max_length = len(transcript.prompt_ids) + transcript.max_new_tokens
    version = live.version if live else 0
    device = model.device

    s = _start_state(N, max_length, on_device(start, device))
    s.running_scores[0] = 0.0  # only the first beam is live at first, so the beams do not repeat each other
    # The stopping flags stay on the device, so a step's only host transfer is the one that builds its event.
    heuristic_unsatisfied = torch.ones((), dtype=torch.bool, device=device)  # [] is_early_stop_heuristic_unsatisfied
    top_num_beam_mask = torch.arange(K, device=device) < N  # [K]

    # Prefill the N copies of the prompt (and the path) in one batch, exactly as generate does.
    logits, emitted = prefill(model, transcript, s.running[:, :T0], cache, path)  # [N, V]
    yield from emitted
    if transcript.done:  # the path itself ended the run
        yield transcript.finished()
        return
    for step in range(max_length - T0):
        if live is not None and (snapshot := live.changed_since(version)) is not None:
            version = snapshot.version
            processors = stage_processors(snapshot.sampling, greedy=not do_sample, min_tokens_to_keep=len(eos) + 1,
                                          context=stages)
        cur_len = T0 + step
        # generate applies the processors to log-probs, not logits
        log_probs = processed(processors, s.running[:, :cur_len], torch.log_softmax(logits, dim=-1))  # [N, V]
        s, hits = _select(s, log_probs, logits, cur_len, T0, max_length, beam, eos, heuristic_unsatisfied,
                          top_num_beam_mask, do_sample, generator)
        gen_len = cur_len + 1 - T0
        cache.reorder_cache(s.running_parents)  # type: ignore[arg-type]  # the KV rows follow their beams

        # The early-stopping heuristic, evaluated at the new length.
        best_len = max_length - T0 if early_stopping == "never" and lp > 0.0 else cur_len + 1 - T0
        best_possible = s.running_scores[0] / (best_len**lp)
        worst_finished = torch.where(s.is_sent_finished, s.finished_scores.min(), NEG)  # [N]
        heuristic_unsatisfied = heuristic_unsatisfied & (best_possible > worst_finished).any()
        exists_open_beam = ~(s.is_sent_finished.all() & (early_stopping is True))
        valid_continuations = ~hits.all()
        done = ~(heuristic_unsatisfied & exists_open_beam & valid_continuations)  # []

        copy = queue_step(T0, gen_len, s, best_possible, done)
        # With run_ahead the search runs one pass ahead, as greedy does on a GPU: the next step's inputs (the
        # running beams' last tokens, the cache reordered to them) are on the device already, so its pass is
        # queued behind the step's copy and runs while the host waits for that copy and turns the step into its
        # event. In order, the device idles through all of that, and a beam step's host work is about as long as
        # its pass on a GPU. When the early-stopping test or a cancel stops the search here, the pass queued ahead is
        # wasted, and not counted; at the length limit the search always stops, so none is queued.
        ahead = run_ahead and cur_len + 1 < max_length
        if ahead:
            logits = forward(model, s.running[:, cur_len : cur_len + 1], cache)[:, -1]  # [N, V]
        event, rows = step_event(copy, step, gen_len, lp, s, early_stopping, label, decode,
                                 transcript.target_forwards, transcript.elapsed_s)
        yield event
        if event.early_stop.done:
            break
        if transcript.cancel_requested:
            yield transcript.finished("cancelled")
            return
        if not ahead:
            logits = forward(model, s.running[:, cur_len : cur_len + 1], cache)[:, -1]  # [N, V]
        transcript.target_forwards += 1
        _prepare_grammar(stages, start, rows, device)  # on a GPU, while the pass queued runs

    hypotheses, best_stats = hypotheses_of(s, T0, decode)
    yield from _finish(transcript, hypotheses[: beam.num_return_sequences], best_stats)


def _start_state(N: int, max_length: int, start: torch.Tensor) -> BeamState:
    """N rows holding the search's prompt ``start`` [T0], every score and flag empty."""
    device = start.device
    running = torch.zeros((N, max_length), dtype=torch.long, device=device)  # [N, L]
    running[:, : start.shape[0]] = start
    s = BeamState(
        running=running,
        running_scores=torch.full((N,), NEG, device=device),
        running_parents=torch.zeros((N,), dtype=torch.long, device=device),
        finished=running.clone(),
        finished_scores=torch.full((N,), NEG, device=device),
        finished_sums=torch.full((N,), NEG, device=device),
        finished_lens=torch.zeros((N,), dtype=torch.long, device=device),
        is_sent_finished=torch.zeros((N,), dtype=torch.bool, device=device),
        running_stats=torch.zeros((N, max_length, 3), device=device),
        finished_stats=torch.zeros((N, max_length, 3), device=device),
    )
    return s


def _select(s: BeamState, log_probs: torch.Tensor, logits: torch.Tensor, cur_len: int, T0: int, max_length: int,
            beam: BeamParams, eos: torch.Tensor, heuristic_unsatisfied: torch.Tensor, top_num_beam_mask: torch.Tensor,
            do_sample: bool, generator: torch.Generator | None) -> tuple[BeamState, torch.Tensor]:
    """One step's choice, as generate makes it: the K best continuations of the N beams (drawn, when sampling), the
    N best that did not hit a stop as the next running beams, and the hits among the top N merged into the finished
    slots by their length-penalised score. Returns the new state and which candidates hit a stop [K]."""
    N, K = beam.num_beams, top_num_beam_mask.shape[0]
    lp, early_stopping, device = beam.length_penalty, beam.early_stopping, log_probs.device
    V = log_probs.shape[-1]
    accumulated = (log_probs + s.running_scores[:, None]).view(-1)  # [N*V]
    if do_sample:
        topk_indices = torch.multinomial(torch.softmax(accumulated, -1), K, generator=generator)  # [K]
        # Sorted by score, as generate does since transformers 5.24: the finished slots below take the
        # top N candidates by position, which must be the N best, drawn or not.
        topk_log_probs, order = accumulated[topk_indices].sort(descending=True)
        topk_indices = topk_indices[order]
    else:
        topk_log_probs, topk_indices = torch.topk(accumulated, K)  # [K], sorted
    parents = topk_indices // V  # [K] the beam each candidate extends
    tokens = topk_indices % V  # [K]
    candidates = s.running[parents].clone()  # [K, L]
    candidates[:, cur_len] = tokens
    assert s.running_stats is not None and s.finished_stats is not None
    candidate_stats = s.running_stats[parents].clone()  # [K, L, 3]
    candidate_stats[:, cur_len] = token_stats(logits[parents], tokens).T  # under the raw distribution
    hits = torch.isin(tokens, eos) | (cur_len + 1 >= max_length)  # [K] next_token_hits_stopping_criteria

    # Running beams for the next step: the best N candidates that did not hit.
    running_log_probs = topk_log_probs + hits.to(torch.float32) * NEG
    next_indices = torch.topk(running_log_probs, N).indices  # [N]

    # Finished slots: hits among the top N, length-penalised, merged with the earlier ones by score.
    gen_len = cur_len + 1 - T0
    just_finished = hits & top_num_beam_mask
    scores = topk_log_probs / (gen_len**lp)
    full = s.is_sent_finished.all() & (early_stopping is True)  # []
    scores = scores + full.to(torch.float32) * NEG
    scores = scores + (~heuristic_unsatisfied).to(torch.float32) * NEG
    scores = scores + (~just_finished).to(torch.float32) * NEG
    merged_scores = torch.cat((s.finished_scores, scores))
    keep = torch.topk(merged_scores, N).indices  # [N]
    s = BeamState(
        running=candidates[next_indices],
        running_scores=running_log_probs[next_indices],
        running_parents=parents[next_indices],
        finished=torch.cat((s.finished, candidates))[keep],
        finished_scores=merged_scores[keep],
        finished_sums=torch.cat((s.finished_sums, topk_log_probs))[keep],
        finished_lens=torch.cat((s.finished_lens, torch.full((K,), gen_len, device=device)))[keep],
        is_sent_finished=torch.cat((s.is_sent_finished, just_finished))[keep],
        parents=parents, tokens=tokens, topk_log_probs=topk_log_probs, hits=hits, just_finished=just_finished,
        next_indices=next_indices,
        running_stats=candidate_stats[next_indices],
        finished_stats=torch.cat((s.finished_stats, candidate_stats))[keep],
    )
    return s, hits


def _prepare_grammar(stages: StageContext | None, start: list[int], rows: list[list[int]], device: torch.device,
                     ) -> None:
    """Hand the grammar every running row's output, on the host from the step's one transfer, so that the next
    step's masks are computed while its pass runs."""
    grammar = stages.grammar if stages is not None else None
    if isinstance(grammar, GrammarMask):
        head = start[grammar.prompt_length :]  # the path, where the run started from one
        grammar.prepare_rows([[*head, *row] for row in rows], device)


def _finish(transcript: Transcript, hypotheses: list[Hypothesis], stats: list[TokenStats],
            ) -> Generator[Event, None, None]:
    """Emit the best hypothesis as the run's tokens, then ``Finished`` with all returned hypotheses."""
    best = hypotheses[0]
    for token, figures in zip(best.token_ids, stats, strict=True):
        yield transcript.emit(token, stats=figures)
    reason: FinishReason = "eos" if best.token_ids and best.token_ids[-1] in transcript.eos_token_ids else "length"
    yield transcript.finished(reason, hypotheses=tuple(hypotheses))


def _one_beam(model: PreTrainedModel, transcript: Transcript, beam: BeamParams, sampling: SamplingParams,
              do_sample: bool, generator: torch.Generator | None, label: Callable[[int], str],
              decode: Callable[[list[int]], str], live: LiveParams | None, graphs: bool, path: Path | None,
              stages: StageContext | None) -> Generator[Event, None, None]:
    """``num_beams=1`` is plain greedy decoding (or sampling) in generate; its one hypothesis is the output.

    Its sum log-prob adds the log-probability of each token under the distribution it was picked from.
    """
    total = 0.0
    for event in autoregressive(model, transcript, sampling, greedy=not do_sample, generator=generator, label=label,
                                live=live, graphs=graphs, path=path, stages=stages):
        if isinstance(event, TokenSampled):
            total += math.log(event.prob) if event.prob > 0 else NEG
        if isinstance(event, Finished) and event.finish_reason != "cancelled":
            ids = list(event.token_ids[len(path.ids) if path else 0 :])  # the search's part, after the path
            hypothesis = Hypothesis(tuple(ids), decode(ids) if path else event.text, total,
                                    total / (max(len(ids), 1) ** beam.length_penalty))
            event = dataclasses.replace(event, hypotheses=(hypothesis,))
        yield event
