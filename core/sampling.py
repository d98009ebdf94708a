"""Sampling parameters and the stages that turn raw logits into the distribution a token is drawn from.

The stages and their order are transformers' own: repetition penalty, then
temperature, top-k and top-p, each applied only when it changes something
(penalty != 1, temperature != 1, top_k != 0, top_p < 1), exactly as
``GenerationMixin._get_logits_processor`` builds them. We call HF's own
processors rather than re-deriving them, so what the UI shows is what
``generate`` computes; this module adds only the per-stage snapshots the UI
needs and the draw itself.

Nothing here edits the logits it is given, and randomness comes only from an
explicit ``torch.Generator``. It knows logits and token ids, not models or text.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.generation.logits_process import (
    LogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from .events import Stage
from .forward import HostCopy
from .params import SamplingParams
from .path import host_stats, token_stats
from .transcript import TokenStats


def stage_processors(params: SamplingParams, greedy: bool, min_tokens_to_keep: int = 1,
                     ) -> list[tuple[Stage, LogitsProcessor]]:
    """HF's processors for the active stages, in HF's order.

    Greedy decoding in ``generate`` still applies the repetition penalty
    (it is a processor, not a warper); temperature, top-k and top-p are
    warpers that only sampling applies, and none of them moves the argmax.
    Beam sampling keeps ``#eos + 1`` tokens through top-k and top-p.
    """
    stages: list[tuple[Stage, LogitsProcessor]] = []
    if params.repetition_penalty != 1.0:
        stages.append(("repetition_penalty", RepetitionPenaltyLogitsProcessor(params.repetition_penalty)))
    if greedy:
        return stages
    if params.temperature != 1.0:
        stages.append(("temperature", TemperatureLogitsWarper(params.temperature)))
    if params.top_k != 0:
        stages.append(("top_k", TopKLogitsWarper(top_k=params.top_k, min_tokens_to_keep=min_tokens_to_keep)))
    if params.top_p < 1.0:
        stages.append(("top_p", TopPLogitsWarper(top_p=params.top_p, min_tokens_to_keep=min_tokens_to_keep)))
    return stages


def staged_scores(
    processors: list[tuple[Stage, LogitsProcessor]],
    input_ids: torch.Tensor,  # [B, T] prompt + generated so far (the penalty looks at both)
    logits: torch.Tensor,  # [B, V] next-token logits, float32
) -> list[tuple[Stage, torch.Tensor]]:
    """The scores after each stage, ``raw`` first. HF's processors return new tensors; the input is untouched."""
    out: list[tuple[Stage, torch.Tensor]] = [("raw", logits)]
    scores = logits
    for stage, processor in processors:
        scores = processor(input_ids, scores)
        out.append((stage, scores))
    return out


def processed(
    processors: list[tuple[Stage, LogitsProcessor]],
    input_ids: torch.Tensor,  # [B, T] the context the scores follow
    scores: torch.Tensor,  # [B, V]
) -> torch.Tensor:
    """The scores after every stage, without the intermediates (what beam search and verification need)."""
    for _, processor in processors:
        scores = processor(input_ids, scores)
    return scores


@dataclass(frozen=True)
class Draw:
    """One step's pick, already on the host: the token, its final probability, the top-N per stage."""

    token_id: int
    prob: float
    stages: tuple[Stage, ...]
    top_ids: list[list[int]]  # [S][<=N] the most likely tokens each stage kept (a removed one is no candidate)
    top_probs: list[list[float]]  # [S][<=N]
    chosen_probs: list[float]  # [S] the drawn token's probability after each stage
    chosen_ranks: list[int]  # [S] its rank there, 1 = the most likely (tied candidates share the better rank)
    stats: TokenStats  # its log-probability, entropy and rank under the raw distribution


def draw(
    staged: list[tuple[Stage, torch.Tensor]],
    greedy: bool,
    generator: torch.Generator | None,
    top_n: int,
) -> Draw:
    """Pick the next token from the last stage and gather everything the UI needs in one host transfer.

    Greedy takes the argmax; sampling draws with ``torch.multinomial`` from the
    softmax, as ``generate`` does, so the same seed gives the same tokens.
    """
    return draw_later(staged, greedy, generator, top_n).wait()


class PendingDraw:
    """A pick made on the device whose host copy is under way: ``token`` can be fed to the model now."""

    def __init__(self, token: torch.Tensor, stages: tuple[Stage, ...], n: int, copy: HostCopy) -> None:
        self.token = token  # [1]
        self.stages = stages
        self.n = n
        self.copy = copy

    def wait(self) -> Draw:
        # token, chosen probs [S], chosen ranks [S], top ids [S*N], top probs [S*N], kept by the stage [S*N],
        # raw log-probability, entropy and rank [3]
        packed = self.copy.wait()
        raw = host_stats(packed[-3:], 1)[0]
        packed = packed[:-3]
        s, n = len(self.stages), self.n
        chosen_probs = packed[1 : 1 + s]
        ids_flat = packed[1 + 2 * s : 1 + 2 * s + s * n]
        probs_flat = packed[1 + 2 * s + s * n : 1 + 2 * s + 2 * s * n]
        kept_flat = packed[1 + 2 * s + 2 * s * n :]
        rows = [range(i * n, (i + 1) * n) for i in range(s)]
        return Draw(
            token_id=int(packed[0]),
            prob=float(chosen_probs[-1]),
            stages=self.stages,
            top_ids=[[int(ids_flat[j]) for j in row if kept_flat[j]] for row in rows],
            top_probs=[[probs_flat[j] for j in row if kept_flat[j]] for row in rows],
            chosen_probs=chosen_probs,
            chosen_ranks=[int(x) + 1 for x in packed[1 + s : 1 + 2 * s]],
            stats=raw,
        )


def draw_later(
    staged: list[tuple[Stage, torch.Tensor]],
    greedy: bool,
    generator: torch.Generator | None,
    top_n: int,
) -> PendingDraw:
    """:func:`draw` with the host copy queued but not waited for (see :class:`~decode_tui.core.forward.HostCopy`)."""
    final = staged[-1][1]  # [1, V]
    probs = torch.stack([torch.softmax(s[0], dim=-1) for _, s in staged])  # [S, V]
    if greedy:
        token = torch.argmax(final, dim=-1)  # [1]
    else:
        token = torch.multinomial(probs[-1:], num_samples=1, generator=generator).view(1)  # [1]
    n = min(top_n, probs.shape[-1])
    top_probs, top_ids = torch.topk(probs, n, dim=-1)  # [S, N]
    chosen_probs = probs.gather(1, token.view(1, 1).expand(probs.shape[0], 1))  # [S, 1]
    beaten_by = (probs > chosen_probs).sum(dim=-1)  # [S]: candidates more likely than the drawn token
    # A stage removes a token by setting its score to -inf (top-k, top-p): past the tokens it kept, topk picks
    # removed ones at probability 0 in id order, which are no candidates.
    kept = torch.isfinite(torch.stack([s[0] for _, s in staged])).gather(1, top_ids)  # [S, N]
    # One device-to-host copy per step: the token, where it stood at each stage, and the candidates together.
    raw = token_stats(staged[0][1], token)  # [3, 1]
    copy = HostCopy([token, chosen_probs, beaten_by, top_ids, top_probs, kept, raw])
    return PendingDraw(token, tuple(stage for stage, _ in staged), n, copy)
