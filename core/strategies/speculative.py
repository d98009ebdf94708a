"""Speculative decoding and prompt lookup decoding: a drafter proposes, the target verifies in one forward.

One verifier serves every :class:`~decode_tui.core.drafting.drafters.Drafter`. Each
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

The accept rule, in the papers' names, is :mod:`.acceptance`; the fast paths (a static cache whose verification
is padded to one width, graphs prepared ahead, a CPU's cheapest width) stay in :mod:`.verify_forward`, so the
loop reads as the algorithm.

A drafter may propose a tree of drafts instead of a chain (continuations sharing their prefixes). The target then
reads every node in one forward with a tree attention mask (:mod:`~decode_tui.core.token_tree`), the tree rule
(:mod:`.tree_acceptance`) follows its choice down the tree, and only the kept path's keys and values stay in the
cache, where a chain's would be. Greedy, it still emits plain greedy's tokens; sampling, the target's
distribution. Under a grammar a tree is verified as its first branch (the grammar checks chains).

The target's cache is cropped back to the confirmed prefix after every round
(in ``finally:``, so a consumer that stops mid-round leaves it consistent),
and so is the drafter's. An EOS accepted inside a block ends the run right
there: the draft's later tokens get no verdict and are not counted as drafted or accepted, and
``max_new_tokens`` is never exceeded. The very first token comes
from the prefill, exactly as in plain decoding.

It knows verification; the drafter knows drafting, the transcript the text.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from functools import partial
from typing import TYPE_CHECKING, Literal

import torch

from ..choosing.grammar import GrammarMask
from ..choosing.sampling import StageContext, stage_processors
from ..drafting.drafters import Draft, Drafter, ModelDrafter
from ..execution.forward import on_device, prepare, rollback
from ..execution.prefill import prefill
from ..execution.prefix_cache import keep, take
from ..execution.tree_attention import keep_path, tree_forward
from ..execution.widths import remembered_times
from ..live import LiveParams
from ..params import SamplingParams
from ..record.draft_stats import DraftStats, caught_up
from ..record.events import DraftLengthDecided, DraftProposed, DraftVerified, Event, PositionVerdict, TokenSource
from ..record.path import Path
from ..record.transcript import Transcript
from .acceptance import accept, distributions, first_token, run_ends_after
from .adaptive import AdaptiveDraftLength
from .drafter_replays import drafter_replay, stops_itself
from .plain_steps import plain_steps
from .tree_acceptance import accept_tree, tree_distributions, untested_after
from .verify_forward import VerifyForward, plain_step

if TYPE_CHECKING:
    from transformers import PreTrainedModel


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
    with compiled passes (see :mod:`decode_tui.core.execution.forward`), and every verification is padded to the
    longest draft, so one compiled graph serves every round whatever the drafter proposed. ``graphs``: the
    same, with the passes captured as CUDA graphs of the eager model instead of compiled. ``stages``: what the
    stages need besides their values; with a grammar there, a drafted token it forbids ends the draft before
    verification (its verdict is ``cut``: the target could only reject it, its p under the grammar is 0).
    """
    # Verification is greedy where the caller asks for it, and wherever the stages make sampling greedy
    # (temperature 0), which a front end may change mid-run: ``greedy`` is what this round does.
    greedy_asked = greedy
    greedy = greedy_asked or sampling.greedy
    processors = stage_processors(sampling, greedy, context=stages)
    version = live.version if live else 0
    stats = DraftStats()
    source: TokenSource = "lookup" if drafter.kind == "lookup" else "draft"
    # The vocabulary the drafter shares with the target: a draft model's logits rows past it are never drafted
    # nor verified. Prompt lookup copies the target's own tokens, so there it is all of it.
    shared = slice(0, vocab_size)
    static = fast or graphs  # a static cache: every verification padded to one width, for one graph
    grammar = stages.grammar if stages is not None and isinstance(stages.grammar, GrammarMask) else None

    context = [*transcript.prompt_ids, *(path.ids if path else ())]
    policy = AdaptiveDraftLength(num_draft_tokens, replay=drafter_replay(drafter, transcript),
                                 times_by_k=remembered_times(model, len(context), padded=static),
                                 stops_itself=stops_itself(drafter)) if adaptive else None
    # Room for the prompt, every new token and a padded verification (or a draft tree) past the last of them.
    max_len = len(transcript.prompt_ids) + transcript.max_new_tokens + max(num_draft_tokens, drafter.tree_budget) + 1
    verify = VerifyForward(model, static, max_len)
    # A branch starts from its parent's cache, cropped where they part (core/execution/prefix_cache.py).
    cache, held = take(model, context, reuse=path is not None, rollback_ready=True, fast=fast, graphs=graphs,
                       max_len=max_len)
    try:
        raw, emitted = prefill(model, transcript, on_device([context], model.device), cache, path,
                               held)  # [1, V]
        drafter.prefilled(context, cache)  # a draft made from the target takes these keys and values
        yield from emitted
        context = transcript.context  # the path up to where it ended the run, if it did
        if not transcript.done:
            if static and len(context) + num_draft_tokens + 1 <= max_len:
                prepare(model, cache, num_draft_tokens + 1, keep=num_draft_tokens + 1)  # the verification's graph
            if grammar is None:  # a plain step's, for the stretches below (a no-op off the graphs)
                prepare(model, cache, 1, keep=1)
            first, first_stats = first_token(distributions(processors, context, [], raw[:, shared]), raw, greedy,
                                        generator)
            yield transcript.emit(first, stats=first_stats)
            context.append(first)
            # What a draft model's c and v divide by (a lookup's copy costs no forward: it has no c). Not on the
            # compiled path, where a new shape would mean a new compile: there the step is inferred instead.
            if drafter.kind == "model" and not fast:
                stats.plain_step_s = plain_step(model, cache, context, repeat=2 if graphs else 1)
                if policy is not None and isinstance(drafter, ModelDrafter):  # and c, before the policy drafts
                    policy.timed(stats.plain_step_s, drafter.time_step(context, processors))

        round_, said, found = 0, ("", -1), None  # found: a lookup's copy that ended a stretch of plain steps
        while not transcript.done:
            if transcript.cancel_requested:
                yield transcript.finished("cancelled", **stats.extras())
                return
            # 1. Settings: what a front end changed since the last round applies from this round on.
            if live is not None and (snapshot := live.changed_since(version)) is not None:
                version, sampling = snapshot.version, snapshot.sampling
                greedy = greedy_asked or sampling.greedy
                processors = stage_processors(sampling, greedy, context=stages)
                num_draft_tokens = snapshot.draft.length(drafter.kind)
                drafter.tune(snapshot.draft)
                if policy is not None:
                    policy.max_k, policy.stops_itself = num_draft_tokens, stops_itself(drafter)
            # 2. Draft: the drafter proposes up to k tokens (at most remaining - 1: the target always adds one).
            k = min(policy.choose() if policy else num_draft_tokens, transcript.remaining - 1)
            if policy is not None and policy.decision != said:  # what the adaptive policy decided, when it changes
                said = policy.decision
                yield DraftLengthDecided(round=round_, k=k, reason=policy.reason)
            started = time.perf_counter()
            draft = (found if found is not None else drafter.propose(context, k, processors, greedy, generator)) \
                if k > 0 else Draft([])
            found = None
            if not (draft.token_ids or fast or grammar is not None or (k > 0 and drafter.kind == "model")):
                # Nothing drafted (drafting does not pay; a lookup found nothing): plain steps as greedy runs them,
                # each forward queued before the last token is read back (a round would pad and wait), until the
                # policy's next look, or a lookup (never a draft model: asking it runs its passes) finds a copy.
                look = partial(drafter.propose, context, k, processors, greedy, generator) if k > 0 else None
                stretch = transcript.remaining if policy is None or k > 0 else policy.plain_stretch()
                steps, seconds, found = yield from plain_steps(model, cache, transcript, context,
                                                               min(stretch, transcript.remaining), processors, greedy,
                                                               generator, shared, live, version, look=look)
                if policy is not None:
                    policy.observe_plain(steps, seconds)
                stats.verify_time_s += seconds
                for _ in range(steps):
                    stats.record(0, 0, 0.0, seconds / steps, 1)
                round_ += steps
                continue
            if grammar is not None:
                draft = draft.first_branch()
            tree = draft.tree  # None for a chain
            drafted = draft.token_ids[:k] if tree is None else list(draft.token_ids)
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
            past, nodes = confirmed, None  # a tree's kept nodes, once verified
            try:
                extra: int | None  # None: no extra token, an accepted one ended the run
                if tree is not None:
                    # 3-4. One forward over the pending token and every node gives each node's p; the target's
                    # choice is followed down the tree, and the accepted path is the round's chain from here on.
                    raw = tree_forward(model, cache, context[-1], tree, drafter.tree_budget + 1)  # [1+n, V]
                    transcript.target_forwards += 1
                    p = tree_distributions(processors, context, tree, raw[:, shared])  # [1+n, V]
                    nodes, extra, kind, verdicts, figures = accept_tree(p, tree, greedy, generator, raw,
                                                                        draft.q_probs)
                    n, drafted = len(nodes), [tree.tokens[i] for i in nodes]
                else:
                    # 3. Verify: one target forward over [pending, d_1 .. d_k] gives p_1 .. p_{k+1}.
                    raw = verify(cache, context[-1], drafted, confirmed, num_draft_tokens)  # [k+1, V]
                    transcript.target_forwards += 1
                    if grammar is not None:  # on a GPU, while it runs
                        grammar.prepare(context[grammar.prompt_length :], model.device, drafted)
                    # 4. Accept: the acceptance test, position by position, and the target's extra token.
                    p = distributions(processors, context, drafted, raw[:, shared])  # [k+1, V]
                    n, extra, kind, verdicts, figures = accept(p, draft.q, drafted, greedy, generator, raw)
                # An accepted token that ends the run (an EOS, or the last token max_new_tokens allows) ends
                # the round there: what was drafted after it never reaches the output, so it gets no verdict,
                # no count and no extra token after it.
                end = run_ends_after(drafted[:n], transcript.eos_token_ids, transcript.remaining)
                if end is not None:
                    n, extra, kind = end, None, None
                    verdicts = verdicts[:end] if nodes is None else untested_after(verdicts, nodes, end)
                    nodes = nodes[:end] if nodes is not None else None
                verify_s = time.perf_counter() - started
                stats.verify_time_s += verify_s
                # A tree counts its nodes as drafted, its depth for the acceptance by position
                # (core/record/draft_stats.py).
                drafted_k = len(verdicts) if tree is None else tree.depth
                fed = draft.fed if drafter.kind == "model" else None
                stats.record(drafted_k, n, draft_s, verify_s, n + (extra is not None), fed,
                             None if tree is None else len(verdicts))
                if policy:
                    policy.observe(drafted_k, n, verify_s, draft_s, None if fed is None else caught_up(fed))
                confirmed = len(context) + n
                if verdicts or cut:
                    yield DraftVerified(round=round_, verdicts=verdicts if end is not None else verdicts + cut,
                                        accepted=n, extra_token_id=extra,
                                        extra_kind=kind, target_forwards=transcript.target_forwards,
                                        draft_s=draft_s, verify_s=verify_s, step_s=stats.plain_step_s,
                                        path=tuple(nodes) if nodes is not None else None, draft_fed=fed)
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
                # the draft; keep only what was confirmed (a tree's kept path moved to where a chain's would be).
                # The drafter forgets the rest too.
                if nodes and confirmed > past + 1:
                    keep_path(cache, past, nodes[: confirmed - past - 1])
                rollback(cache, confirmed)
                drafter.rollback(confirmed)
            round_ += 1
        yield transcript.finished(**stats.extras())
    finally:
        # Kept for a branch of this run (a pooled static cache goes back to its pool when none comes).
        keep(model, cache, context, rollback_ready=True, fast=fast, graphs=graphs)
        drafter.close()


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


def _proposed(round_: int, kind: Literal["model", "lookup"], draft: Draft, drafted: list[int],
              label: Callable[[int], str], k: int) -> DraftProposed:
    q_probs = tuple(draft.q_probs[: len(drafted)]) if draft.q_probs is not None else None
    match, copied = draft.match, draft.copied
    return DraftProposed(
        round=round_, drafter=kind, token_ids=tuple(drafted), texts=tuple(label(t) for t in drafted),
        q_probs=q_probs,
        match_start=match[0] if match else None, match_end=match[1] if match else None,
        copy_start=copied[0] if copied else None,
        copy_end=copied[0] + len(drafted) if copied and draft.parents is None else copied[1] if copied else None,
        max_tokens=k, stopped=draft.stopped if len(drafted) < k else None,
        parents=draft.parents, sources=draft.sources,
    )
