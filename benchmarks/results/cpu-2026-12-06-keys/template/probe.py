"""With ``online-flat.patch`` applied (``run.sh``'s shim on PYTHONPATH): the rank acceptance a recycle run measured by
its end (positions counted, the prior it gives, the count the template was last grown at, the template's first 8
nodes), cold and warm, on the story and on the demo's code edit (its first words, as the argument). The patch's
attributes are read with ``getattr``: without it the script has nothing to read.

    PYTHONPATH=SHIM python benchmarks/results/cpu-2026-12-06-keys/template/probe.py "In the following Python code, ..."
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import decode_tui.core.drafting.recycling as rc
from decode_tui.cli.flags import ModeChoice
from decode_tui.cli.loads import load_models, with_draft_model
from decode_tui.cli.options import DecodingOptions
from decode_tui.core.run import Run

GRAFT = Path(__file__).resolve().parents[2] / "cpu-2026-12-06-graft"
STORY = "Write a short story about a lighthouse keeper who finds a message in a bottle."
seen: list[tuple[Any, ...]] = []
closed = rc.RecyclingDrafter.close


def close(self: rc.RecyclingDrafter) -> None:
    ranks = getattr(self, "ranks")  # noqa: B009 - the patch's, absent from the code it patches
    seen.append((ranks.positions, [round(x, 3) for x in ranks.prior()], getattr(self, "_grown_at"),  # noqa: B009
                 self._template(10)[:8]))
    closed(self)


if __name__ == "__main__":
    rc.RecyclingDrafter.close = close  # type: ignore[method-assign]
    for state in (None, GRAFT / "warm.pt"):
        options = DecodingOptions(max_new_tokens=96, recycle_state=state, cold=state is None)
        config = options.for_mode(ModeChoice("recycle")).config()
        config = dataclasses.replace(config, draft=config.draft.repeatable())  # the matrix never written back
        for prompt in (STORY, sys.argv[1]):
            lm, draft = load_models(options, prompt, config, with_draft_model(config))
            for _ in Run(lm, prompt, config, draft).events():
                pass
            print("warm" if state else "cold", prompt[:30], seen[-1], flush=True)
