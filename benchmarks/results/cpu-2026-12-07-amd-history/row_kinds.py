"""What token recycling's rounds keep, by where the pending token's row came from: an earlier run only
(``history``), this run (``fresh``: its prompt or its answer so far), no row at all (``norow``: the back-off to the
text's commonest tokens), or a copy of an earlier match (``retrieved``). A fixed tree budget, the policy off (no clock
decides), 96 tokens of each of ``../cpu-2026-12-07-amd-probes/open.jsonl``'s prompts from a matrix file. From the
repository root with the venv active:

    python benchmarks/results/cpu-2026-12-07-amd-history/row_kinds.py STATE BUDGET
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from decode_tui.cli.flags import DtypeChoice, ModeChoice
from decode_tui.cli.loads import load_models
from decode_tui.cli.measure import read_prompts
from decode_tui.cli.options import DecodingOptions
from decode_tui.core.drafting import recycling
from decode_tui.core.record.events import DraftVerified
from decode_tui.core.run import Run

PROMPTS = Path(__file__).parent.parent / "cpu-2026-12-07-amd-probes" / "open.jsonl"


def main() -> None:
    state, budget = Path(sys.argv[1]), int(sys.argv[2])
    prompts = read_prompts(PROMPTS)
    options = DecodingOptions(max_new_tokens=96, recycle_state=state, tree_budget=budget, adaptive=False,
                              dtype=DtypeChoice.bfloat16)
    config = options.for_mode(ModeChoice("recycle")).config()
    config = dataclasses.replace(config, draft=config.draft.repeatable())  # the file is read, never written
    lm, _ = load_models(options, max((p for _, p in prompts), key=len), config, None)
    rounds: list[list[Any]] = []  # [kind, kept or None]
    read: set[int] = set()  # the tokens this run's forwards read
    propose, observed = recycling.RecyclingDrafter.propose, recycling.RecyclingDrafter.observed

    def proposing(self: recycling.RecyclingDrafter, context: list[int], *args: Any, **kwargs: Any) -> Any:
        draft = propose(self, context, *args, **kwargs)
        token = context[-1]
        kind = ("retrieved" if draft.retrieved else "norow" if self.matrix.row(token)[0] == recycling.EMPTY
                else "fresh" if token in read else "history")
        rounds.append([kind, None])
        return draft

    def observing(self: recycling.RecyclingDrafter, tokens: Any, logits: Any) -> None:
        read.update(int(t) for t in tokens)
        observed(self, tokens, logits)

    recycling.RecyclingDrafter.propose = proposing  # type: ignore[method-assign]
    recycling.RecyclingDrafter.observed = observing  # type: ignore[method-assign]
    for category, prompt in prompts:
        rounds.clear()
        read.clear()
        for event in Run(lm, prompt, config, None).events():
            if isinstance(event, DraftVerified):
                next(r for r in reversed(rounds) if r[1] is None)[1] = event.accepted
        kinds: dict[str, list[int]] = {}
        for kind, kept in rounds:
            counts = kinds.setdefault(kind, [0, 0, 0])  # rounds verified, tokens kept, rounds that kept none
            if kept is not None:
                counts[0] += 1
                counts[1] += kept
                counts[2] += kept == 0
        print(f"{category}: " + "; ".join(f"{kind} {n} rounds, {kept} kept ({kept / n:.2f} a round), {none} kept none"
                                         for kind, (n, kept, none) in kinds.items() if n), flush=True)


if __name__ == "__main__":
    main()
