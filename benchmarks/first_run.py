"""Benchmark: first run against later runs in one process, load and warm-up time, capture or compile time,
and the fair comparison, on whatever device this runs on.

Each row is written to ``--out`` (JSON lines) as soon as it is measured, so a run cut off by a time limit
still leaves what it measured. Sections (``--only``, comma-separated):

- ``smol``: the embedded SmolLM2-135M (bf16 on CUDA, fp32 on the CPU): load time after imports; per mode
  (greedy, pld, beam) and path (the default, and ``plain`` with CUDA graphs off), the warm-up's seconds
  and the tokens/s of runs 1, 2, 3 after it; transformers' ``generate`` warm; greedy against itself and
  PLD against greedy through :func:`decode_tui.core.analysis.compare.compare` (warm, alternated, with the range).
- ``phi3``: a model of Phi-3-mini's architecture and size with random weights (``--tiny``: a small one,
  to check the script on a CPU): the default path (graphs on CUDA; its warm-up holds the capture), the
  plain path, ``--fast`` (its warm-up holds the compile), and ``generate``; tokens/s of runs 1-3 and each
  as a fraction of the memory-bandwidth bound.

    python benchmarks/first_run.py --only smol,phi3 --out results.jsonl [--new-tokens 128] [--tiny]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from decode_tui.core.analysis.compare import compare
from decode_tui.core.model.loading import LoadedModel, load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.params import DecodeConfig, DraftParams
from decode_tui.core.record.events import Finished
from decode_tui.core.run import Run
from decode_tui.core.warmup import warm_up

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode_vs_hf import PROMPTS, machine
from gpu import hf, phi3_sized, sync, weight_bytes

OUT: Path | None = None


def emit(row: dict[str, Any]) -> None:
    print(json.dumps(row), flush=True)
    if OUT is not None:
        with OUT.open("a") as out:
            out.write(json.dumps(row) + "\n")


def timed_runs(lm: LoadedModel, prompt: str, config: DecodeConfig, runs: int = 3) -> list[float]:
    rates = []
    for _ in range(runs):
        final = None
        for event in Run(lm, prompt, config).events():
            final = event
        assert isinstance(final, Finished)
        rates.append(round(final.tokens_per_s, 2))
    return rates


def first_vs_third(section: str, lm: LoadedModel, prompt: str, config: DecodeConfig, label: str) -> None:
    run = Run(lm, prompt, config)
    warm_s = warm_up(lm, prompt, config)
    rates = timed_runs(lm, prompt, config)
    emit({"section": section, "what": "first run vs third", "mode": config.mode, "path": run.path, "label": label,
          "warm_up_s": round(warm_s, 3), "tok_s_runs_1_2_3": rates, "first_over_third": round(rates[0] / rates[2], 3)})


def smol(new_tokens: int, device: str) -> None:
    started = time.perf_counter()
    lm = load_model(resolve("smollm2"), device=device)
    sync(lm.device)
    # load_model's own phases: transformers' lazily imported model code, CUDA's start, tokenizer, weights.
    emit({"section": "smol", "what": "load", "device": str(lm.device), "dtype": str(lm.dtype),
          "load_s_in_all": round(time.perf_counter() - started, 2), "phases_s": lm.timings,
          "load_s_after_imports": round(sum(v for k, v in lm.timings.items() if k != "model code"), 2),
          "tokenizer_and_weights_s": round(lm.timings.get("tokenizer", 0) + lm.timings["weights"], 2)})
    prompt = PROMPTS["code-edit"]
    base = DecodeConfig(max_new_tokens=new_tokens, seed=0)
    for mode in ("greedy", "pld", "beam"):
        config = dataclasses.replace(base, mode=mode)
        first_vs_third("smol", lm, prompt, config, "default")
        if lm.device.type == "cuda" and mode != "beam":
            first_vs_third("smol", lm, prompt, dataclasses.replace(config, cuda_graphs=False), "plain")
    prompt_ids = lm.encode_prompt(prompt)
    hf(lm, prompt_ids, 8, eos_token_id=sorted(lm.eos_token_ids))  # warm-up
    rates = [round(hf(lm, prompt_ids, new_tokens, eos_token_id=sorted(lm.eos_token_ids))[0], 2) for _ in range(3)]
    emit({"section": "smol", "what": "HF generate greedy, warm", "tok_s_runs": rates})
    for label, config, baseline in (
            ("greedy vs greedy", base, base),
            ("pld vs greedy", dataclasses.replace(base, mode="pld", draft=DraftParams()), base),
            # The draft length PLD had before it became num_pred_tokens (10), for comparison.
            ("pld k=5 vs greedy", dataclasses.replace(base, mode="pld", draft=DraftParams(num_pred_tokens=5)), base)):
        result = compare(lm, prompt, config, baseline, runs=5 if label.startswith("greedy") else 3)
        emit({"section": "smol", "what": f"compare {label}", **result})


def phi3(new_tokens: int, device: torch.device, tiny: bool, bandwidth: float) -> None:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    started = time.perf_counter()
    lm = phi3_sized(device, dtype, tiny)
    sync(device)
    bound = bandwidth / weight_bytes(lm.model)
    emit({"section": "phi3", "what": "build", "init_s": round(time.perf_counter() - started, 2),
          "bound_tok_s": round(bound, 1)})
    prompt = " ".join(f"w{(i * 7919) % 30000 + 100}" for i in range(128))
    base = DecodeConfig(max_new_tokens=new_tokens, seed=0)
    variants = [("default", base), ("fast", dataclasses.replace(base, fast=True))]
    if device.type == "cuda":
        variants.insert(1, ("plain", dataclasses.replace(base, cuda_graphs=False)))
    for label, config in variants:
        run = Run(lm, prompt, config)
        warm_s = warm_up(lm, prompt, config)
        rates = timed_runs(lm, prompt, config)
        emit({"section": "phi3", "what": "first run vs third", "label": label, "path": run.path,
              "warm_up_s": round(warm_s, 2), "tok_s_runs_1_2_3": rates,
              "first_over_third": round(rates[0] / rates[2], 3),
              "fraction_of_bound": round(statistics.median(rates) / bound, 3)})
    prompt_ids = Run(lm, prompt, base).prompt_ids
    never = lm.model.config.vocab_size - 1
    hf(lm, prompt_ids, 8, eos_token_id=never)
    rates = [round(hf(lm, prompt_ids, new_tokens, eos_token_id=never)[0], 2) for _ in range(3)]
    emit({"section": "phi3", "what": "HF generate greedy, warm", "tok_s_runs": rates,
          "fraction_of_bound": round(statistics.median(rates) / bound, 3)})


def main() -> None:
    global OUT
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="smol,phi3")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--bandwidth", type=float, default=3.35e12)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    OUT = args.out
    from decode_tui.core.model.loading import resolve_device

    device = resolve_device(args.device)
    emit({"what": "machine", **machine(), "device": str(device),
          "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
          "date": time.strftime("%Y-%m-%d")})
    sections = args.only.split(",")
    if "smol" in sections:
        smol(args.new_tokens, args.device)
    if "phi3" in sections:
        phi3(args.new_tokens, device, args.tiny, args.bandwidth)


if __name__ == "__main__":
    main()
