"""Benchmark: drafts made from the embedded model, each one's cost ratio c and how often it agrees with the target.

c: one decoding step of the draft over one of the target (a 150-token cache, the best of three timings of 40
steps each, warm). Agreement: the draft fed the target's own greedy continuation token by token (as a draft
is fed), the share of positions where its argmax is the target's next token: greedy acceptance, per position.
The prompts: transformers-comparison prompts and the demo prompts, 64 tokens each (``--tokens``).

    python benchmarks/draft_candidates.py [--drafts int4,int8,layers:26,int4+layers:26] [--unfused] [--tokens 64]
                                          [--json out.json]

``--unfused``: each draft also as it was built before its layers were fused (transformers' own norms, attention
and MLP), the control for what :mod:`decode_tui.core.drafting.draft_layers` changes of a draft's cost and agreement.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from transformers import DynamicCache

from decode_tui.core.drafting import target_drafts
from decode_tui.core.drafting.draft_models import load_draft
from decode_tui.core.model.embedded import pull
from decode_tui.core.model.loading import load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.params import DEMO_PROMPTS

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.controls
from decode_vs_hf import PROMPTS

from tests.controls import unfused_build


@torch.inference_mode()
def step_s(model: Any, context: torch.Tensor, steps: int = 40) -> float:
    cache = DynamicCache()
    token = model(input_ids=context, cache=cache, use_cache=True).logits[:, -1:].argmax(-1)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(steps):
            model(input_ids=token, cache=cache, use_cache=True)
            cache.crop(-1)
        best = min(best, (time.perf_counter() - start) / steps)
    return best


@torch.inference_mode()
def agreement(model: Any, prompt_len: int, sequence: torch.Tensor) -> float:
    cache = DynamicCache()
    logits = model(input_ids=sequence[:, :prompt_len], cache=cache, use_cache=True).logits[:, -1]
    hits = 0
    for i in range(prompt_len, sequence.shape[1]):
        hits += int(logits.argmax(-1).item() == sequence[0, i].item())
        logits = model(input_ids=sequence[:, i : i + 1], cache=cache, use_cache=True).logits[:, -1]
    return hits / (sequence.shape[1] - prompt_len)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafts", default="int4,int8,layers:26,layers:20,int4+layers:26")
    parser.add_argument("--unfused", action="store_true",
                        help="each draft with transformers' own modules too (control)")
    parser.add_argument("--tokens", type=int, default=64, help="the target's greedy continuation of each prompt "
                        "that the drafts are fed (the positions agreement is counted over)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pull("smollm2")
    lm = load_model(resolve("smollm2"))
    prompts = {**PROMPTS, "speculative demo": DEMO_PROMPTS["speculative"], "pld demo": DEMO_PROMPTS["pld"]}
    sequences = {}
    target: Any = lm.model  # transformers' generate is not typed as callable on PreTrainedModel
    with torch.inference_mode():
        for name, text in prompts.items():
            ids = torch.tensor([lm.encode_prompt(text, True)])
            sequences[name] = (ids.shape[1], target.generate(ids, max_new_tokens=args.tokens, do_sample=False))
    context = torch.randint(100, 40000, (1, 150), generator=torch.Generator().manual_seed(0))
    target_s = step_s(lm.model, context)
    rows = []
    for spec in args.drafts.split(","):
        for fused in (True, False) if args.unfused else (True,):
            with contextlib.nullcontext() if fused else mock.patch.object(target_drafts, "build", unfused_build):
                draft: Any = load_draft(lm, spec).model
            name = spec if fused else f"{spec} unfused"
            c = step_s(draft, context) / target_s
            agreed = {p: agreement(draft, n, seq) for p, (n, seq) in sequences.items()}
            rows.append({"draft": name, "c": c, "agreement": agreed})
            print(f"{name:>24}: c = {c:.3f}  " + "  ".join(f"{k} {v:.2f}" for k, v in agreed.items()), flush=True)
            del draft
    if args.json:
        args.json.write_text(json.dumps({"target_step_ms": target_s * 1e3, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
