"""How many nodes a draft tree may have on this device, where the user gives no ``--tree-budget``: measured.

A tree of B nodes is verified by one forward over B + 1 positions (the pending token and every node). On a GPU
such a forward of a launch-bound model costs about one step up to a few dozen positions, so there the budget is
the widest offered, and timing the device's asynchronous kernels would need a wait of its own. On a CPU every
position costs more, by how much depends on the matrix library, the cores and the model. There the budget is the
widest whose forward, timed on this model once a process (a few forwards, in the warm-up), costs at most TREE_COST
one-position forwards: a tree round emits at least one token, and on input-grounded prompts trees give several
tokens per forward (BENCHMARKS.md, "Each mode on the CPU"), so a round costing two steps still pays where the tree
does.

The verification widths' own costs (:mod:`.widths`) are timed here too, in the same warm-up (:func:`time_widths`),
and the budget's own forwards are kept there: they price the trees wider than the widths the verifier pads.

Written by hand, like the verification widths (:mod:`decode_tui.core.execution.widths`): no library measures this. It
knows forwards and the clock; nothing of trees, drafters or events.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from ..model.loading import context_length
from .forward import new_cache, rollback
from .model_state import state_of
from .widths import MAX_WIDTH, width_costs

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# Budgets offered, narrowest first: a tree of b nodes is fed with the pending token, b + 1 positions, a power of two.
# Matrix units take a forward's rows in tiles (AMX 16 rows, a GPU's tensor cores 8 or 16), so one position past a
# tile costs a tile of its own: a 33-position forward costs far more than a 32-position one (BENCHMARKS.md, "Tree
# budgets of a power of two positions").
CANDIDATES = (3, 7, 15, 31, 63)
TREE_COST = 2.0  # a tree's forward may cost at most this many one-position forwards
CONTEXT = 64  # tokens before the timed forwards: attention reads them, as it reads a prompt
TRIES = 2  # forwards of each width; the lower counts (a first one may pay a kernel's warm-up)

def tree_budget(model: PreTrainedModel, timer: Callable[[int], float] | None = None) -> int:
    """Nodes per verification for ``model`` on its device: the widest of CANDIDATES off the CPU; on the CPU the
    widest whose forward costs at most TREE_COST one-position forwards (the narrowest where none does), measured
    once per model and process. ``timer(width)``: seconds of one forward of ``width`` positions (by default, timed
    on the model)."""
    if model.device.type != "cpu":
        return CANDIDATES[-1]
    known = state_of(model).tree_budget
    if known is not None and timer is None:
        return known
    room = (context_length(model) or CONTEXT + CANDIDATES[-1] + 1) - CONTEXT  # a model may read few positions
    offered = [b for b in CANDIDATES if b + 1 <= room]
    if not offered:  # too short a context to measure in: the narrowest
        return CANDIDATES[0]
    time_width = timer or forward_timer(model)
    seconds = {1: min(time_width(1) for _ in range(TRIES))}
    budget = offered[0]
    for wider in offered:  # narrowest first, up to the first that costs too much: a forward never gets cheaper
        seconds[wider + 1] = min(time_width(wider + 1) for _ in range(TRIES))
        if seconds[wider + 1] > TREE_COST * seconds[1]:
            break
        budget = wider
    if timer is None:
        state_of(model).tree_budget = budget
        # They price a ranked tree's verifications wider than the verifier pads (:meth:`~.widths.WidthCosts.price`).
        width_costs(model).time_wide(seconds)
    return budget


def widths_to_time(model: PreTrainedModel) -> bool:
    """Whether :func:`time_widths` has anything to time on ``model``: a width a CPU's verifier may pad to that is
    short of its tries (or whose times went stale), and positions enough to time it after CONTEXT."""
    room = context_length(model)
    return (room is None or room >= CONTEXT + MAX_WIDTH + 1) and width_costs(model).forget_stale() > 0


def time_widths(model: PreTrainedModel) -> int:
    """Time the verification widths a CPU's verifier may pad to (:meth:`~.widths.WidthCosts.fill`) on ``model``
    now, in the warm-up, so that the run never pays to time them; the forwards timed. Asked where
    :func:`widths_to_time` says so."""
    return width_costs(model).fill(forward_timer(model))


def forward_timer(model: PreTrainedModel) -> Callable[[int], float]:
    """Times a forward of ``width`` positions after CONTEXT cached ones, each cropped back after it."""
    cache = new_cache(model, rollback=True)  # croppable, a sliding-window model's too
    ids = torch.zeros((1, CONTEXT), dtype=torch.long, device=model.device)  # [1, CONTEXT]
    with torch.inference_mode():
        model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)

    def timed(width: int) -> float:
        feed = torch.zeros((1, width), dtype=torch.long, device=model.device)  # [1, width]
        with torch.inference_mode():
            started = time.perf_counter()
            model(input_ids=feed, cache=cache, use_cache=True, logits_to_keep=width)
            seconds = time.perf_counter() - started
        rollback(cache, CONTEXT)
        return seconds

    return timed
