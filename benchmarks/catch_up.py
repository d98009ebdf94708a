"""Benchmark: a draft made from the target catching up after plain steps, by copy or through itself.

After the adaptive policy's plain steps, a draft model has skipped their tokens. A draft made from the target
takes their keys and values from the target's cache (``ModelDrafter._take_from_target``); the control feeds
them through the draft, as every draft did before, a catch-up as wide as the stretch. Both against greedy, on
the embedded model, warm runs alternated round by round (greedy, copy, control; then the reverse), each
variant's speed-up with its range, and the last run's rounds: context tokens fed to the draft, its ms, the
verification's ms.

    python benchmarks/catch_up.py [--prompts open-ended,code-edit] [--draft layers:10] [--repeats 3]
                                  [--new-tokens 128] [--device auto] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from decode_tui.core.drafting.draft_models import DraftModel, load_draft
from decode_tui.core.drafting.model_drafter import ModelDrafter
from decode_tui.core.model.embedded import pull
from decode_tui.core.model.loading import LoadedModel, load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.params import DecodeConfig, DraftParams
from decode_tui.core.record.events import DraftVerified, Finished
from decode_tui.core.run import Run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_vs_hf import PROMPTS, machine

COPY = ModelDrafter._take_from_target


def through_itself(self: ModelDrafter, start: int, end: int) -> bool:
    """The control: no copy, so the draft is fed what it skipped."""
    return False


def once(lm: LoadedModel, prompt: str, config: DecodeConfig, draft: DraftModel | None = None,
         ) -> tuple[Finished, list[tuple[int | None, float | None, float | None]]]:
    rounds, final = [], None
    for event in Run(lm, prompt, config, draft).events():
        if isinstance(event, DraftVerified):
            rounds.append((event.draft_fed, event.draft_s, event.verify_s))
        final = event
    assert isinstance(final, Finished)
    return final, rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="open-ended,code-edit")
    parser.add_argument("--draft", default="layers:10", help="a draft made from the target: int4, layers:N ...")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pull("smollm2")
    lm = load_model(resolve("smollm2"), device=args.device, dtype="auto")
    draft = load_draft(lm, args.draft)
    greedy = DecodeConfig(mode="greedy", max_new_tokens=args.new_tokens)
    adaptive = DecodeConfig(mode="speculative", max_new_tokens=args.new_tokens,
                            draft=DraftParams(draft=args.draft, adaptive=True))
    variants: dict[str, Callable[[ModelDrafter, int, int], bool] | None] = {
        "greedy": None, "copy": COPY, "through itself": through_itself}
    results: dict[str, Any] = {"machine": machine(), "device": str(lm.device), "draft": args.draft, "prompts": {}}
    for name in args.prompts.split(","):
        prompt = PROMPTS[name]
        once(lm, prompt, greedy)
        once(lm, prompt, adaptive, draft)  # warm-ups
        speeds: dict[str, list[float]] = {v: [] for v in variants}
        last: dict[str, Any] = {}
        for r in range(args.repeats):
            for variant in list(variants) if r % 2 == 0 else list(reversed(variants)):
                take = variants[variant]
                if take is not None:
                    ModelDrafter._take_from_target = take  # type: ignore[method-assign,assignment]
                final, rounds = once(lm, prompt, greedy) if take is None else once(lm, prompt, adaptive, draft)
                speeds[variant].append(final.tokens_per_s)
                last[variant] = rounds
        ModelDrafter._take_from_target = COPY  # type: ignore[method-assign]
        base = statistics.median(speeds["greedy"])
        row: dict[str, Any] = {"greedy_tok_s": speeds["greedy"]}
        for variant in ("copy", "through itself"):
            ratios = [s / base for s in speeds[variant]]
            row[variant] = {"speedup": statistics.median(speeds[variant]) / base, "range": [min(ratios), max(ratios)],
                            "tok_s": speeds[variant], "last_rounds": last[variant]}
            shown = [(fed, round(d * 1e3), round(v * 1e3)) for fed, d, v in last[variant] if d is not None
                     and v is not None]
            print(f"{name} {variant}: {row[variant]['speedup']:.3f}x greedy ({min(ratios):.3f}-{max(ratios):.3f}); "
                  f"last run's rounds (fed, draft ms, verify ms): {shown}", flush=True)
        results["prompts"][name] = row
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
