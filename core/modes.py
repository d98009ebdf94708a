"""Every decoding mode in one place: what the app, the command line and the lessons need to know of each.

A mode is one entry of :data:`MODE_SPECS`, so it cannot be half-added: the app's busy label and panel, the demo
prompt, the options that apply to it alone, whether and how it drafts, the lesson moments it can reach all come from
its entry (tests/test_every_mode.py walks every mode through every use). Which strategy runs it and which drafter it
builds stay where they run, in core/run.py.

It knows names and words; nothing of models, strategies or widgets: a mode names its view by kind, and the app maps
the kind to its panel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .record.events import MODES, Mode

View = Literal["candidates", "beam", "draft", "lookup"]  # what the app's panel shows for a mode

# What every front end decodes when the user gives no prompt.
DEMO_PROMPT = "Explain in three short sentences how a language model picks its next word."

# An edit of code that is in the prompt: the prompt-lookup demo (it copies from the prompt) and suffix drafting's
# (a task a pipeline repeats with small changes, which also copies from the prompt).
CODE_EDIT_PROMPT = (
    "In the following Python code, rename the variable `total` to `running_sum` everywhere. Return the whole "
    "code and nothing else.\n\n"
    "def summarise(values):\n"
    "    total = 0\n"
    "    count = 0\n"
    "    for value in values:\n"
    "        if value is None:\n"
    "            continue\n"
    "        total += value\n"
    "        count += 1\n"
    "    if count == 0:\n"
    "        return None\n"
    "    mean = total / count\n"
    "    print(f\"sum={total} count={count} mean={mean}\")\n"
    "    return total, count, mean\n"
)

_BEAM_OPTIONS = frozenset({"num_beams", "length_penalty", "early_stopping", "num_return_sequences"})
_DRAFT_OPTIONS = frozenset({"adaptive", "compare", "tree_budget"})  # every drafting mode's
_DRAFT_MOMENTS = frozenset({"first rejection", "resampled", "bonus"})  # a lesson can pause at these in any of them
_LOOKUP_MOMENTS = frozenset({"lookup miss", "second branch"})


@dataclass(frozen=True)
class ModeSpec:
    """One mode, as every front end needs to know it."""

    name: Mode
    working_on: str  # what a step does, for the app's busy label (before the first token it says the prefill)
    view: View
    # The prompt it opens on when none is given: one that shows what the mode is for. Drafting pays where the
    # target would say what the drafter guesses; beam search shows most where many short answers are good.
    demo_prompt: str
    drafter: Literal["model", "lookup"] | None  # who drafts: a draft model, a copy from the text, or none
    samples: bool  # sampling's settings can apply (always in sample mode; where asked in the drafting modes, beam)
    options: frozenset[str]  # the command-line options (their field names) that apply to this mode only
    moments: frozenset[str]  # the lesson moments only some modes reach (lessons/__init__.py's EVENTS)


MODE_SPECS: dict[Mode, ModeSpec] = {spec.name: spec for spec in (
    ModeSpec("greedy", "the next token's forward pass", "candidates", DEMO_PROMPT, None, False, frozenset(),
             frozenset()),
    ModeSpec("sample", "the next token's forward pass", "candidates", DEMO_PROMPT, None, True, frozenset(),
             frozenset()),
    ModeSpec("beam", "the next beam step (one forward over every beam)", "beam",
             "Suggest a name for a small coffee shop by the sea, and say why in one sentence.", None, True,
             _BEAM_OPTIONS, frozenset({"beam finished"})),
    ModeSpec("speculative", "drafting, then verifying the draft in one target forward", "draft",
             # a text the draft model agrees with: a list to repeat
             "Repeat this list exactly, one item per line: apple, banana, cherry, date, elderberry, fig, grape, "
             "honeydew, kiwi, lemon, mango, nectarine.", "model", True,
             _DRAFT_OPTIONS | {"draft", "num_draft_tokens", "draft_confidence"}, _DRAFT_MOMENTS),
    ModeSpec("pld", "looking up a copy, then verifying it in one target forward", "lookup", CODE_EDIT_PROMPT,
             "lookup", True, _DRAFT_OPTIONS | {"max_ngram_size", "num_pred_tokens"}, _DRAFT_MOMENTS | _LOOKUP_MOMENTS),
    ModeSpec("suffix", "drafting a tree from earlier text, then verifying it in one target forward", "lookup",
             CODE_EDIT_PROMPT, "lookup", True, _DRAFT_OPTIONS | {"num_pred_tokens", "history"},
             _DRAFT_MOMENTS | _LOOKUP_MOMENTS),
)}

# Derived, for the places that ask one question of every mode.
DRAFTING_MODES: tuple[Mode, ...] = tuple(m for m in MODES if MODE_SPECS[m].drafter is not None)
COPYING_MODES: tuple[Mode, ...] = tuple(m for m in MODES if MODE_SPECS[m].drafter == "lookup")
SAMPLING_MODES: tuple[Mode, ...] = tuple(m for m in MODES if MODE_SPECS[m].samples)


def modes_taking(option: str) -> tuple[Mode, ...]:
    """The modes a mode-only option applies to (empty for an option every mode takes)."""
    return tuple(m for m in MODES if option in MODE_SPECS[m].options)


MODE_ONLY_OPTIONS: frozenset[str] = frozenset().union(*(spec.options for spec in MODE_SPECS.values()))
