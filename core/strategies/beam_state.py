"""Beam search's state, and its step told: one host transfer turns the search's tensors into a ``BeamStepped``.

Split from :mod:`.beam` so the search there reads like transformers' ``_beam_search``. This module holds
the tensors a step leaves behind (:class:`BeamState`) and copies what a viewer needs to the host, named
(beams, candidates with their verdicts, finished hypotheses, the early-stopping test). It decides nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

import torch

from ..execution.figures import host_stats
from ..execution.transfers import HostCopy, to_host
from ..record.events import Beam, BeamCandidate, BeamStepped, EarlyStopCheck, Hypothesis
from ..record.transcript import TokenStats

NEG = -1.0e9  # transformers' "impossible" score


@dataclasses.dataclass
class BeamState:
    """The search's tensors after a step, named as in transformers' ``_beam_search``; all on the device.

    ``running*`` are the N open beams, ``finished*`` the N finished slots (sorted by score, best first),
    and ``candidates``/``parents``/``tokens``/``topk_log_probs``/``hits``/``just_finished`` the K
    candidates this step considered. ``next_indices`` says which candidates became the running beams.
    """

    running: torch.Tensor  # [N, L] running_sequences
    running_scores: torch.Tensor  # [N] running_beam_scores: sum log-probs, NEG for an empty slot
    running_parents: torch.Tensor  # [N] the slot each running beam grew from
    finished: torch.Tensor  # [N, L] sequences
    finished_scores: torch.Tensor  # [N] beam_scores (length-penalised)
    finished_sums: torch.Tensor  # [N] their sum log-probs, for display and re-ranking
    finished_lens: torch.Tensor  # [N] generated lengths
    is_sent_finished: torch.Tensor  # [N]
    parents: torch.Tensor | None = None  # [K] the beam each candidate extends
    tokens: torch.Tensor | None = None  # [K]
    topk_log_probs: torch.Tensor | None = None  # [K]
    hits: torch.Tensor | None = None  # [K] next_token_hits_stopping_criteria
    just_finished: torch.Tensor | None = None  # [K] hits among the top N: they competed for a finished slot
    next_indices: torch.Tensor | None = None  # [N] candidates that became the running beams
    # Each token's raw log-probability, entropy and rank where it stands, following the tokens it describes.
    running_stats: torch.Tensor | None = None  # [N, L, 3]
    finished_stats: torch.Tensor | None = None  # [N, L, 3]


def hypotheses_of(s: BeamState, T0: int, decode: Callable[[list[int]], str],
                  ) -> tuple[list[Hypothesis], list[TokenStats]]:
    """The finished slots, best first (the merge keeps them sorted), as events, and the figures of the best
    one's tokens (their raw log-probabilities, entropies and ranks), in one host copy."""
    assert s.finished_stats is not None
    N, g = s.finished.shape[0], s.finished.shape[1] - T0
    host = to_host([s.finished[:, T0 : T0 + g], s.finished_scores, s.finished_sums, s.finished_lens,
                    s.is_sent_finished, s.finished_stats[:, T0:].transpose(1, 2).flatten()])  # stats [N, 3, g]
    ids = [[int(x) for x in host[i * g : (i + 1) * g]] for i in range(N)]
    scores_h, sums_h, lens_h, done_h = (host[N * g + j * N : N * g + (j + 1) * N] for j in range(4))
    hypotheses = _host_hypotheses(ids, scores_h, sums_h, lens_h, done_h, decode)
    best = next((i for i in range(N) if done_h[i]), 0)  # the first finished slot is the best hypothesis
    stats = host[N * g + 4 * N + best * 3 * g : N * g + 4 * N + (best + 1) * 3 * g]  # [3, g]
    return hypotheses, host_stats(stats, g)[: int(lens_h[best])]


def _host_hypotheses(ids: list[list[int]], scores: list[float], sums: list[float], lens: list[float],
                     done: list[float], decode: Callable[[list[int]], str]) -> list[Hypothesis]:
    out = []
    for seq, score, total, length, is_done in zip(ids, scores, sums, lens, done, strict=True):
        if is_done:
            kept = seq[: int(length)]
            out.append(Hypothesis(tuple(kept), decode(kept), total, score))
    return out


def queue_step(T0: int, gen_len: int, s: BeamState, best_possible: torch.Tensor, done: torch.Tensor) -> HostCopy:
    """Queue the step's one host transfer: everything :func:`step_event` reads. Queued before the next step's pass
    (on a GPU), it does not wait for that pass."""
    assert s.tokens is not None and s.parents is not None and s.topk_log_probs is not None
    assert s.hits is not None and s.just_finished is not None and s.next_indices is not None
    g = gen_len
    return HostCopy([s.running[:, T0 : T0 + g], s.finished[:, T0 : T0 + g], s.running_scores, s.running_parents,
                     s.next_indices, s.finished_scores, s.finished_sums, s.finished_lens, s.is_sent_finished,
                     s.parents, s.tokens, s.topk_log_probs, s.hits, s.just_finished, best_possible.view(1),
                     done.view(1)])


def step_event(copy: HostCopy, step: int, gen_len: int, lp: float, s: BeamState,
               early_stopping: bool | Literal["never"], label: Callable[[int], str],
               decode: Callable[[list[int]], str], target_forwards: int,
               elapsed_s: float | None = None) -> tuple[BeamStepped, list[list[int]]]:
    """Everything a viewer needs about one step, and whether the search is done, from the step's one host
    transfer (:func:`queue_step`); and every running row's generated ids, the dead ones too (the event leaves
    those out), for whoever needs the rows on the host before the next step (a grammar computing their masks
    ahead)."""
    assert s.tokens is not None
    N, K, g = s.running.shape[0], s.tokens.shape[0], gen_len
    host = copy.wait()
    cursor = 0

    def take(count: int) -> list[float]:
        nonlocal cursor
        cursor += count
        return host[cursor - count : cursor]

    beam_ids = [[int(x) for x in take(g)] for _ in range(N)]
    finished_ids = [[int(x) for x in take(g)] for _ in range(N)]
    beam_scores, beam_parents, kept_rows = take(N), take(N), take(N)
    hyp_scores, hyp_sums, hyp_lens, hyp_done = take(N), take(N), take(N), take(N)
    c_parents, c_tokens, c_sums, c_hits, c_finished = take(K), take(K), take(K), take(K), take(K)
    best, is_done = take(2)
    kept = {int(k) for k in kept_rows}
    # A slot whose score is the "impossible" NEG holds no open beam: at the length limit every candidate hit and
    # went to the finished slots (scored there as BeamHypotheses would), and nothing stays open. Such slots are
    # left out, so the placeholder never reaches a viewer, a caption or a recording.
    beams = tuple(
        Beam(beam=i, parent=int(beam_parents[i]), token_ids=tuple(ids), text_tail=decode(ids)[-40:],
             sum_logprobs=beam_scores[i], score=beam_scores[i] / (gen_len**lp))
        for i, ids in enumerate(beam_ids) if beam_scores[i] > NEG / 2
    )
    cand = tuple(
        BeamCandidate(parent=int(p), token_id=int(t), text=label(int(t)), sum_logprobs=sc,
                      verdict="finished" if f else ("kept" if k in kept and not h else "pruned"))
        for k, (p, t, sc, h, f) in enumerate(zip(c_parents, c_tokens, c_sums, c_hits, c_finished, strict=True))
    )
    hyps = _host_hypotheses(finished_ids, hyp_scores, hyp_sums, hyp_lens, hyp_done, decode)
    worst = min((h.score for h in hyps), default=None)
    check = EarlyStopCheck(early_stopping=early_stopping, best_attainable_score=best if beams else None,
                           worst_finished_score=worst, done=bool(is_done))
    event = BeamStepped(step=step, beams=beams, candidates=cand, finished=tuple(hyps), early_stop=check,
                        target_forwards=target_forwards, elapsed_s=elapsed_s)
    return event, beam_ids
