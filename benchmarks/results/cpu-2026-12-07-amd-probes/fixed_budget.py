"""Token recycling at fixed tree budgets, the adaptive policy off: target forwards for 96 tokens of each prompt.

With no policy nothing depends on a clock, so the counts are the same in every process: a change to what the
drafter proposes is compared here without the width prices' noise. From the repository root, the venv active:

    python fixed_budget.py STATE|cold BUDGETS [PROMPTS.jsonl]     # e.g. warm.pt 4,8,16 open.jsonl
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

from decode_tui.cli.flags import DtypeChoice, ModeChoice
from decode_tui.cli.loads import load_models
from decode_tui.cli.measure import read_prompts
from decode_tui.cli.options import DecodingOptions
from decode_tui.core.record.events import Finished
from decode_tui.core.run import Run


def main() -> None:
    state = None if sys.argv[1] == "cold" else Path(sys.argv[1])
    budgets = [int(b) for b in sys.argv[2].split(",")]
    prompts = read_prompts(Path(sys.argv[3] if len(sys.argv) > 3 else Path(__file__).parent / "open.jsonl"))
    greedy = DecodingOptions(max_new_tokens=96, dtype=DtypeChoice.bfloat16)
    lm, _ = load_models(greedy, max((p for _, p in prompts), key=len), greedy.for_mode(ModeChoice("greedy")).config(),
                        None)
    calls = [0]

    def counted(*_: object) -> None:
        calls[0] += 1

    hook = lm.model.register_forward_hook(counted)
    for budget in budgets:
        options = DecodingOptions(max_new_tokens=96, recycle_state=state, cold=state is None, tree_budget=budget,
                                  adaptive=False, dtype=DtypeChoice.bfloat16)
        config = options.for_mode(ModeChoice("recycle")).config()
        config = dataclasses.replace(config, draft=config.draft.repeatable())  # every run from the same matrix
        row = []
        for category, prompt in prompts:
            calls[0] = 0
            finished = None
            for event in Run(lm, prompt, config, None).events():
                finished = event
            assert isinstance(finished, Finished)
            row.append((category, calls[0] - 1, len(finished.token_ids)))  # less the prefill
        print(budget, row, flush=True)
    hook.remove()


if __name__ == "__main__":
    with torch.inference_mode():
        main()
