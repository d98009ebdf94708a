"""What a mode's drafter is built from: the run's model, settings and prompt, handed to its entry's builder.

A drafting mode's entry in core/modes.py names a builder (``DrafterSpec.build``, ``"module:function"``); the run
calls it with a :class:`DraftingContext` and verifies whatever :class:`~decode_tui.core.drafting.drafters.Drafter` it
returns. It knows what a run offers a drafter; nothing of any drafter, nor of verifying.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..modes import MODE_SPECS
from ..params import DraftParams

if TYPE_CHECKING:
    from ..model.loading import LoadedModel
    from .draft_models import DraftModel
    from .drafters import Drafter
    from .suffix_drafting import SuffixHistory


@dataclass(frozen=True)
class DraftingContext:
    """Everything a run offers the drafter it builds."""

    lm: LoadedModel  # the target: its tokenizer, device and model, for a drafter that reads them
    params: DraftParams  # the drafting options (--num-pred-tokens, --draft, ...), as the run starts
    eos_token_ids: frozenset[int]
    # context[:prompt_length] of every propose() is the prompt as the model reads it (chat template included); what
    # follows is this run's output (a branch's kept and forced tokens among it)
    prompt_length: int
    tree_budget: int  # the most nodes one verification reads (0: chains), the run's choice for this mode and device
    draft: DraftModel | None  # the draft model, for a mode whose drafter drafts with one (DrafterSpec.draft_model)
    history: SuffixHistory  # earlier outputs a drafter may copy from (this session's runs, --history files)
    # Tells the user something as the run starts (``started.notes``): what a drafter that keeps state between runs
    # starts from, in words.
    say: Callable[[str], None] = lambda _note: None


Builder = Callable[[DraftingContext], "Drafter"]


def builder(mode: str) -> Builder:
    """The function that builds ``mode``'s drafter, imported from its entry's name; a UsageError that names the
    mode and the entry where it cannot be (a contributor's typo says so at the first run, not as a KeyError)."""
    spec = MODE_SPECS[mode].drafter
    if spec is None:
        raise UsageError(f"--mode {mode} does not draft: its entry in core/modes.py has no drafter.")
    module, _, name = spec.build.partition(":")
    try:
        build: Builder = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--mode {mode}'s drafter cannot be built: its entry names {spec.build!r}, which does not "
                         f"import ({type(exc).__name__}: {exc}). Name a function as 'module:function'.") from None
    return build
