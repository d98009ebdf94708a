"""A draft model as a drafter: a smaller (or quantised, or identical) model that drafts token by token from its own
KV cache, and reports its distributions q.

The drafter keeps its KV cache as a cache of a *prefix of the context*; after verification the verifier tells it how
long the confirmed prefix is and it rolls back to it. A draft made from the target (quantised, or its first layers:
:mod:`.target_drafts`) starts from the target's own keys and values of the prompt instead of computing its own, and
takes those of tokens it skipped (plain steps) from the target too.

It knows its model, its cache and the Drafter protocol (:mod:`.drafters`); nothing of acceptance or of the policy.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from ..choosing.sampling import processed
from ..execution.forward import StaticKV, forward, new_cache, prepare, release, rollback
from ..execution.transfers import HostCopy, on_device
from ..record.path import common_prefix
from .drafters import Draft, Replay

if TYPE_CHECKING:
    from transformers import Cache, LogitsProcessor, PreTrainedModel

    from ..params import DraftParams
    from ..record.events import Stage, TokenSource
    from ..record.transcript import Transcript


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
