"""Benchmark: each drafting mode on its own demo prompt against plain greedy, on this machine (the README's figures).

Fair by construction (``core.compare.compare``: warm runs, alternated, the median ratio with its range), on the
embedded model. Speculative decoding uses the default draft (the target quantised to int4, CPU only).

    python benchmarks/demo_prompts.py [--runs 3] [--new-tokens 64] [--out results.jsonl]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from decode_tui.core.analysis.compare import compare
from decode_tui.core.drafting.draft_models import load_draft
from decode_tui.core.model.embedded import pull
from decode_tui.core.model.loading import load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.params import DEFAULT_DRAFT, DEMO_PROMPTS, DecodeConfig
from decode_tui.core.record.events import Mode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    pull("smollm2")
    lm = load_model(resolve("smollm2"))
    base = DecodeConfig(max_new_tokens=args.new_tokens, seed=0)
    rows = []
    cases: tuple[tuple[Mode, str], ...] = (("pld", "pld"), ("speculative", "speculative"), ("pld", "greedy"),
                                           ("speculative", "greedy"))
    for mode, prompt_of in cases:
        draft = load_draft(lm, DEFAULT_DRAFT) if mode == "speculative" and lm.device.type == "cpu" else None
        if mode == "speculative" and draft is None:
            continue  # the default draft (int4) is CPU-only; on a GPU, speculative decoding needs --draft MODEL
        result = compare(lm, DEMO_PROMPTS[prompt_of], dataclasses.replace(base, mode=mode), base, runs=args.runs,
                         draft=draft)
        row = {"mode": mode, "prompt": f"{prompt_of}'s demo prompt", "device": str(lm.device), **result}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
