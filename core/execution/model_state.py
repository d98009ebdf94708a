"""What this process has learned about one loaded model, kept on the model so that it lives and dies with it.

Every per-model memory of the execution machinery sits in one :class:`ModelState`: the pooled static caches and
their graphs, why capture failed, whether float masks are exact, the measured widths and verification times, the
CPU's tree budget and thread count, the cache kept for a branch, and a background compile's hooks. On the model
itself, not in a weak-keyed table: a background compile's compiled forward holds the model's bound method, which
would keep a table's weak key alive for ever (and a let-go model's device memory with it); on the model, the two
form a cycle that dies with it. A copy of the model (an int4 or int8 draft made from it) starts with a state of its
own.

It knows nothing of what the fields mean: each module that keeps a memory here reads and writes its own field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

ATTR = "_decode_tui_state"


class Background(Protocol):
    """A background compile of one model (:mod:`decode_tui.core.execution.background_compile`), as the graph
    replays see it."""

    def upgrade(self, model: Any, cache: Any, key: tuple[int, ...], captured: Any, input_ids: Any) -> Any:
        """The compiled pass for ``key`` where it is ready and agrees with ``captured`` on ``input_ids``, else
        ``captured``."""

    def ask(self, model: Any, shape: tuple[int, int, int, int]) -> None:
        """The foreground captured ``shape``: compile it too."""


@dataclass(eq=False)
class ModelState:
    """One model's memories; each field belongs to the module named beside it."""

    pool: dict[tuple[int, str, int], list[Any]] = field(default_factory=dict)  # forward: static caches by size
    graph_failure: str | None = None  # forward: why capturing a graph failed, once it has
    graph_pool: Any = None  # forward: the memory pool its CUDA graphs share
    exact_float_mask: bool | None = None  # float_mask: whether float masks give its logits to the last bit
    width_costs: Any = None  # widths: the measured seconds of its forwards by width
    verify_times: dict[tuple[bool, int], dict[int, Any]] = field(default_factory=dict)  # widths
    tree_budget: int | None = None  # tree_budget: the CPU's nodes per verification, once timed
    threads: Any = None  # threads: the CPU's thread count for its forwards, once timed
    kept: Any = None  # prefix_cache: the last run's cache, kept for a branch
    background: Background | None = None  # background_compile: set by its start(), never on import

    def __deepcopy__(self, memo: dict[int, Any]) -> ModelState:
        return ModelState()  # a copy of the model learns its own


def state_of(model: Any) -> ModelState:
    """``model``'s state, made on first use."""
    state: ModelState = vars(model).setdefault(ATTR, ModelState())
    return state
