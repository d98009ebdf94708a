"""The target's side of a speculative run: every forward the verifier asks of it, and how each one runs.

A strategy asks for a prefill, a chain's verification, a tree's verification, a timed plain step and a rollback;
this object decides how each runs: on the plain path or a static cache (compiled passes, or CUDA graphs captured
ahead), a chain padded to the width that pays (one width on a static cache, so that one graph serves every round;
on a CPU the width measured cheapest, :mod:`.widths`), a tree through its attention mask (padded likewise), and the
cache kept at the end for a branch of the run (:mod:`.prefix_cache`). The strategy never branches on any of it.

It knows forwards, caches, graphs and widths; nothing of drafts' origins, acceptance or events.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from ..model.loading import context_length
from ..record.path import Path
from ..record.transcript import Transcript
from ..token_tree import TokenTree
from .forward import forward, prepare, rollback
from .prefill import prefill
from .prefix_cache import keep, take
from .transfers import on_device, to_host
from .tree_attention import keep_path, tree_forward
from .widths import remembered_times, width_costs

if TYPE_CHECKING:
    from transformers import Cache, PreTrainedModel

    from ..record.events import TokenEmitted
    from .widths import Times


def plain_step(model: PreTrainedModel, cache: Cache, context: list[int], repeat: int) -> float:
    """A plain target step's seconds: one forward of the pending token, as greedy decoding runs it, then rolled
    back (it decides nothing). The run's c and a verification's cost are against this measured step, not one
    inferred from verifications. On a graph path the first call may capture its graph, so the last is timed."""
    confirmed = len(context) - 1  # the cache holds everything but the pending token
    feed = on_device([context[-1:]], model.device)  # [1, 1]
    seconds = 0.0
    for _ in range(repeat):
        started = time.perf_counter()
        to_host([forward(model, feed, cache)[0, -1, :1]])  # the copy waits for the device
        seconds = time.perf_counter() - started
        rollback(cache, confirmed)
    return seconds


class VerifyForward:
    """The verification's forward, fed ``[pending, d_1 .. d_k]`` (or a tree's nodes) and padded with copies of the
    pending token where a wider feed pays: its logits at the k + 1 real positions.

    The fast paths (``static``) pad to the longest draft, so that one compiled graph (or captured CUDA graph)
    serves every round whatever the drafter proposed; on a CPU the plain path pads to the width that costs the
    least (:mod:`.widths`: a short forward may cost more than a wider one), and times each width it feeds. The
    pads come after the real positions, which attend only to what precedes them, and the rollback after the round
    forgets them with the rejected drafts. No pad passes the static cache's end or the model's last position: the
    real positions always fit.
    """

    def __init__(self, model: PreTrainedModel, static: bool, max_len: int) -> None:
        self.model, self.static, self.max_len = model, static, max_len
        self.widths = width_costs(model) if model.device.type == "cpu" and not static else None
        self.room = context_length(model) or sys.maxsize  # positions the model can read

    def __call__(self, cache: Cache, pending: int, drafted: list[int], confirmed: int,
                 num_draft_tokens: int) -> torch.Tensor:
        real = [pending, *drafted]
        if self.static:
            width = num_draft_tokens + 1 if confirmed + num_draft_tokens + 1 <= self.max_len else 0
        else:
            width = self.widths.width_for(len(real), self.room - confirmed) if self.widths is not None else 0
        feed = on_device([real + [pending] * max(0, width - len(real))], self.model.device)  # [1, W]
        started = time.perf_counter()
        logits = forward(self.model, feed, cache, keep=feed.shape[1])[0, : len(real)]  # [k+1, V]
        if self.widths is not None:
            self.widths.observe(feed.shape[1], time.perf_counter() - started)
        return logits

    def tree(self, cache: Cache, pending: int, tree: TokenTree, confirmed: int, tree_width: int) -> torch.Tensor:
        """A tree's verification: on the graph path padded to ``tree_width`` rows (one graph for every tree), on
        a CPU's plain path to the width measured cheapest, as a chain's is, and timed for it."""
        if self.widths is None:  # a static cache's graph, or off the CPU a plain forward of the tree as it is
            return tree_forward(self.model, cache, pending, tree, tree_width if self.static else None)
        width = self.widths.width_for(1 + len(tree), self.room - confirmed)
        started = time.perf_counter()
        logits = tree_forward(self.model, cache, pending, tree, width)
        self.widths.observe(width, time.perf_counter() - started)  # width_for never gives fewer rows than asked
        return logits


class Target:
    """The target model for one speculative run: its cache (a branch's parent's where they share a prefix), and
    each forward the verifier asks for, counted on the transcript.

    ``fast``: a static cache with compiled passes; ``graphs``: a static cache with the passes captured as CUDA
    graphs of the eager model (:mod:`.forward`). ``max_len``: the positions the cache must hold. ``tree_width``: the
    widest tree a verification feeds (the drafter's budget and the pending token).
    """

    def __init__(self, model: PreTrainedModel, transcript: Transcript, context: Sequence[int], *, fast: bool,
                 graphs: bool, max_len: int, reuse: bool, tree_width: int) -> None:
        self.model, self.transcript, self.fast, self.graphs = model, transcript, fast, graphs
        self.static, self.max_len, self.tree_width = fast or graphs, max_len, tree_width
        self.cache, self.held = take(model, context, reuse=reuse, rollback_ready=True, fast=fast, graphs=graphs,
                                     max_len=max_len)
        self._verify = VerifyForward(model, self.static, max_len)

    @property
    def steps_plainly(self) -> bool:
        """Whether a stretch with nothing to draft may run as one-token steps: not on the compiled path, where
        every verification is padded to one compiled width and a one-token pass would be a new shape to compile
        mid-run (there such a round stays a padded verification)."""
        return not self.fast

    def forward_prices(self, nodes: int) -> dict[int, float]:
        """Seconds of a verification's forward of 1 .. ``nodes`` drafted tokens (a tree's nodes), padded as it would
        be, where the warm-up timed them (a CPU's plain path; elsewhere none)."""
        widths = self._verify.widths
        prices = {n: widths.price(n + 1) for n in range(1, nodes + 1)} if widths is not None else {}
        return {n: price for n, price in prices.items() if price is not None}

    def times_by_k(self, context_length: int) -> Times:
        """What verifying each draft length cost this model after about ``context_length`` tokens, so far."""
        return remembered_times(self.model, context_length, padded=self.static)

    def prefill(self, context: list[int], path: Path | None,
                learn: Callable[[Sequence[int], torch.Tensor], None] | None = None,
                ) -> tuple[torch.Tensor, list[TokenEmitted]]:
        """The prompt and the path fed as one context: the next token's raw logits [1, V] and the path's tokens;
        ``learn`` gets the logits after the context's last positions (:func:`~.prefill.prefill`)."""
        return prefill(self.model, self.transcript, on_device([context], self.model.device), self.cache, path,
                       self.held, learn)

    def prepare(self, context_length: int, k: int, plain_steps: bool) -> None:
        """Capture now the graphs later rounds replay (no-ops off the graph path): a verification of ``k`` drafts,
        and with ``plain_steps`` a plain step's, so that no round pays for a capture."""
        if self.static and context_length + k + 1 <= self.max_len:
            prepare(self.model, self.cache, k + 1, keep=k + 1)
        if plain_steps:
            prepare(self.model, self.cache, 1, keep=1)

    def step_seconds(self, context: list[int]) -> float | None:
        """A plain step's measured seconds, what a draft's cost c divides by; None on the compiled path, where a
        new shape would mean a new compile (there the step is inferred instead)."""
        return None if self.fast else plain_step(self.model, self.cache, context, repeat=2 if self.graphs else 1)

    def verify_chain(self, context: list[int], drafted: list[int], num_draft_tokens: int) -> torch.Tensor:
        """[k+1, V]: the target's raw logits after the pending token (``context``'s last, not yet in the cache) and
        after each of the ``k`` drafted tokens; ``num_draft_tokens``: the longest draft, a static cache's width."""
        self.transcript.target_forwards += 1
        return self._verify(self.cache, context[-1], drafted, len(context) - 1, num_draft_tokens)

    def verify_tree(self, context: list[int], tree: TokenTree) -> torch.Tensor:
        """[1+n, V]: the target's raw logits after the pending token and after each of the tree's n nodes."""
        self.transcript.target_forwards += 1
        return self._verify.tree(self.cache, context[-1], tree, len(context) - 1, self.tree_width)

    def roll_back(self, confirmed: int, past: int, kept_nodes: Sequence[int] | None) -> None:
        """Keep the first ``confirmed`` positions: a tree's kept nodes (fed after ``past``) are moved first to where
        a chain's would be."""
        if kept_nodes and confirmed > past + 1:
            keep_path(self.cache, past, list(kept_nodes[: confirmed - past - 1]))
        rollback(self.cache, confirmed)

    def close(self, context: Sequence[int]) -> None:
        """Kept for a branch of this run (a pooled static cache goes back to its pool when none comes)."""
        keep(self.model, self.cache, context, rollback_ready=True, fast=self.fast, graphs=self.graphs)
