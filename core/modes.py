"""Every decoding mode in one place: what the app, the command line and the lessons need to know of each.

A mode is one entry of :data:`MODE_SPECS`, so it cannot be half-added: the app's busy label and panel, the demo
prompt, the options that apply to it alone, whether and how it drafts, the lesson moments it can reach all come from
its entry (tests/test_every_mode.py walks every mode through every use). A drafting mode's entry names the function
that builds its drafter; core/run.py runs every drafting mode through the one speculative strategy.

It knows names and words; nothing of models, strategies or widgets: a mode names its view by kind, and the app maps
the kind to its panel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .record.events import Mode, TokenSource

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
_DRAFT_OPTIONS = frozenset({"adaptive", "compare"})  # every drafting mode's; --tree-budget only where trees are drafted
_DRAFT_MOMENTS = frozenset({"first rejection", "resampled", "bonus"})  # a lesson can pause at these in any of them
_LOOKUP_MOMENTS = frozenset({"lookup miss", "second branch"})

Trees = Literal["no", "asked", "measured"]


@dataclass(frozen=True)
class DrafterSpec:
    """Who drafts in a drafting mode, as the run, the command line and the views need to know it.

    The drafter itself implements :class:`~decode_tui.core.drafting.drafters.Drafter`; ``build`` names the function
    that makes it for a run, as ``"module:function"`` taking a
    :class:`~decode_tui.core.drafting.context.DraftingContext`. It is a name, imported when a run starts, because
    this registry sits below the drafting layer (docs/ARCHITECTURE.md's layers)."""

    kind: str  # who drafts, as ``draft_proposed.drafter`` says it: ``model``, ``lookup``, or a new drafter's own word
    build: str  # "module:function" that builds the run's drafter
    copies: bool  # its tokens are copies of earlier text (q one-hot; kept tokens are ``lookup`` ones, "copied")
    length: Literal["num_draft_tokens", "num_pred_tokens"]  # the option that sets a round's most drafted tokens
    # no: chains only; asked: trees where --tree-budget asks; measured: trees by default, of the device's budget
    trees: Trees = "no"
    draft_model: bool = False  # it drafts with a draft model (--draft), which front ends check and load beforehand
    waiting: str = "waiting for the first draft"  # what its panel says before the first round

    @property
    def source(self) -> TokenSource:
        """What its tokens are called once kept: a copy's colour, or a model's guess's."""
        return "lookup" if self.copies else "draft"


@dataclass(frozen=True)
class ModeSpec:
    """One mode, as every front end needs to know it."""

    name: Mode
    working_on: str  # what a step does, for the app's busy label (before the first token it says the prefill)
    view: View
    # The prompt it opens on when none is given: one that shows what the mode is for. Drafting pays where the
    # target would say what the drafter guesses; beam search shows most where many short answers are good.
    demo_prompt: str
    drafter: DrafterSpec | None  # who drafts (none: the mode does not draft)
    samples: bool  # sampling's settings can apply (always in sample mode; where asked in the drafting modes, beam)
    options: frozenset[str]  # the command-line options (their field names) that apply to this mode only
    moments: frozenset[str]  # the lesson moments only some modes reach (lessons/__init__.py's EVENTS)


def drafting_options(drafter: DrafterSpec, *own: str) -> frozenset[str]:
    """A drafting mode's options: every drafting mode's, its draft length's, --tree-budget where it drafts trees,
    and its ``own``."""
    trees = {"tree_budget"} if drafter.trees != "no" else set()
    return _DRAFT_OPTIONS | {drafter.length, *own} | trees


_BUILDERS = "decode_tui.core.drafting.builders"
_MODEL = DrafterSpec("model", f"{_BUILDERS}:draft_model", copies=False, length="num_draft_tokens", trees="asked",
                     draft_model=True)
_PLD = DrafterSpec("lookup", f"{_BUILDERS}:prompt_lookup", copies=True, length="num_pred_tokens", trees="asked",
                   waiting="waiting for the first lookup")
_RECYCLE = DrafterSpec("recycle", "decode_tui.core.drafting.recycling:build", copies=False, length="num_pred_tokens",
                       trees="measured", waiting="waiting for the first recycled tree")
_LOOKAHEAD = DrafterSpec("lookahead", "decode_tui.core.drafting.lookahead:build", copies=False,
                         length="num_pred_tokens", trees="measured",
                         waiting="waiting for the first Jacobi window")
_SUFFIX = DrafterSpec("lookup", f"{_BUILDERS}:suffix", copies=True, length="num_pred_tokens", trees="measured",
                      waiting="waiting for the first lookup")

_SHIPPED: tuple[ModeSpec, ...] = (
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
             "honeydew, kiwi, lemon, mango, nectarine.", _MODEL, True,
             drafting_options(_MODEL, "draft", "draft_confidence"), _DRAFT_MOMENTS),
    ModeSpec("pld", "looking up a copy, then verifying it in one target forward", "lookup", CODE_EDIT_PROMPT,
             _PLD, True, drafting_options(_PLD, "max_ngram_size"), _DRAFT_MOMENTS | _LOOKUP_MOMENTS),
    ModeSpec("suffix", "drafting a tree from earlier text, then verifying it in one target forward", "lookup",
             CODE_EDIT_PROMPT, _SUFFIX, True, drafting_options(_SUFFIX, "history"), _DRAFT_MOMENTS | _LOOKUP_MOMENTS),
    ModeSpec("recycle", "growing a tree from the recycled guesses, then verifying it in one target forward", "lookup",
             # open-ended text, where nothing can be copied: what recycling is for
             "Write a short story about a lighthouse keeper who finds a message in a bottle.", _RECYCLE, True,
             drafting_options(_RECYCLE, "recycle_k", "recycle_state", "cold"),
             _DRAFT_MOMENTS | frozenset({"second branch"})),
    ModeSpec("lookahead", "one forward: a Jacobi iteration of the window, and the n-grams it harvested verified",
             "lookup", "Write a short story about a lighthouse keeper who finds a message in a bottle.", _LOOKAHEAD,
             True, drafting_options(_LOOKAHEAD, "lookahead_window", "lookahead_ngram", "lookahead_guesses"),
             _DRAFT_MOMENTS | frozenset({"second branch"})),
)

# Another package adds a mode through this entry-point group: each entry names a ModeSpec (whose drafter's build
# names its own module). It is read once, here, so that every table below holds the added modes too.
ENTRY_POINTS = "decode_tui.modes"


def _added() -> tuple[ModeSpec, ...]:
    from importlib.metadata import entry_points

    added = []
    for point in entry_points(group=ENTRY_POINTS):
        spec = point.load()
        if not isinstance(spec, ModeSpec):
            raise TypeError(f"the {ENTRY_POINTS} entry point {point.name} ({point.value}) is not a ModeSpec")
        added.append(spec)
    return tuple(added)


MODE_SPECS: dict[Mode, ModeSpec] = {spec.name: spec for spec in (*_SHIPPED, *_added())}

# Derived, for the places that ask one question of every mode.
MODES: tuple[Mode, ...] = tuple(MODE_SPECS)  # in the order `m` steps through them
DRAFTING_MODES: tuple[Mode, ...] = tuple(m for m in MODES if MODE_SPECS[m].drafter is not None)
COPYING_MODES: tuple[Mode, ...] = tuple(m for m in MODES if (d := MODE_SPECS[m].drafter) is not None and d.copies)
SAMPLING_MODES: tuple[Mode, ...] = tuple(m for m in MODES if MODE_SPECS[m].samples)
DRAFT_MODEL_MODES: tuple[Mode, ...] = tuple(m for m in MODES if (d := MODE_SPECS[m].drafter) is not None
                                            and d.draft_model)


def drafter_of(mode: str) -> DrafterSpec | None:
    """Who drafts in ``mode`` (None: it does not draft, or it is no mode)."""
    spec = MODE_SPECS.get(mode)
    return spec.drafter if spec is not None else None


def copied(kind: str) -> bool:
    """Whether a drafter of this kind (``draft_proposed.drafter``) copies text, as a view words it."""
    return any(d.copies for m in DRAFTING_MODES if (d := MODE_SPECS[m].drafter) is not None and d.kind == kind)


def modes_taking(option: str) -> tuple[Mode, ...]:
    """The modes a mode-only option applies to (empty for an option every mode takes)."""
    return tuple(m for m in MODES if option in MODE_SPECS[m].options)


MODE_ONLY_OPTIONS: frozenset[str] = frozenset().union(*(spec.options for spec in MODE_SPECS.values()))
