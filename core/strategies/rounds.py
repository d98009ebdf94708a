"""The bookkeeping of speculative decoding's rounds, kept out of its loop: the settings re-read each round, a
stretch of plain steps where nothing was drafted, the grammar's cut of a draft, each round's events and counts, and
what a ranked tree's round kept of the whole tree drafted.

It knows events, statistics and the adaptive policy's observations; the algorithm itself is :mod:`.speculative`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from functools import partial
from typing import TYPE_CHECKING

import torch

from ..choosing.grammar import GrammarMask
from ..choosing.sampling import StageContext, stage_processors
from ..drafting.drafters import Draft, Drafter
from ..execution.target import Target
from ..live import LiveParams
from ..params import SamplingParams
from ..record.draft_stats import DraftStats, caught_up
from ..record.events import DraftProposed, DraftRow, DraftVerified, Event, PositionVerdict
from ..record.transcript import Transcript
from .adaptive import AdaptiveDraftLength
from .plain_steps import plain_steps
from .shadow import ShadowRounds
from .verify import Verified

if TYPE_CHECKING:
    from transformers import LogitsProcessor

    from ..record.events import Stage


class Settings:
    """A run's sampling stages and draft length, re-read from a front end's live parameters before every round."""

    def __init__(self, sampling: SamplingParams, greedy: bool, num_draft_tokens: int, stages: StageContext | None,
                 live: LiveParams | None) -> None:
        self.greedy_asked, self.stages, self.live = greedy, stages, live
        self.version = live.version if live else 0
        self.num_draft_tokens = num_draft_tokens
        self._apply(sampling)

    def _apply(self, sampling: SamplingParams) -> None:
        # Verification is greedy where the caller asks for it, and wherever the stages make sampling greedy
        # (temperature 0), which a front end may change mid-run.
        self.greedy = self.greedy_asked or sampling.greedy
        self.processors: list[tuple[Stage, LogitsProcessor]] = stage_processors(sampling, self.greedy,
                                                                                context=self.stages)

    def refresh(self, drafter: Drafter, policy: AdaptiveDraftLength | None) -> None:
        """What a front end changed since the last round, applied from this round on (the drafter's own settings
        too)."""
        if self.live is None or (snapshot := self.live.changed_since(self.version)) is None:
            return
        self.version = snapshot.version
        self._apply(snapshot.sampling)
        self.num_draft_tokens = drafter.draft_length(snapshot.draft)
        drafter.tune(snapshot.draft)
        if policy is not None:
            policy.max_k, policy.stops_itself = self.num_draft_tokens, drafter.stops_itself
            policy.tree_budget = drafter.tree_budget


def plain_stretch(target: Target, transcript: Transcript, context: list[int], drafter: Drafter, s: Settings, k: int,
                  policy: AdaptiveDraftLength | None, stats: DraftStats, generator: torch.Generator | None,
                  vocab: slice) -> Generator[Event, None, tuple[int, Draft | None]]:
    """Nothing drafted (drafting does not pay; a lookup found nothing): plain steps as greedy runs them, each
    forward queued before the last token is read back (a round would pad and wait), until the policy's next look,
    or a drafter that is free to ask finds a copy (a ranked drafter's, retrieved). Returns the steps run and that copy,
    if one ended the stretch."""
    stretch = transcript.remaining if policy is None or k > 0 else policy.plain_stretch()
    # Where the policy stopped drafting trees that are free to ask, the steps stand in for tree rounds (shadow.py),
    # and a copy one of their drafts retrieved instead ends the stretch.
    shadow = ShadowRounds(partial(drafter.propose, context, policy.max_k, s.processors, s.greedy, generator),
                          policy.observe_shadow) if policy is not None and policy.trees and drafter.free_to_ask \
        and k == 0 else None
    look = partial(verified_part, policy, partial(drafter.propose, context, k, s.processors, s.greedy, generator)) \
        if k > 0 else shadow.retrieved if shadow is not None else None
    steps, seconds, found = yield from plain_steps(target.model, target.cache, transcript, context,
                                                   min(stretch, transcript.remaining), s.processors, s.greedy,
                                                   generator, vocab, s.live, s.version, look=look,
                                                   learn=drafter.observed if drafter.learns else None,
                                                   seen=shadow.seen if shadow is not None else None)
    if policy is not None:
        policy.observe_plain(steps, seconds)
    stats.verify_time_s += seconds
    for _ in range(steps):
        stats.record(0, 0, 0.0, seconds / steps, 1)
    return steps, found


def policy_cut(policy: AdaptiveDraftLength | None, whole: Draft) -> Draft:
    """What of ``whole`` is verified: a ranked tree's first nodes as far as the policy priced them to pay on this
    device, with its pinned nodes where they pay for their width (all of it where the policy chose no cut); a copy
    retrieved instead of a tree, whole."""
    if policy is None or not policy.nodes or whole.retrieved:
        return whole
    return whole.cut(policy.nodes, policy.keeps_graft(whole.pinned, whole.graft_match, alone=whole.unranked))


def verified_part(policy: AdaptiveDraftLength | None, propose: Callable[[], Draft]) -> Draft:
    """A draft for the context as it is now, where the policy would verify any of it, else an empty one: a stretch
    of plain steps is ended only by a draft the next round verifies (on a GPU its next forward, queued ahead, is
    rolled back for it)."""
    whole = propose()
    return whole if policy_cut(policy, whole).token_ids else Draft([])


def judge_unverified(policy: AdaptiveDraftLength | None, whole: Draft, emitted: list[int]) -> None:
    """Recycling's commonest tokens (children of the pending token, no ranked tree) that the policy did not verify,
    judged by the first token the plain steps after them emitted: they would have kept it where it is one of them.
    A policy that stopped verifying them so sees when they would pay again, as shadow rounds show it a tree's."""
    if policy is not None and whole.unranked and not whole.graft_match and emitted and whole.token_tree().depth == 1:
        policy.observe_graft(int(emitted[0] in whole.token_ids), 0)


def grammar_cut(grammar: GrammarMask | None, context: list[int], drafted: list[int]) -> tuple[PositionVerdict, ...]:
    """The verdicts of the drafted tokens the grammar refuses, from the first of them on: ``cut`` for that one,
    ``untested`` for the rest (they followed it). Empty where the grammar takes the whole draft, or there is none.

    A prompt lookup copy never met the grammar; a draft model drafts under it and is refused nothing. Cutting
    before verification changes no output: under the grammar the target gives the token p = 0, so greedy
    verification would reject it and sampling would too, then resample from max(0, p - q) = p.
    """
    if grammar is None or not drafted:
        return ()
    allowed = grammar.allowed_prefix(context[grammar.prompt_length :], drafted)
    q = 1.0  # the drafter's probability is not what ended it; a copy's is 1
    return tuple(PositionVerdict(i, drafted[i], 0.0, q, None, "cut" if i == allowed else "untested")
                 for i in range(allowed, len(drafted)))


def proposed(round_: int, kind: str, draft: Draft, drafted: list[int], label: Callable[[int], str],
             k: int) -> DraftProposed:
    """The round's draft as an event: its tokens, where a copy came from, a tree's shape."""
    q_probs = tuple(draft.q_probs[: len(drafted)]) if draft.q_probs is not None else None
    match, copied = draft.match, draft.copied
    return DraftProposed(
        round=round_, drafter=kind, token_ids=tuple(drafted),
        texts=tuple(label(t) for t in drafted), q_probs=q_probs,
        match_start=match[0] if match else None, match_end=match[1] if match else None,
        copy_start=copied[0] if copied else None,
        copy_end=copied[0] + len(drafted) if copied and draft.parents is None else copied[1] if copied else None,
        max_tokens=k, stopped=draft.stopped if len(drafted) < k else None,
        parents=draft.parents, sources=draft.sources[: len(drafted)] if draft.sources else None,
        rows=tuple(DraftRow(name, ids, tuple(label(t) for t in ids)) for name, ids in draft.rows) if draft.rows
        else None, state=draft.state,
    )


def kept_of_whole(policy: AdaptiveDraftLength, whole: Draft, v: Verified, verified: int) -> None:
    """Tell the policy what a ranked tree's round kept of the whole tree drafted, of which the first ``verified``
    nodes were verified: the nodes the emitted tokens walk down it. Past the cut, the target's own token may follow a
    node it never read; the nodes under that one are unknown."""
    tree, ranked = whole.token_tree(), len(whole.token_ids) - whole.pinned  # the nodes after the ranked are no rank's
    path = tree.walk([*v.kept[: v.n], *([v.extra] if v.extra is not None else [])])
    walked = [n for n in path if n < ranked]
    if whole.pinned:  # a grafted copy: its nodes on the path are what it kept past the tree's own
        policy.observe_graft(len(path) - len(walked), whole.graft_match)
    if ranked:  # a round of no ranked tree (its row was empty) says nothing of its nodes' chances
        policy.observe_path(walked, [n for n in tree.below(walked[-1]) if n < ranked]
                            if walked and walked[-1] >= verified else ())


def verified_event(round_: int, v: Verified, cut: tuple[PositionVerdict, ...], draft: Draft, draft_s: float,
                   verify_s: float, stats: DraftStats, policy: AdaptiveDraftLength | None,
                   target_forwards: int) -> DraftVerified | None:
    """Count the round (its statistics, the adaptive policy's observation) and the event that shows it; None where
    nothing was drafted nor cut."""
    stats.verify_time_s += verify_s
    # A tree counts its nodes as drafted, its depth for the acceptance by position (core/record/draft_stats.py).
    stats.record(v.depth, v.n, draft_s, verify_s, v.n + (v.extra is not None), draft.fed,
                 None if v.nodes is None else len(v.verdicts))
    if policy:
        policy.observe(v.depth, v.n, verify_s, draft_s, None if draft.fed is None else caught_up(draft.fed),
                       None if v.nodes is None else len(v.fed))
    if not (v.verdicts or cut):
        return None
    # Where an accepted token ended the run, what the grammar cut after it never reached the output either.
    return DraftVerified(round=round_, verdicts=v.verdicts if v.extra is None else v.verdicts + cut, accepted=v.n,
                         extra_token_id=v.extra, extra_kind=v.kind, target_forwards=target_forwards,
                         draft_s=draft_s, verify_s=verify_s, step_s=stats.plain_step_s,
                         path=tuple(v.nodes) if v.nodes is not None else None, draft_fed=draft.fed)
