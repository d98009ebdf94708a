"""Controls that product code keeps no switch for: the same thing built without a measured change.

A change that was measured and kept has no off switch in the package (docs/ARCHITECTURE.md, "Invariants"); its
speed is compared against the commit before it, in a ``git worktree``. Correctness tests still need the plain form
to compare against, and build it here from the package's own steps.
"""

from __future__ import annotations

from typing import Any

from decode_tui.core.drafting import target_drafts
from decode_tui.core.params import TargetDraft


def unfused_build(model: Any, draft: TargetDraft) -> Any:
    """``target_drafts.build`` without the fused layers: transformers' own norms, attention and MLP."""
    clone = target_drafts.tree_over(model, draft)
    if draft.bits is not None:
        target_drafts._quantise(clone, draft.bits)
    return clone.eval()
