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

A drafter may propose a tree of drafts instead of a chain (continuations sharing their prefixes); :func:`.verify`
verifies either and returns one result. The accept rules are :mod:`.acceptance` and :mod:`.tree_acceptance`; how
the target's forwards run (a static cache, graphs, padded widths) is :class:`~decode_tui.core.execution.target.Target`;
stretches with nothing to draft run as plain steps (:mod:`.plain_steps`). Under a grammar a tree is verified as its
first branch (the grammar checks chains), and a drafted token it forbids ends the draft before verification.

The target's cache is cropped back to the confirmed prefix after every round (in ``finally:``, so a consumer that
stops mid-round leaves it consistent), and so is the drafter's. The very first token comes from the prefill,
exactly as in plain decoding.

It knows verification; the drafter knows drafting, the transcript the text.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

import torch

from ..choosing.grammar import GrammarMask
from ..choosing.sampling import StageContext
from ..drafting.drafters import Draft, Drafter
from ..execution.target import Target
from ..live import LiveParams
from ..params import SamplingParams
from ..record.draft_stats import DraftStats
from ..record.events import DraftLengthDecided, Event
from ..record.path import Path
from ..record.transcript import Transcript
from .acceptance import distributions, first_token
from .adaptive import AdaptiveDraftLength
from .rounds import (
    Settings,
    grammar_cut,
    judge_unverified,
    kept_of_whole,
    plain_stretch,
    policy_cut,
    proposed,
    verified_event,
)
from .verify import verify

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@torch.inference_mode()
def speculative(
    model: PreTrainedModel, transcript: Transcript, drafter: Drafter, sampling: SamplingParams, *, greedy: bool,
    num_draft_tokens: int = 20, adaptive: bool = False, vocab_size: int | None = None,
    generator: torch.Generator | None = None, label: Callable[[int], str] = str, live: LiveParams | None = None,
    fast: bool = False, graphs: bool = False, path: Path | None = None, stages: StageContext | None = None,
) -> Generator[Event, None, None]:
    """Yield draft/verify events and the emitted tokens, then ``Finished`` with the draft statistics.

    ``path``: tokens already decided (a branch), emitted first; drafting goes on after them. ``live``: settings a
    front end may change mid-run, re-read before every round. ``fast``/``graphs``: how the target's forwards run
    (:class:`~decode_tui.core.execution.target.Target`). ``vocab_size``: the vocabulary a draft model shares with
    the target (rows past it are never drafted nor verified). ``stages``: what the sampling stages need besides
    their values, a grammar among them.
    """
    s = Settings(sampling, greedy, num_draft_tokens, stages, live)
    stats, vocab = DraftStats(), slice(0, vocab_size)
    grammar = stages.grammar if stages is not None and isinstance(stages.grammar, GrammarMask) else None
    context = [*transcript.prompt_ids, *(path.ids if path else ())]
    # Room for the prompt, every new token and a padded verification (or a draft tree) past the last of them.
    max_len = len(transcript.prompt_ids) + transcript.max_new_tokens + max(num_draft_tokens, drafter.tree_budget) + 1
    target = Target(model, transcript, context, fast=fast, graphs=graphs, max_len=max_len, reuse=path is not None,
                    tree_width=drafter.tree_budget + 1)
    policy = AdaptiveDraftLength(num_draft_tokens, replay=drafter.replay(transcript),
                                 times_by_k=target.times_by_k(len(context)), stops_itself=drafter.stops_itself,
                                 tree_budget=drafter.tree_budget, ranked=drafter.ranked,
                                 forwards=target.forward_prices(drafter.tree_budget) if drafter.ranked else None,
                                 shadows=drafter.free_to_ask) if adaptive else None
    try:
        learn = drafter.observed if drafter.learns else None  # a drafter that learns reads every target forward
        raw, emitted = target.prefill(context, path, learn)  # [1, V]
        drafter.prefilled(context, target.cache)  # a draft made from the target takes these keys and values
        yield from emitted
        context = transcript.context  # the path up to where it ended the run, if it did
        if not transcript.done:  # the first token, from the prefill's logits
            target.prepare(len(context), num_draft_tokens, plain_steps=grammar is None)
            first, figures = first_token(distributions(s.processors, context, [], raw[:, vocab]), raw, s.greedy,
                                         generator)
            yield transcript.emit(first, stats=figures)
            context.append(first)
            if not drafter.free_to_ask:  # a draft model's cost c is against a measured target step
                stats.plain_step_s = target.step_seconds(context)
                if policy is not None and stats.plain_step_s is not None:
                    policy.timed(stats.plain_step_s, drafter.time_step(context, s.processors))
        round_, said, found = 0, (("", -1), 0), None  # found: a copy that ended a stretch of plain steps
        while not transcript.done:
            if transcript.cancel_requested:
                yield transcript.finished("cancelled", **stats.extras())
                return
            s.refresh(drafter, policy)  # 1. what a front end changed applies from this round on
            # 2. Draft: the drafter proposes up to k tokens (at most remaining - 1: the target always adds one).
            k = min(policy.choose() if policy else s.num_draft_tokens, transcript.remaining - 1)
            if policy is not None and (policy.decision, policy.nodes) != said:  # what the policy decided, if new
                said = (policy.decision, policy.nodes)
                yield DraftLengthDecided(round=round_, k=k, reason=policy.reason)
            started = time.perf_counter()
            if found is not None and found.retrieved and transcript.remaining > 1:
                # A copy that plain steps came upon (their shadow rounds', rounds.py): verified whatever k was chosen.
                whole, k = found, min(len(found.token_ids), transcript.remaining - 1)
            else:
                whole = (found or drafter.propose(context, k, s.processors, s.greedy, generator)) if k > 0 \
                    else Draft([])
            # A tree whose nodes come best first is verified as far as the policy priced it to pay on this device (a
            # copy retrieved instead of it, whole); a copy the policy cannot price yet, as far as it trusts it.
            draft, found = policy_cut(policy, whole), None
            draft = policy.unproven(draft) if policy is not None else draft
            if not draft.token_ids and target.steps_plainly and grammar is None and (k == 0 or drafter.free_to_ask):
                start = len(context)
                steps, found = yield from plain_stretch(target, transcript, context, drafter, s, k, policy, stats,
                                                        generator, vocab)
                judge_unverified(policy, whole, context[start:])  # what the draft the policy cut would have kept
                round_ += steps
                continue
            draft = draft.first_branch() if grammar is not None else draft
            drafted = draft.token_ids[:k] if draft.tree is None else list(draft.token_ids)
            cut = grammar_cut(grammar, context, drafted)
            # The event is drafting's host work too (its tokens' texts): a round's price must hold what plain steps
            # do not pay.
            shown = proposed(round_, drafter.kind, draft, drafted, label, k) if drafted else None
            draft_s = time.perf_counter() - started
            stats.draft_time_s += draft_s
            stats.draft_forwards += draft.forwards
            if shown is not None:
                yield shown
            drafted = drafted[: cut[0].position] if cut else drafted  # verification never sees what it refused
            started, confirmed = time.perf_counter(), len(context) - 1  # the caches hold all but the pending token
            past, v = confirmed, None
            try:
                # 3-4. Verify and accept: one target forward over the draft, the acceptance test on it.
                v = verify(target, transcript, context, draft, drafted, s.processors, s.greedy, generator, vocab,
                           s.num_draft_tokens, grammar)
                if learn is not None:  # every node the target read, kept or not
                    learn([context[-1], *v.fed], v.raw)
                if policy is not None and policy.ranked and grammar is None and not whole.retrieved:
                    # what the whole tree would have kept
                    kept_of_whole(policy, whole, v, len(drafted) - draft.pinned)
                event = verified_event(round_, v, cut, draft, draft_s, time.perf_counter() - started, stats, policy,
                                       transcript.target_forwards)
                confirmed = len(context) + v.n
                if event is not None:
                    yield event
                # 5. Emit the accepted tokens, then the target's extra token, each with its figures under p.
                for i, token in enumerate(v.kept[: v.n]):
                    yield transcript.emit(token, drafter.source, v.figures[i] if v.figures else None)
                    context.append(token)
                if v.extra is not None:
                    yield transcript.emit(v.extra, "target" if v.kind in (None, "target") else v.kind,
                                          v.figures[v.n] if v.figures else None)
                    context.append(v.extra)
            finally:
                # 6. Roll back: both caches keep only what was confirmed (a tree's kept path moved where a chain's
                # would be).
                target.roll_back(confirmed, past, v.nodes if v is not None else None)
                drafter.rollback(confirmed)
            round_ += 1
        yield transcript.finished(**stats.extras())
    finally:
        target.close(context)  # kept for a branch of this run
        drafter.close()
