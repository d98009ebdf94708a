"""Speculative decoding and prompt lookup decoding: a drafter proposes, the target verifies in one forward.

One verifier serves every :class:`~decode_tui.core.drafters.Drafter`. Each
round feeds the target ``[pending, d_1 .. d_k]`` (``pending`` is the last
emitted token, not yet in the target's KV cache) and gets the k + 1 target
distributions p_1 .. p_{k+1} in one forward pass. Then:

- greedy: accept the longest prefix of the draft on which the target's
  argmax agrees, then add the target's own argmax at the first disagreement
  (or the bonus token after the last position). The output equals plain
  greedy decoding token for token.
- sampling (Leviathan et al. 2023, Chen et al. 2023; names as in the papers):
  accept d_i with probability min(1, p_i(d_i) / q_i(d_i)); on the first
  rejection draw the replacement from norm(max(0, p_i - q_i)) and stop; if
  all k are accepted, draw a bonus token from p_{k+1}. The processors
  (penalty, temperature, top-k, top-p) are applied to p and q alike. A
  prompt-lookup draft is a copy, so q is one-hot. The output is distributed
  exactly as the target's own sampling.

The fast paths (a static cache whose verification is padded to one width, graphs prepared ahead) stay in
helpers (``_verification_feed``), so the loop reads as the algorithm.

The target's cache is cropped back to the confirmed prefix after every round
(in ``finally:``, so a consumer that stops mid-round leaves it consistent),
and so is the drafter's. An EOS accepted inside a block ends the run right
there: the draft's later tokens get no verdict and are not counted as drafted or accepted, and
``max_new_tokens`` is never exceeded. The very first token comes
from the prefill, exactly as in plain decoding.

It knows verification; the drafter knows drafting, the transcript the text.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Literal, NamedTuple

import torch

from ..draft_stats import DraftStats
from ..drafters import Draft, Drafter, ModelDrafter, PromptLookup
from ..events import DraftProposed, DraftVerified, Event, PositionVerdict, TokenSource
from ..forward import forward, prepare, rollback, to_host
from ..grammar import GrammarMask
from ..live import LiveParams
from ..loading import context_length
from ..params import SamplingParams
from ..path import Path, host_stats, prefill, token_stats
from ..prefix_cache import keep, take
from ..sampling import CONTEXT_FREE, StageContext, processed, stage_processors
from ..transcript import TokenStats, Transcript
from ..whatif import LookupMemo, Trace
from ..widths import width_costs
from .adaptive import AdaptiveDraftLength, remembered_times

if TYPE_CHECKING:
    from transformers import LogitsProcessor, PreTrainedModel

    from ..events import Stage


@torch.inference_mode()
def speculative(
    model: PreTrainedModel,
    transcript: Transcript,
    drafter: Drafter,
    sampling: SamplingParams,
    *,
    greedy: bool,
    num_draft_tokens: int = 20,
    adaptive: bool = False,
    vocab_size: int | None = None,
    generator: torch.Generator | None = None,
    label: Callable[[int], str] = str,
    live: LiveParams | None = None,
    fast: bool = False,
    graphs: bool = False,
    path: Path | None = None,
    stages: StageContext | None = None,
) -> Generator[Event, None, None]:
    """Yield draft/verify events and the emitted tokens, then ``Finished`` with the draft statistics.

    ``path``: tokens already decided (a branch), emitted first; drafting and verification go on after them
    (prompt lookup may copy from them).
    With ``live``, the sampling stages, the draft length and the drafter's own settings are re-read
    before every round (a front end changed them mid-run). ``fast``: the target runs on a static cache
    with compiled passes (see :mod:`decode_tui.core.forward`), and every verification is padded to the
    longest draft, so one compiled graph serves every round whatever the drafter proposed. ``graphs``: the
    same, with the passes captured as CUDA graphs of the eager model instead of compiled. ``stages``: what the
    stages need besides their values; with a grammar there, a drafted token it forbids ends the draft before
    verification (its verdict is ``cut``: the target could only reject it, its p under the grammar is 0).
    """
    greedy_verify = greedy
    greedy = greedy_verify or sampling.greedy
    processors = stage_processors(sampling, greedy, context=stages)
    version = live.version if live else 0
    stats = DraftStats()
    source: TokenSource = "lookup" if drafter.kind == "lookup" else "draft"
    device = model.device
    # The vocabulary the drafter shares with the target: a draft model's logits rows past it are never drafted
    # nor verified. Prompt lookup copies the target's own tokens, so there it is all of it.
    shared = slice(0, vocab_size)
    static = fast or graphs  # a static cache: every verification padded to one width, for one graph
    # Otherwise, on a CPU, each verification is padded to the width that costs the least; elsewhere none is.
    widths = width_costs(model) if device.type == "cpu" and not static else None
    room = context_length(model) or sys.maxsize  # positions the model can read: a pad must not pass them

    context = [*transcript.prompt_ids, *(path.ids if path else ())]
    policy = AdaptiveDraftLength(num_draft_tokens, replay=_lookup_replay(drafter, transcript),
                                 times_by_k=remembered_times(model, len(context), padded=static),
                                 stops_itself=_stops_itself(drafter)) if adaptive else None
    # Room for the prompt, every new token and a padded verification past the last of them.
    max_len = len(transcript.prompt_ids) + transcript.max_new_tokens + num_draft_tokens + 1
    # A branch starts from its parent's cache, cropped where they part (core/prefix_cache.py).
    cache, held = take(model, context, reuse=path is not None, rollback_ready=True, fast=fast, graphs=graphs,
                       max_len=max_len)
    try:
        raw, emitted = prefill(model, transcript, torch.tensor([context], device=device), cache, path,
                               held)  # [1, V]
        drafter.prefilled(context, cache)  # a draft made from the target takes these keys and values
        yield from emitted
        context = transcript.context  # the path up to where it ended the run, if it did
        if not transcript.done:
            if static and len(context) + num_draft_tokens + 1 <= max_len:
                prepare(model, cache, num_draft_tokens + 1, keep=num_draft_tokens + 1)  # the verification's graph
            first, first_stats = _first(_distributions(processors, context, [], raw[:, shared]), raw, greedy,
                                        generator)
            yield transcript.emit(first, stats=first_stats)
            context.append(first)

        round_ = 0
        while not transcript.done:
            if transcript.cancel_requested:
                yield transcript.finished("cancelled", **stats.extras())
                return
            # 1. Settings: what a front end changed since the last round applies from this round on.
            if live is not None and (snapshot := live.changed_since(version)) is not None:
                version, sampling = snapshot.version, snapshot.sampling
                greedy = greedy_verify or sampling.greedy
                processors = stage_processors(sampling, greedy, context=stages)
                num_draft_tokens = snapshot.draft.length(drafter.kind)
                drafter.tune(snapshot.draft)
                if policy is not None:
                    policy.max_k, policy.stops_itself = num_draft_tokens, _stops_itself(drafter)
            # 2. Draft: the drafter proposes up to k tokens (at most remaining - 1: the target always adds one).
            k = min(policy.choose() if policy else num_draft_tokens, transcript.remaining - 1)
            started = time.perf_counter()
            draft = drafter.propose(context, k, processors, greedy, generator) if k > 0 else Draft([])
            drafted = draft.token_ids[:k]
            cut = _grammar_cut(stages, context, drafted)
            draft_s = time.perf_counter() - started
            stats.draft_time_s += draft_s
            stats.draft_forwards += draft.forwards
            if drafted:
                yield _proposed(round_, drafter.kind, draft, drafted, label, k)
            if cut:  # verification never sees what the grammar refused
                drafted = drafted[: cut[0].position]

            started = time.perf_counter()
            confirmed = len(context) - 1  # what the caches hold between rounds: everything but the pending token
            try:
                # 3. Verify: one target forward over [pending, d_1 .. d_k] gives p_1 .. p_{k+1}.
                if static:
                    pad_to = num_draft_tokens + 1 if confirmed + num_draft_tokens + 1 <= max_len else 0
                else:  # on a CPU, the narrowest width that costs the least (core/widths.py)
                    pad_to = widths.width_for(len(drafted) + 1, room - confirmed) if widths is not None else 0
                feed = _verification_feed(context[-1], drafted, pad_to, device)  # [1, W], W >= k + 1
                forward_started = time.perf_counter()
                raw = forward(model, feed, cache, keep=feed.shape[1])[0, : len(drafted) + 1]  # [k+1, V]
                if widths is not None:
                    widths.observe(feed.shape[1], time.perf_counter() - forward_started)
                transcript.target_forwards += 1
                # 4. Accept: the acceptance test, position by position, and the target's extra token.
                p = _distributions(processors, context, drafted, raw[:, shared])  # [k+1, V]
                extra: int | None  # None: no extra token, an accepted one ended the run
                n, extra, kind, verdicts, figures = _verify(p, draft.q, drafted, greedy, generator, raw)
                # An accepted token that ends the run (an EOS, or the last token max_new_tokens allows) ends
                # the round there: what was drafted after it never reaches the output, so it gets no verdict,
                # no count and no extra token after it.
                end = _run_ends_after(drafted[:n], transcript.eos_token_ids, transcript.remaining)
                if end is not None:
                    n, extra, kind, verdicts = end, None, None, verdicts[:end]
                verify_s = time.perf_counter() - started
                stats.verify_time_s += verify_s
                stats.record(len(verdicts), n, draft_s, verify_s, n + (extra is not None))
                if policy:
                    policy.observe(len(verdicts), n, verify_s, draft_s)
                confirmed = len(context) + n
                if drafted or cut:
                    yield DraftVerified(round=round_, verdicts=verdicts if end is not None else verdicts + cut,
                                        accepted=n, extra_token_id=extra,
                                        extra_kind=kind, target_forwards=transcript.target_forwards,
                                        draft_s=draft_s, verify_s=verify_s)
                # 5. Emit the accepted prefix, then the target's extra token, if the run goes on past the prefix.
                # Each with the target's figures for it under its raw distribution, from this verification.
                for i, token in enumerate(drafted[:n]):
                    yield transcript.emit(token, source, figures[i] if figures else None)
                    context.append(token)
                if extra is not None:
                    yield transcript.emit(extra, "target" if kind in (None, "target") else kind,
                                          figures[n] if figures else None)
                    context.append(extra)
            finally:
                # 6. Roll back: the target's cache holds the context up to (not including) the pending token plus
                # the draft; keep only what was confirmed. The drafter forgets the rest too.
                rollback(cache, confirmed)
                drafter.rollback(confirmed)
            round_ += 1
        yield transcript.finished(**stats.extras())
    finally:
        # Kept for a branch of this run (a pooled static cache goes back to its pool when none comes).
        keep(model, cache, context, rollback_ready=True, fast=fast, graphs=graphs)


def _grammar_cut(stages: StageContext | None, context: list[int], drafted: list[int]) -> tuple[PositionVerdict, ...]:
    """The verdicts of the drafted tokens the grammar refuses, from the first of them on: ``cut`` for that one,
    ``untested`` for the rest (they followed it). Empty where the grammar takes the whole draft, or there is none.

    A prompt lookup copy never met the grammar; a draft model drafts under it and is refused nothing. Cutting
    before verification changes no output: under the grammar the target gives the token p = 0, so greedy
    verification would reject it and sampling would too, then resample from max(0, p - q) = p.
    """
    grammar = stages.grammar if stages is not None else None
    if not isinstance(grammar, GrammarMask) or not drafted:
        return ()
    output = context[grammar.prompt_length :]
    allowed = grammar.allowed_prefix(output, drafted)
    q = 1.0  # the drafter's probability is not what ended it; a copy's is 1
    return tuple(PositionVerdict(i, drafted[i], 0.0, q, None, "cut" if i == allowed else "untested")
                 for i in range(allowed, len(drafted)))


def _stops_itself(drafter: Drafter) -> bool:
    """Whether the drafter ends a draft where it is unsure of its next token (a draft model with a confidence
    cut-off), so that the adaptive policy need only choose whether to draft."""
    return isinstance(drafter, ModelDrafter) and drafter.confidence_threshold > 0


def _lookup_replay(drafter: Drafter, transcript: Transcript) -> Callable[[int], tuple[int, ...]] | None:
    """For prompt lookup, what a fixed draft length k would have fed the target so far (an exact replay,
    core/whatif.py), for the adaptive policy; None for a draft model, whose drafts cannot be replayed free."""
    if not isinstance(drafter, PromptLookup):
        return None
    memo: LookupMemo | None = None

    def widths(k: int) -> tuple[int, ...]:
        nonlocal memo
        so_far = transcript.token_ids
        if k == 0 or len(so_far) < 2:
            return (1,) * max(len(so_far) - 1, 0)
        if memo is None or memo.settings != (drafter.max_ngram_size, drafter.num_pred_tokens):  # retuned mid-run
            memo = LookupMemo(transcript.eos_token_ids, drafter.max_ngram_size, drafter.num_pred_tokens)
        trace = Trace(source="the run so far", model="", mode="pld", prompt_ids=transcript.prompt_ids,
                      token_ids=tuple(so_far), max_new_tokens=len(so_far), target_forwards=0, params={})
        return memo.widths(trace, k)

    return widths


def _verification_feed(pending: int, drafted: list[int], pad_to: int, device: torch.device) -> torch.Tensor:
    """``[pending, d_1 .. d_k]``, padded to ``pad_to`` positions with copies of the pending token ([1, W]).

    The fast paths pad to the longest draft, so that one compiled graph (or captured CUDA graph) serves every
    round whatever the drafter proposed; on a CPU the plain path pads to the width that costs the least
    (:mod:`decode_tui.core.widths`). The pads come after the real positions, which attend only to what precedes
    them, and the rollback after the round forgets them with the rejected drafts. (No padding where a draft
    length raised mid-run would overrun the static cache: the real positions always fit.)
    """
    real = [pending, *drafted]
    return torch.tensor([real + [pending] * max(0, pad_to - len(real))], device=device)


def _run_ends_after(accepted: list[int], eos_token_ids: frozenset[int], remaining: int) -> int | None:
    """How many of the accepted draft tokens reach the output when one of them ends the run, else None."""
    for i, token in enumerate(accepted):
        if token in eos_token_ids or i + 1 >= remaining:
            return i + 1
    return None


def _distributions(processors: list[tuple[Stage, LogitsProcessor]], context: list[int], drafted: list[int],
                   logits: torch.Tensor) -> torch.Tensor:
    """Target probabilities at each verified position, each processed with its own prefix ([k+1, V])."""
    if all(stage in CONTEXT_FREE for stage, _ in processors):
        # The warpers act on each row alone and never read the context: all k + 1 rows at
        # once, a few kernels a round instead of a few per position (at hundreds of tokens a second on a
        # GPU, each launch counts).
        no_context = torch.empty((logits.shape[0], 0), dtype=torch.long, device=logits.device)
        return torch.softmax(processed(processors, no_context, logits), dim=-1)
    ids = torch.tensor([context + drafted], device=logits.device)  # [1, T+k]
    rows = []
    for i in range(logits.shape[0]):
        scores = processed(processors, ids[:, : len(context) + i], logits[i : i + 1])
        rows.append(torch.softmax(scores, dim=-1)[0])
    return torch.stack(rows)


def _first(p: torch.Tensor, raw: torch.Tensor, greedy: bool, generator: torch.Generator | None,
           ) -> tuple[int, TokenStats]:
    """The first token, from the prefill's distribution p ([1, V]) as plain decoding picks it, with its figures
    under the raw logits ([1, V]), in one host copy."""
    token = torch.argmax(p[0], -1, keepdim=True) if greedy else torch.multinomial(p[0], 1, generator=generator)  # [1]
    host = to_host([token, token_stats(raw, token)])
    return int(host[0]), host_stats(host[1:], 1)[0]


class VerifiedRound(NamedTuple):
    n: int  # how many drafted tokens were accepted
    extra: int  # the target's extra token after them
    kind: Literal["target", "resampled", "bonus"] | None
    verdicts: tuple[PositionVerdict, ...]
    # The emitted tokens' figures under the target's raw distribution (d_1 .. d_n, then the extra token), when
    # the raw logits were given.
    figures: list[TokenStats] | None = None


def _verify(
    p: torch.Tensor,  # [k+1, V] target distributions p_1 .. p_{k+1}
    q: torch.Tensor | None,  # [k, V] draft distributions q_1 .. q_k; None for a lookup copy (one-hot)
    drafted: list[int],  # d_1 .. d_k
    greedy: bool,
    generator: torch.Generator | None,
    raw: torch.Tensor | None = None,  # [k+1, V] the target's raw logits at those positions
) -> VerifiedRound:
    """The acceptance test: the accepted count n, the extra token and its kind, the per-position verdicts.

    Speculative sampling (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023): accept d_i while
    u_i < min(1, p_i(d_i) / q_i(d_i)); at the first rejection draw from max(0, p_i - q_i), normalised;
    if all k pass, draw a bonus token from p_{k+1}. Greedy verification accepts while d_i is p_i's argmax
    and adds the argmax of the first position that disagrees (or of p_{k+1}).
    Everything is computed on the device; what decides the round (n, the extra token) and what the viewer
    shows (p_i(d_i), q_i(d_i), u_i) come to the host in one copy (:func:`_round_to_host`).
    """
    k = len(drafted)
    d = torch.tensor(drafted, dtype=torch.long, device=p.device)  # [k] d_1 .. d_k
    p_d = p[:k].gather(1, d[:, None])[:, 0]  # [k] p_i(d_i)
    # A lookup copy's q is one-hot on the copied token: q_i(d_i) = 1.
    q_d = q[:k].gather(1, d[:, None])[:, 0] if q is not None else p.new_ones(k)  # [k] q_i(d_i)
    u = None
    if greedy:
        argmax = p.argmax(-1)  # [k+1]
        accepted = argmax[:k] == d  # [k]
    else:
        u = torch.rand(k, generator=generator, device=p.device) if k else p.new_zeros(0)  # [k] u_i ~ U(0, 1)
        ratio = torch.where(q_d > 0, p_d / q_d, torch.zeros_like(p_d))
        accepted = u < ratio.clamp(max=1.0)  # accept d_i with probability min(1, p_i(d_i) / q_i(d_i))
    n = accepted.long().cumprod(0).sum()  # [] how many lead the row unbroken
    if greedy:
        extra = argmax[n]  # the target's own choice at the first disagreement, or after the last draft
    else:  # a lookup copy's q rows are built only here, where the residual max(0, p - q) needs them
        q_rows = q[:k] if q is not None else torch.nn.functional.one_hot(d, p.shape[-1]).to(p.dtype)  # [k, V]
        extra = _resample(p, q_rows, n, k, generator)
    stats = None
    if raw is not None:  # what is emitted: d_1 .. d_n, then the extra token at position n
        emitted = torch.cat([d, d.new_zeros(1)]).index_put((n.view(1),), extra.view(1))  # [k+1]
        stats = token_stats(raw, emitted)  # [3, k+1]
    n_host, extra_host, p_host, q_host, u_host, figures = _round_to_host(n, extra, p_d, q_d, u, stats)
    # Positions after the first rejection were never tested: the round discards them with it.
    verdicts = tuple(PositionVerdict(i, drafted[i], p_host[i], q_host[i], u_host[i] if u_host and i <= n_host else None,
                                     "accepted" if i < n_host else "rejected" if i == n_host else "untested")
                     for i in range(k))
    if n_host == k:
        return VerifiedRound(n_host, extra_host, "bonus" if k else None, verdicts, figures)
    return VerifiedRound(n_host, extra_host, "target" if greedy else "resampled", verdicts, figures)


def _resample(p: torch.Tensor, q: torch.Tensor, n: torch.Tensor, k: int,
              generator: torch.Generator | None) -> torch.Tensor:
    """The extra token under sampling: from norm(max(0, p_n - q_n)) after a rejection at position n, or the bonus
    from p_{k+1} when all k were accepted (there is no q_{k+1} to subtract)."""
    q_padded = torch.cat([q, q.new_zeros(1, q.shape[-1])])  # [k+1, V]
    residual = torch.clamp(p[n] - q_padded[n], min=0.0)  # max(0, p - q)
    total = residual.sum()
    # p == q exactly leaves nothing to resample from; then rejection had probability 0 and p is the answer.
    resample = torch.where(total > 0, residual / total, p[n])
    return torch.multinomial(torch.where(n == k, p[n], resample), 1, generator=generator)[0]


def _round_to_host(n: torch.Tensor, extra: torch.Tensor, p_d: torch.Tensor, q_d: torch.Tensor,
                   u: torch.Tensor | None, stats: torch.Tensor | None,
                   ) -> tuple[int, int, list[float], list[float], list[float], list[TokenStats] | None]:
    """The round's one device-to-host copy, unpacked: n, the extra token, p_i(d_i), q_i(d_i), u_i (empty
    under greedy verification) and the emitted tokens' figures. One copy, not six: on a GPU each is a wait for
    the device."""
    k = p_d.shape[0]
    host = to_host([n, extra, p_d, q_d] + ([u] if u is not None else []) + ([stats.flatten()] if stats is not None
                                                                            else []))
    u_end = 2 + 2 * k + (k if u is not None else 0)
    figures = host_stats(host[u_end:], k + 1) if stats is not None else None
    return int(host[0]), int(host[1]), host[2 : 2 + k], host[2 + k : 2 + 2 * k], host[2 + 2 * k : u_end], figures


def _proposed(round_: int, kind: Literal["model", "lookup"], draft: Draft, drafted: list[int],
              label: Callable[[int], str], k: int) -> DraftProposed:
    q_probs = tuple(draft.q_probs[: len(drafted)]) if draft.q_probs is not None else None
    match, copied = draft.match, draft.copied
    return DraftProposed(
        round=round_, drafter=kind, token_ids=tuple(drafted), texts=tuple(label(t) for t in drafted),
        q_probs=q_probs,
        match_start=match[0] if match else None, match_end=match[1] if match else None,
        copy_start=copied[0] if copied else None,
        copy_end=copied[0] + len(drafted) if copied else None,
        max_tokens=k, stopped=draft.stopped if len(drafted) < k else None,
    )
