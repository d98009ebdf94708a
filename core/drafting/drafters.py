"""Drafters: whoever proposes the tokens that the target model then verifies.

Two implementations share one protocol, and the verifier
(:mod:`decode_tui.core.strategies.speculative`) does not care which one
proposed:

- :class:`PromptLookup` copies the continuation of an earlier occurrence of
  the context's last n-gram (prompt lookup decoding, Saxena 2023; the search
  is transformers' ``PromptLookupCandidateGenerator``: longest n-gram first,
  first match from the left, never the tail matching itself). Its draft is
  deterministic, so q is one-hot.
- :class:`ModelDrafter` samples (or takes the argmax of) a small draft model,
  token by token, and reports its distributions q.

A drafter keeps whatever state it has (a KV cache) as a cache of a *prefix of
the context*; after verification the verifier tells it how long the confirmed
prefix is and it rolls back to it. A draft made from the target (quantised, or
its first layers) starts from the target's own keys and values of the prompt
instead of computing its own. Drafters know nothing of acceptance.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import torch

from ..choosing.sampling import processed
from ..execution.forward import StaticKV, forward, new_cache, prepare, release, rollback
from ..execution.transfers import HostCopy, on_device
from ..record.path import common_prefix
from ..token_tree import TokenTree

if TYPE_CHECKING:
    from transformers import Cache, LogitsProcessor, PreTrainedModel

    from ..params import DraftParams
    from ..record.events import Stage, TokenSource
    from ..record.transcript import Transcript


@dataclass(frozen=True)
class Draft:
    """Proposed tokens. ``q`` holds the draft's full distributions ([k, V]) when it sampled from a model.

    A tree of drafts (:mod:`~decode_tui.core.token_tree`) has ``parents``: node i holds ``token_ids[i]`` and
    follows node ``parents[i]`` (-1: the pending token); ``sources`` says where each node was copied from, in
    words a viewer can show. A chain has neither."""

    token_ids: list[int]
    q: torch.Tensor | None = None  # [k, V]; None for a deterministic copy (q is one-hot)
    match: tuple[int, int] | None = None  # lookup: the matched n-gram's span in the context
    copied: tuple[int, int] | None = None  # lookup: the span the draft was copied from
    forwards: int = 0
    q_probs: tuple[float, ...] | None = None  # q_i(d_i) on the host, with q
    stopped: str | None = None  # why fewer than the k asked for were drafted, in words a viewer can show
    parents: tuple[int, ...] | None = None  # a tree's: each node's parent (-1 the root); None for a chain
    sources: tuple[str, ...] | None = None  # a tree's: where each node came from
    # A draft model's: the context tokens it was fed before its first proposal. One or two in a round after a
    # round that drafted; more after plain steps it skipped (a catch-up, which is no draft step's cost), unless
    # it was made from the target, which hands it the keys and values of those instead.
    fed: int | None = None  # None: a drafter that is fed nothing (a copy from the text)
    # What it drafted from, for its view: labelled rows of token ids (lookahead's window levels, recycling's rows).
    rows: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    # Its own state after drafting, in words a viewer shows beside the run's figures (recycling's matrix fill).
    state: str | None = None
    # A ranked drafter's copy of earlier text instead of its tree (recycling's retrieval round): verified whole, never
    # cut to the policy's nodes, and no round of the tree the policy sizes.
    retrieved: bool = False
    # A ranked tree's last nodes that are no part of its ranking (a copy grafted onto recycling's tree): verified where
    # they pay for their width (Draft.cut's ``pinned``), whether or not the policy's cut drops ranked nodes.
    pinned: int = 0
    # How many tokens of the text's end the grafted copy matched (0: no graft): what its chance of paying is kept by.
    graft_match: int = 0

    @property
    def tree(self) -> TokenTree | None:
        """The draft as a token tree, when it is one."""
        return TokenTree(tuple(self.token_ids), self.parents) if self.parents is not None else None

    def token_tree(self) -> TokenTree:
        """The draft as a token tree, a chain's too (each node under the one before)."""
        return self.tree or TokenTree(tuple(self.token_ids), tuple(range(-1, len(self.token_ids) - 1)))

    def cut(self, nodes: int, pinned: bool = False) -> Draft:
        """The draft's first ``nodes`` nodes: a tree's nodes come parents first, so they are a tree, and a chain
        where they are one; a chain's first tokens. What a drafter that ranks its nodes (``Drafter.ranked``) would
        have drafted with that budget. Its ``pinned`` nodes ride along where ``pinned`` says to keep them, with the
        nodes they hang from, and are dropped where it does not, even where every ranked node is kept: their width
        costs as much beside a whole tree as beside a cut one."""
        ranked = len(self.token_ids) - self.pinned
        if nodes >= ranked and (pinned or not self.pinned):
            return self
        nodes = min(nodes, ranked)
        if pinned and self.pinned:
            tree, first = self.token_tree(), len(self.token_ids) - self.pinned
            keep = set(range(nodes))
            for node in range(first, len(self.token_ids)):
                keep.update(tree.path_to(node))
            cut, old = tree.kept([i in keep for i in range(len(self.token_ids))])
            return replace(self, token_ids=list(cut.tokens), parents=None if cut.is_chain() else cut.parents,
                           sources=tuple(self.sources[i] for i in old) if self.sources is not None else None,
                           pinned=sum(i >= first for i in old))
        q, q_probs = self.q[:nodes] if self.q is not None else None, self.q_probs[:nodes] if self.q_probs else None
        sources = self.sources[:nodes] if self.sources is not None else None
        parents = self.parents[:nodes] if self.parents is not None else None
        if parents is not None and all(parent == i - 1 for i, parent in enumerate(parents)):
            parents = None
        return replace(self, token_ids=self.token_ids[:nodes], q=q, q_probs=q_probs, sources=sources, parents=parents,
                       pinned=0, graft_match=0)

    def first_branch(self) -> Draft:
        """A tree draft's first branch (the first child at every node) as a chain: what a verifier that takes
        chains only (one under a grammar) verifies. A copying drafter's first branch is the chain it would
        have drafted."""
        tree = self.tree
        if tree is None:
            return self
        return replace(self, token_ids=[tree.tokens[node] for node in tree.first_branch()], parents=None,
                       sources=None)


Replay = Callable[[int], tuple[int, ...]]  # k -> the widths of the forwards a fixed k would have used so far


class Drafter(Protocol):
    """All that the verifier (:mod:`decode_tui.core.strategies.speculative`) needs of a drafter: no strategy asks
    which drafter it holds."""

    kind: str  # who drafts, as its mode's DrafterSpec.kind says and ``draft_proposed.drafter`` shows it
    source: TokenSource  # what its tokens are called once kept: its DrafterSpec.source, ``draft`` or ``lookup``
    # The most nodes a draft tree may have (one verification's width); 0: this drafter drafts chains.
    tree_budget: int
    # It learns from the target's logits (token recycling): the verifier hands it every forward's, through
    # observed, the prompt's positions' too.
    learns: bool

    @property
    def free_to_ask(self) -> bool:
        """Asking it for a draft runs no forward (it copies from the text): a stretch of plain steps may ask at every
        step, and it has no cost c to time against a target step."""
        ...

    @property
    def ranked(self) -> bool:
        """Its tree's nodes come best first (token recycling grows its template best-first): the first n of them are
        the tree it would draft with a budget of n, so the adaptive policy may verify only as many as pay on this
        device (:meth:`Draft.cut`)."""
        ...

    @property
    def stops_itself(self) -> bool:
        """It ends a draft where it is unsure of its next token, so the adaptive policy need only choose whether to
        draft (a draft model with a confidence cut-off)."""
        ...

    def propose(self, context: list[int], k: int, processors: list[tuple[Stage, LogitsProcessor]], greedy: bool,
                generator: torch.Generator | None) -> Draft:
        """Up to ``k`` tokens that might follow ``context`` (possibly none)."""
        ...

    def rollback(self, confirmed: int) -> None:
        """Forget everything after the first ``confirmed`` context tokens."""
        ...

    def observed(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        """Where it ``learns``: the target read ``tokens`` and gave ``logits`` [n, V] after each (the prompt's
        positions at the prefill, every verification's fed tokens, every plain step's pending one)."""
        ...

    def prefilled(self, context: list[int], cache: Cache) -> None:
        """The target has just put the keys and values of ``context`` in ``cache``; a drafter may copy what it can
        use of them (it must copy: the target's cache moves on)."""
        ...

    def draft_length(self, params: DraftParams) -> int:
        """The most tokens a round drafts under ``params`` (:meth:`~decode_tui.core.params.DraftParams.length`)."""
        ...

    def tune(self, params: DraftParams) -> None:
        """Take new settings between rounds (a front end changed them mid-run)."""
        ...

    def replay(self, transcript: Transcript) -> Replay | None:
        """What each fixed draft length would have fed the target so far in this run, computed exactly from the
        text (:mod:`.replay`), for the adaptive policy; None where drafting cannot be replayed for free (a draft
        model's drafts, prompt lookup's trees): the policy probes instead."""
        ...

    def time_step(self, context: list[int], processors: list[tuple[Stage, LogitsProcessor]]) -> float:
        """A draft step's seconds, before the first round (0 where drafting runs no forward)."""
        ...

    def close(self) -> None:
        """The run is over: give back what it holds for the run (a pooled cache)."""
        ...


# A draft token the draft gives less than this probability has its runner-up drafted beside it, when the draft
# may be a tree: the draft is unsure there, and the target often takes the second choice.
RUNNER_UP_BELOW = 0.8


class ModelDrafter:
    """A smaller (or quantised, or identical) model that drafts token by token from its own KV cache."""

    kind = "model"
    source: TokenSource = "draft"
    free_to_ask = False
    learns = False
    ranked = False  # its runner-ups join where the draft is unsure, not best first

    def __init__(self, model: PreTrainedModel, vocab_size: int, confidence_threshold: float = 0.4,
                 eos_token_ids: frozenset[int] = frozenset(), target_kv: torch.dtype | None = None,
                 tree_budget: int = 0, run_ahead: bool = False) -> None:
        self.model = model
        # Queue each draft step's pass before the last drafted token is read back (off by default); see propose.
        self.run_ahead = run_ahead
        # Above 0, under greedy verification: where the draft is unsure of its token, its runner-up joins the
        # draft as a sibling leaf, up to this many nodes in all (EAGLE-2's dynamic draft tree, its simplest
        # form: one extra candidate per unsure position, never drafted on from).
        self.tree_budget = tree_budget
        # A draft made from the target (DraftModel.target_kv): the dtype its keys and values are kept in.
        self.target_kv = target_kv
        # The run's target cache, once the draft took its keys and values of the prompt (prefilled): a draft that
        # skipped tokens (plain steps) takes theirs from it too, instead of feeding them through itself.
        self.target_cache: Cache | None = None
        # A drafted end-of-text token ends the draft: nothing after it can reach the output (transformers'
        # assistant stops there too, its generate having the same stopping criteria).
        self.eos_token_ids = eos_token_ids
        self.vocab_size = vocab_size  # logits are sliced to the vocabulary shared with the target
        # Stop drafting once the draft itself gives its token less than this probability: such a token is
        # likely rejected, and what follows it is wasted work (transformers' assistant_confidence_threshold).
        self.confidence_threshold = confidence_threshold
        self.cache = new_cache(model, rollback=True)
        self.cached: list[int] = []  # the tokens whose keys and values the cache holds, in order

    def propose(self, context: list[int], k: int, processors: list[tuple[Stage, LogitsProcessor]], greedy: bool,
                generator: torch.Generator | None) -> Draft:
        if k < 1:
            return Draft([])
        device = self.model.device
        # Reuse the cache as far as it agrees with the context, at least one token short of it (the last
        # one must be fed to get logits). Checked rather than assumed: the same drafter may serve a new
        # run (a restart, another prompt), whose context shares little or nothing with the last one.
        same = common_prefix(self.cached, context[:-1])
        rollback(self.cache, same)
        if len(context) - 1 - same > 1 and self._take_from_target(same, len(context) - 1):
            same = len(context) - 1  # what it skipped is in: it is fed the pending token alone, as in a step
        ids = on_device([context], device)  # [1, T]
        tokens: list[int] = []
        q_probs: list[float] = []
        qs = []
        stopped = None
        runners_up: list[tuple[int, int, float]] = []  # (chain position, token, q) of the siblings to add
        with_runners_up = greedy and self.tree_budget > 0
        # In fp32 whatever the draft computes in (a quantised draft gives bf16): q must be the distribution drawn from.
        first_pass = isinstance(self.cache, StaticKV) and not self.cache.prefilled
        logits = forward(self.model, ids[:, same:], self.cache)[:, -1, : self.vocab_size].float()  # [1, V]
        fed = len(context) - same
        self.cached = list(context)
        if first_pass:  # a draft model's own prefill, done: its step's graphs next
            self._prepare_graphs()
        forwards = 1
        # With run_ahead, the next draft step's pass is queued before this token is read back, as greedy
        # decoding's steps are on a GPU (see autoregressive): the device computes it while the host reads the
        # token and decides whether to go on. But where the draft then stops (an end-of-text token, an unsure
        # token), that pass was for nothing unless the token is accepted: a whole draft step, where the overlap
        # saves a little host time a step. Measured on a GPU, the in-order loop drafted faster on every prompt
        # (BENCHMARKS.md, "Each mode on a GPU"), so by default the loop stays in order, on every device.
        for i in range(k):
            q = torch.softmax(processed(processors, ids, logits), dim=-1)  # [1, V]
            if with_runners_up:
                top = q[0].topk(2)  # the token and its runner-up, in one copy
                token = top.indices[:1]
                copy = HostCopy([top.indices, top.values])
            else:
                token = torch.argmax(q, -1) if greedy else torch.multinomial(q, 1, generator=generator).view(1)
                copy = HostCopy([token, q[0].gather(0, token)])  # one copy per draft token
            ids = torch.cat([ids, token.view(1, 1)], dim=1)  # [1, T + i + 1]
            more = i + 1 < k
            ahead = self.run_ahead and more
            if ahead:
                logits = forward(self.model, token.view(1, 1), self.cache)[:, -1, : self.vocab_size].float()
                forwards += 1
            if with_runners_up:
                token_id, second, q_prob, q_second = copy.wait()
                if q_prob < RUNNER_UP_BELOW and len(tokens) + len(runners_up) + 2 <= self.tree_budget:
                    runners_up.append((i, int(second), q_second))
            else:
                token_id, q_prob = copy.wait()
            tokens.append(int(token_id))
            q_probs.append(q_prob)
            qs.append(q[0])
            if not more:
                break
            if ahead:
                self.cached.append(tokens[-1])  # its pass is queued already
            if tokens[-1] in self.eos_token_ids:
                stopped = "an end-of-text token in the draft"
            elif q_prob < self.confidence_threshold:
                stopped = f"draft q {q_prob:.2f} < {self.confidence_threshold:g}"
            if stopped is not None:
                if ahead and device.type == "cuda":
                    # Waited for here, so the pass queued past the stop is timed as the draft's work, not as
                    # the verification's that would queue behind it (c and the adaptive policy read both).
                    torch.cuda.current_stream(device).synchronize()
                break
            if not ahead:
                logits = forward(self.model, token.view(1, 1), self.cache)[:, -1, : self.vocab_size].float()
                self.cached.append(tokens[-1])
                forwards += 1
        if runners_up:
            return replace(self._with_runners_up(tokens, q_probs, runners_up, forwards, stopped), fed=fed)
        return Draft(tokens, torch.stack(qs), q_probs=tuple(q_probs), forwards=forwards, stopped=stopped, fed=fed)

    @staticmethod
    def _with_runners_up(tokens: list[int], q_probs: list[float], runners_up: list[tuple[int, int, float]],
                         forwards: int, stopped: str | None) -> Draft:
        """The chain, then each runner-up as a leaf beside the chain's token at its position (the chain's
        nodes first, so a parent always comes before its children). Greedy verification only: a runner-up is
        not a draw from q, which the sampling rule needs of a drafted child."""
        parents = [*range(-1, len(tokens) - 1), *(position - 1 for position, _, _ in runners_up)]
        sources = ["the draft's choice"] * len(tokens) + ["the draft's runner-up"] * len(runners_up)
        return Draft([*tokens, *(t for _, t, _ in runners_up)], None,
                     q_probs=(*q_probs, *(q for _, _, q in runners_up)), forwards=forwards, stopped=stopped,
                     parents=tuple(parents), sources=tuple(sources))

    def prefilled(self, context: list[int], cache: Cache) -> None:
        """Follow the target onto its path, and take its keys and values of ``context`` if this draft was made from
        the target.

        A target whose passes replay as CUDA graphs (a pooled static cache on the ``graphs`` path) has the draft
        do the same: its steps and its catch-up after a verification replay graphs captured on a static cache of
        its own, rolled back by moving its end, through the one machinery of :mod:`~decode_tui.core.execution.forward`.
        A draft that launches a few hundred kernels a step from Python would otherwise cost many target steps on
        a GPU. The draft's first pass over a prompt is eager, as the target's is; its step's graphs are
        captured right after it (:meth:`_prepare_graphs`) and kept with its pooled cache for the next run.

        Such a draft has the target's attention layers (or its first ones) with approximate weights, so the
        target's keys and values are what its own approximate; starting from them skips the draft's prefill,
        which on a CPU costs more than the draft saves on a short answer (the int4 draft's prefill of a 49-token
        prompt took 1.8 target steps). Output is unchanged either way (the target verifies every draft token);
        the draft's guesses may change, rarely, and for the better. QuantSpec (Tiwari et al., 2025) shares one
        cache between a 4-bit self-draft and its target the same way. The draft computes its own keys and
        values for what it drafts; those of tokens it skipped (plain steps) it takes from the target too
        (:meth:`_take_from_target`)."""
        self.target_cache = None
        if isinstance(cache, StaticKV) and cache.path == "graphs":
            self._take_static(cache.max_len)
        if self.target_kv is None or cache.get_seq_length() < len(context):
            return
        layers = self._target_layers(cache, 0, len(context))
        if layers is None:  # the draft prefills itself
            return
        mine = self.cache if isinstance(self.cache, StaticKV) else new_cache(self.model, rollback=True)
        if isinstance(mine, StaticKV):
            mine.move_end(0)  # written in place: its graphs read it where it is
        self._append(mine, layers)
        if isinstance(mine, StaticKV):
            mine.prefilled = True  # the prompt is in: the next pass is a step, replayed
        self.cache, self.cached = mine, list(context)
        self.target_cache = cache
        self._prepare_graphs()

    def _take_from_target(self, start: int, end: int) -> bool:
        """Append the target's keys and values of positions ``start`` to ``end`` to the draft's cache, which
        holds ``start`` positions; False (nothing done) where this draft does not take the target's.

        After plain steps a draft has skipped the tokens they emitted, and fed through itself they were a
        catch-up as wide as the stretch (on a GPU an eager pass, or a graph captured for that width): most of what
        a probe after a stretch cost, and why the adaptive policy spaces its probes out. The target's cache holds
        them already (everything but the pending token, between rounds), and a draft made from the target
        approximates exactly those keys and values, as it does the prompt's (:meth:`prefilled`): a copy instead."""
        layers = None if self.target_cache is None else self._target_layers(self.target_cache, start, end)
        if layers is None:
            return False
        self._append(self.cache, layers)
        return True

    def _target_layers(self, cache: Cache, start: int, end: int) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """The target's keys and values of positions ``start`` to ``end`` in each of the draft's layers (the
        target's first ones); None where this draft does not take the target's, or a layer does not hold every
        position's keys (a sliding window, linear attention)."""
        if self.target_kv is None:
            return None
        layers = []
        for i in range(self.model.config.num_hidden_layers):
            keys, values = getattr(cache.layers[i], "keys", None), getattr(cache.layers[i], "values", None)
            if not (isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor) and keys.shape[-2] >= end):
                return None
            layers.append((keys[:, :, start:end], values[:, :, start:end]))
        return layers

    def _append(self, cache: Cache, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Write ``layers``' keys and values after what ``cache`` holds, in the draft's dtype."""
        assert self.target_kv is not None
        for i, (keys, values) in enumerate(layers):
            cache.update(keys.to(self.target_kv, copy=True), values.to(self.target_kv, copy=True), i)

    def _prepare_graphs(self) -> None:
        """Capture now the draft's two usual passes, so no round pays for a capture: a step (one token), and
        the catch-up after a round whose drafts were all accepted (the last drafted token and the target's
        extra one); after a rejection the catch-up is the target's token alone, a step. After plain steps a
        draft made from the target takes the skipped tokens' keys and values from it (:meth:`_take_from_target`)
        and is fed the pending token alone; another model's catch-up is as wide as the tokens skipped, captured
        when first met (or run eagerly past 21)."""
        if isinstance(self.cache, StaticKV) and self.cache.prefilled:
            for width in (1, 2):
                prepare(self.model, self.cache, width, keep=1)

    def _take_static(self, size: int) -> None:
        """A pooled static cache of ``size`` positions for the draft (the target's size: the same prompt, tokens
        and longest draft), in place of its plain one; kept across runs of that size."""
        if isinstance(self.cache, StaticKV) and self.cache.max_len >= size:
            return
        release(self.cache)
        self.cache, self.cached = new_cache(self.model, graphs=True, max_len=size), []

    def close(self) -> None:
        release(self.cache)  # a pooled static cache serves the next run's draft

    def observed(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        pass  # it learns nothing from the target

    def rollback(self, confirmed: int) -> None:
        if len(self.cached) > confirmed:
            rollback(self.cache, confirmed)
            del self.cached[confirmed:]

    def time_step(self, context: list[int], processors: list[tuple[Stage, LogitsProcessor]]) -> float:
        """A draft step's seconds, as a round's draft pays it per token, timed before the run's first round (the
        adaptive policy's c before anything is drafted). The first draft of one token is not timed: it pays what
        the first round would have once (the draft's own prefill, or taking the target's keys and values, and
        capturing its graphs); the second feeds the last token alone. Both are rolled back; greedy, so the run's
        random stream is untouched."""
        self.propose(context, 1, processors, True, None)
        started = time.perf_counter()
        self.propose(context, 1, processors, True, None)
        seconds = time.perf_counter() - started
        self.rollback(len(context) - 1)
        return seconds

    @property
    def stops_itself(self) -> bool:
        return self.confidence_threshold > 0

    def replay(self, transcript: Transcript) -> Replay | None:
        return None  # a draft model's drafts cost its forwards to replay

    def draft_length(self, params: DraftParams) -> int:
        return params.length("num_draft_tokens")

    def tune(self, params: DraftParams) -> None:
        self.confidence_threshold = params.confidence_threshold  # the draft length is the verifier's to choose
        self.tree_budget = params.tree_budget or 0
