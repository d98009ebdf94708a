"""Sampling parameters and the stages that turn raw logits into the distribution a token is drawn from.

The stages and their order are transformers' own, exactly as
``GenerationMixin._get_logits_processor`` builds them, each applied only when
its value makes it do something: first the processors every mode applies
(repetition penalty, no-repeat n-gram, bad words, minimum new tokens, then a
grammar where a caller's ``logits_processor`` would go), then the warpers only
sampling applies (temperature, top-h, top-k, top-p, min-p, typical,
epsilon, eta). We call HF's own processors rather than re-deriving them, so
what the UI shows is what ``generate`` computes, with one exception: the bad
words, which HF bans as token sequences that a model can spell around
(:mod:`decode_tui.core.choosing.bad_words` bans the text). This module adds only the
per-stage snapshots the UI needs, the figures that say why a stage cut where
it did (:func:`stage_figures`), and the draw itself.

Nothing here edits the logits it is given, and randomness comes only from an
explicit ``torch.Generator``. It knows logits and token ids, not models or text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from transformers.generation.logits_process import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    LogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopHLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from ..errors import UsageError
from ..execution.figures import host_stats, token_stats
from ..execution.transfers import HostCopy
from ..params import WARPERS, SamplingParams
from ..record.events import Stage
from ..record.transcript import TokenStats
from .bad_words import NoBadWords


@dataclass(frozen=True)
class StageContext:
    """What some stages need besides their own value, fixed for a run.

    ``prompt_length``: min_new_tokens counts the tokens after it (a branch's path counts as generated), and the bad
    words are looked for after it. ``token_bytes``: each token id's bytes (:func:`~decode_tui.core.choosing.bad_words.
    token_bytes`), for the bad words, asked for only when there are some. ``grammar``: a constraint's processor
    (:class:`~decode_tui.core.choosing.grammar.GrammarMask`), applied where ``generate`` applies a caller's
    ``logits_processor``.
    """

    eos_token_ids: tuple[int, ...] = ()
    prompt_length: int = 0
    token_bytes: Callable[[], Sequence[bytes]] | None = None
    grammar: LogitsProcessor | None = None
    device: str = "cpu"  # where the EOS ids of min_new_tokens live: the model's device
    _bad_words: dict[tuple[str, ...], NoBadWords] = field(default_factory=dict, compare=False, repr=False)

    def bad_words(self, words: tuple[str, ...]) -> NoBadWords:
        """The processor that keeps ``words`` out of the output's text (built once per set of words: it scans the
        vocabulary)."""
        if words not in self._bad_words:
            if self.token_bytes is None:
                raise UsageError("Bad words need the model's tokenizer; this caller gave none.")
            self._bad_words[words] = NoBadWords(words, self.token_bytes(), self.prompt_length)
        return self._bad_words[words]


# The warpers read only the row of scores they are given, never the context: verification may process every
# drafted position at once with them.
CONTEXT_FREE: frozenset[str] = frozenset(WARPERS)


def stage_processors(params: SamplingParams, greedy: bool, min_tokens_to_keep: int = 1,
                     context: StageContext | None = None) -> list[tuple[Stage, LogitsProcessor]]:
    """HF's processors for the active stages, in HF's order.

    Greedy decoding in ``generate`` still applies the processors (repetition penalty, no-repeat n-gram, bad
    words, minimum new tokens, a caller's processor such as a grammar); the warpers only sampling applies,
    and none of them moves the argmax. Beam sampling keeps ``#eos + 1`` tokens through the warpers.
    """
    ctx = context or StageContext()
    eos = list(ctx.eos_token_ids)
    stages: list[tuple[Stage, LogitsProcessor]] = []
    if params.repetition_penalty != 1.0:
        stages.append(("repetition_penalty", RepetitionPenaltyLogitsProcessor(params.repetition_penalty)))
    if params.no_repeat_ngram_size > 0:
        stages.append(("no_repeat_ngram_size", NoRepeatNGramLogitsProcessor(params.no_repeat_ngram_size)))
    if params.bad_words:
        stages.append(("bad_words", ctx.bad_words(params.bad_words)))
    if params.min_new_tokens > 0 and eos:
        stages.append(("min_new_tokens", MinNewTokensLengthLogitsProcessor(ctx.prompt_length, params.min_new_tokens,
                                                                           eos, device=ctx.device)))
    if ctx.grammar is not None:
        stages.append(("grammar", ctx.grammar))
    if greedy:
        return stages
    keep = min_tokens_to_keep
    if params.temperature != 1.0:
        stages.append(("temperature", TemperatureLogitsWarper(params.temperature)))
    if params.top_h is not None:
        stages.append(("top_h", TopHLogitsWarper(top_h=params.top_h)))
    if params.top_k != 0:
        stages.append(("top_k", TopKLogitsWarper(top_k=params.top_k, min_tokens_to_keep=keep)))
    if params.top_p < 1.0:
        stages.append(("top_p", TopPLogitsWarper(top_p=params.top_p, min_tokens_to_keep=keep)))
    # generate adds min-p whenever it is set; at 0 it removes nothing, so it is left out as a stage.
    if params.min_p:
        stages.append(("min_p", MinPLogitsWarper(min_p=params.min_p, min_tokens_to_keep=keep)))
    if params.typical_p < 1.0:
        stages.append(("typical_p", TypicalLogitsWarper(mass=params.typical_p, min_tokens_to_keep=keep)))
    if 0.0 < params.epsilon_cutoff < 1.0:
        stages.append(("epsilon_cutoff", EpsilonLogitsWarper(epsilon=params.epsilon_cutoff, min_tokens_to_keep=keep)))
    if 0.0 < params.eta_cutoff < 1.0:
        stages.append(("eta_cutoff", EtaLogitsWarper(epsilon=params.eta_cutoff, min_tokens_to_keep=keep,
                                                                 device=ctx.device)))
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
class StageCut:
    """What one stage cut, on the host (see ``StageCandidates``): tokens left, tokens removed, the best of those
    it removed (ids and their probability before it), its threshold and the entropy its rule read."""

    possible: int
    removed: int
    removed_ids: list[int]
    removed_probs: list[float]
    threshold: float | None
    entropy: float | None
    detail: str | None


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
    cuts: list[StageCut]  # [S] what each stage cut (the raw "stage" cuts nothing)


def draw(
    staged: list[tuple[Stage, torch.Tensor]],
    greedy: bool,
    generator: torch.Generator | None,
    top_n: int,
    processors: list[tuple[Stage, LogitsProcessor]] | None = None,
) -> Draw:
    """Pick the next token from the last stage and gather everything the UI needs in one host transfer.

    Greedy takes the argmax; sampling draws with ``torch.multinomial`` from the
    softmax, as ``generate`` does, so the same seed gives the same tokens.
    """
    return draw_later(staged, greedy, generator, top_n, processors).wait()


class PendingDraw:
    """A pick made on the device whose host copy is under way: ``token`` can be fed to the model now."""

    def __init__(self, token: torch.Tensor, stages: tuple[Stage, ...], n: int, copy: HostCopy,
                 details: list[str | None]) -> None:
        self.token = token  # [1]
        self.stages = stages
        self.n = n
        self.copy = copy
        self.details = details

    def wait(self) -> Draw:
        # token, chosen probs [S], chosen ranks [S], top ids [S*N], top probs [S*N], kept by the stage [S*N],
        # possible [S], removed [S], removed from the stage before's top [S*N], thresholds [S], entropies [S],
        # raw log-probability, entropy and rank [3]
        packed = self.copy.wait()
        raw = host_stats(packed[-3:], 1)[0]
        s, n = len(self.stages), self.n
        parts = _split(packed[:-3], [1, s, s, s * n, s * n, s * n, s, s, s * n, s, s])
        (token,), chosen_probs, ranks, ids_flat, probs_flat, kept_flat, possible, removed, gone_flat, thresholds, \
            entropies = parts
        rows = [range(i * n, (i + 1) * n) for i in range(s)]
        top_ids = [[int(ids_flat[j]) for j in row if kept_flat[j]] for row in rows]
        top_probs = [[probs_flat[j] for j in row if kept_flat[j]] for row in rows]
        cuts = []
        for i, row in enumerate(rows):
            # The stage before's candidates that this stage removed: its own top row holds only what it kept.
            gone = [j for j, k in zip(rows[i - 1], row, strict=True) if gone_flat[k] and kept_flat[j]] if i else []
            cuts.append(StageCut(int(possible[i]), int(removed[i]), [int(ids_flat[j]) for j in gone],
                                 [probs_flat[j] for j in gone], _number(thresholds[i]), _number(entropies[i]),
                                 self.details[i]))
        return Draw(
            token_id=int(token),
            prob=float(chosen_probs[-1]),
            stages=self.stages,
            top_ids=top_ids,
            top_probs=top_probs,
            chosen_probs=chosen_probs,
            chosen_ranks=[int(x) + 1 for x in ranks],
            stats=raw,
            cuts=cuts,
        )


def _split(values: list[float], sizes: list[int]) -> list[list[float]]:
    """``values`` cut into consecutive parts of ``sizes``."""
    parts, at = [], 0
    for size in sizes:
        parts.append(values[at : at + size])
        at += size
    return parts


def _number(value: float) -> float | None:
    return None if value != value else value  # NaN: the stage has no such figure


def draw_later(
    staged: list[tuple[Stage, torch.Tensor]],
    greedy: bool,
    generator: torch.Generator | None,
    top_n: int,
    processors: list[tuple[Stage, LogitsProcessor]] | None = None,
) -> PendingDraw:
    """:func:`draw` with the host copy queued but not waited for (see
    :class:`~decode_tui.core.execution.transfers.HostCopy`).

    ``processors``: the stages' processors (as ``staged`` came from them), for the figures that say why each
    stage cut where it did.
    """
    final = staged[-1][1]  # [1, V]
    scores = torch.stack([s[0] for _, s in staged])  # [S, V]
    probs = torch.softmax(scores, dim=-1)  # [S, V]
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
    finite = torch.isfinite(scores)  # [S, V]
    kept = finite.gather(1, top_ids)  # [S, N]
    possible = finite.sum(-1)  # [S] tokens left after each stage
    removed = torch.cat([possible.new_zeros(1), (finite[:-1] & ~finite[1:]).sum(-1)])  # [S]
    # The stage before's top candidates that each stage removed (the raw row has none before it).
    gone = torch.cat([kept.new_zeros(1, n), ~finite[1:].gather(1, top_ids[:-1])])  # [S, N]
    thresholds, entropies = stage_figures(processors or [], probs)  # [S], [S]
    # One device-to-host copy per step: the token, where it stood at each stage, and the candidates together.
    raw = token_stats(staged[0][1], token)  # [3, 1]
    copy = HostCopy([token, chosen_probs, beaten_by, top_ids, top_probs, kept, possible, removed, gone,
                     thresholds, entropies, raw])
    details: list[str | None] = [None]
    details += [getattr(processor, "detail", None) for _, processor in processors or []]
    details += [None] * (len(staged) - len(details))
    return PendingDraw(token, tuple(stage for stage, _ in staged), n, copy, details)


def _entropy(p: torch.Tensor) -> torch.Tensor:
    """H(p) in nats over the rows of ``p`` ([..., V]); removed tokens (p = 0) add nothing."""
    return -torch.where(p > 0, p * torch.log(p), p.new_zeros(())).sum(-1)


def stage_figures(processors: list[tuple[Stage, LogitsProcessor]], probs: torch.Tensor,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """For each stage, the threshold it cut at and the entropy its rule read, NaN where it has none ([S], [S]).

    ``probs``: the distribution after each stage, ``raw`` first ([S, V]); stage i reads row i - 1. These are
    for the viewer, in each method's own words; the cut itself is always HF's processor's:

    - min_p: tokens below min_p × p_max go (Nguyen et al. 2024);
    - epsilon_cutoff: tokens below ε go; eta_cutoff: below η' = min(η, √η · exp(-H)) (Hewitt et al. 2022);
    - typical_p: tokens are ranked by |-log p - H|, the distance of their surprisal from the entropy, and the
      closest kept until their mass reaches typical_p (Meister et al. 2023): the threshold is the widest
      distance kept;
    - top_h: the most likely tokens (of the top 100) are kept while their own entropy stays below top_h × H
      (H of those 100): the threshold is that budget.
    """
    nan = probs.new_full((probs.shape[0],), float("nan"))
    thresholds, entropies = nan.clone(), nan.clone()
    for i, (_, processor) in enumerate(processors, start=1):
        p_in, kept = probs[i - 1], probs[i] > 0  # [V], [V]
        if isinstance(processor, MinPLogitsWarper):
            thresholds[i] = processor.min_p * p_in.max()
        elif isinstance(processor, EpsilonLogitsWarper):
            thresholds[i] = processor.epsilon
        elif isinstance(processor, EtaLogitsWarper):
            entropies[i] = h = _entropy(p_in)
            # HF keeps η as a 0-d tensor where the warper was built (the CPU by default); read there, it needs no
            # upload to the device, which would wait for the device's queue
            eta = float(processor.epsilon) if processor.epsilon.device.type == "cpu" else processor.epsilon
            thresholds[i] = torch.clamp(eta**0.5 * torch.exp(-h), max=eta)  # min(η, √η · exp(-H))
        elif isinstance(processor, TypicalLogitsWarper):
            entropies[i] = h = _entropy(p_in)
            distance = torch.abs(-torch.log(p_in) - h)  # [V]
            thresholds[i] = torch.where(kept, distance, distance.new_zeros(())).max()
        elif isinstance(processor, TopHLogitsWarper):
            top = torch.topk(p_in, min(processor.top_n, p_in.shape[-1])).values  # [100]
            entropies[i] = h = _entropy(top / top.sum())
            thresholds[i] = processor.top_h * h
    return thresholds, entropies
