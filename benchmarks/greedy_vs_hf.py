"""Benchmark: decode-tui's greedy decoding against transformers' ``generate`` on the embedded model.

Runs ours and HF's alternately in one process on three prompts (an
input-grounded summary, a code edit, an open-ended story), 128 new tokens
each with end-of-sequence disabled so both sides do the same work, and
reports tokens/s, the ratio and whether the tokens are identical. Ours is
measured through the whole pipeline a user gets (``Run.events()``: candidates
per step, detokenisation, events), not a bare loop.

It then measures the time from starting ``decode-tui generate`` to its first
token on stdout (model already cached), next to the floor any
transformers-based tool pays here: a bare script that imports torch and
transformers, loads the same checkpoint and computes one token.

    python benchmarks/greedy_vs_hf.py [--repeats 3] [--new-tokens 128] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from decode_tui.core.embedded import pull
from decode_tui.core.events import Finished
from decode_tui.core.loading import LoadedModel, load_model
from decode_tui.core.params import DecodeConfig
from decode_tui.core.registry import resolve
from decode_tui.core.run import Run

PROMPTS = {
    "summarise": (
        "Summarise the following passage in three sentences.\n\n"
        "The Great Barrier Reef, off the coast of Queensland, Australia, is the largest coral reef system in the "
        "world. It stretches for over 2,300 kilometres and is made of nearly 3,000 individual reefs and 900 "
        "islands. The reef supports a wide diversity of life, including many vulnerable or endangered species. "
        "Rising sea temperatures have caused several mass coral bleaching events since 1998, and scientists warn "
        "that without cuts to greenhouse gas emissions the reef could lose most of its coral cover this century. "
        "Tourism to the reef contributes billions of dollars to the Australian economy every year."
    ),
    "code-edit": (
        "Rewrite this Python function so that it uses a list comprehension and add type hints. Return only the "
        "code.\n\n"
        "def squares_of_evens(numbers):\n"
        "    result = []\n"
        "    for n in numbers:\n"
        "        if n % 2 == 0:\n"
        "            result.append(n * n)\n"
        "    return result\n"
    ),
    "open-ended": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
}


def ours(lm: LoadedModel, prompt: str, new_tokens: int) -> tuple[list[int], float]:
    run = Run(lm, prompt, DecodeConfig(mode="greedy", max_new_tokens=new_tokens))
    start = time.perf_counter()
    final = None
    for event in run.events():
        final = event
    elapsed = time.perf_counter() - start
    assert isinstance(final, Finished)
    return list(final.token_ids), elapsed


def hf(lm: LoadedModel, prompt_ids: list[int], new_tokens: int, never: int) -> tuple[list[int], float]:
    """HF greedy; ``never`` is a token id that stands in for EOS so that both sides run the full length.

    (``eos_token_id=None`` makes generate fall back to the model's own EOS.)
    """
    ids = torch.tensor([prompt_ids], device=lm.device)
    gen_config = copy.deepcopy(lm.model.generation_config)
    gen_config.eos_token_id = never
    gen_config.do_sample = False
    start = time.perf_counter()
    with torch.inference_mode():
        out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gen_config,
                                max_new_tokens=new_tokens,
                                pad_token_id=lm.tokenizer.pad_token_id)
    elapsed = time.perf_counter() - start
    return [int(t) for t in out[0, len(prompt_ids):]], elapsed


def time_to_first_token(args: list[str], marker: str, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            if marker in line:
                times.append(time.perf_counter() - start)
                break
        proc.kill()
        proc.wait()
    return times


FLOOR_SCRIPT = """
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
ids = tok("Tell me a story.", return_tensors="pt")["input_ids"]
with torch.inference_mode():
    print("FIRST", int(model(ids).logits[0, -1].argmax()), flush=True)
"""


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "torch": torch.__version__,
            "transformers": __import__("transformers").__version__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--ttft-repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    pull("smollm2")
    lm = load_model(resolve("smollm2"), device="auto", dtype="auto")
    lm = dataclasses.replace(lm, eos_token_ids=frozenset())  # the same 128 tokens on both sides
    results: dict[str, Any] = {"machine": machine(), "device": str(lm.device), "dtype": str(lm.dtype),
                               "new_tokens": args.new_tokens, "prompts": {}}
    for name, prompt in PROMPTS.items():
        prompt_ids = Run(lm, prompt, DecodeConfig(max_new_tokens=args.new_tokens)).prompt_ids
        reference, _ = ours(lm, prompt, args.new_tokens)  # also the warm-up
        never = next(t for t in range(len(lm.tokenizer) - 1, 0, -1) if t not in reference)
        hf(lm, prompt_ids, 8, never)
        ours_tps, hf_tps, identical = [], [], True
        for _ in range(args.repeats):
            tokens_ours, t_ours = ours(lm, prompt, args.new_tokens)
            tokens_hf, t_hf = hf(lm, prompt_ids, args.new_tokens, never)
            identical &= tokens_ours == tokens_hf
            ours_tps.append(len(tokens_ours) / t_ours)
            hf_tps.append(len(tokens_hf) / t_hf)
        row = {"prompt_tokens": len(prompt_ids), "ours_tok_s": statistics.median(ours_tps),
               "hf_tok_s": statistics.median(hf_tps), "identical": identical}
        row["ratio"] = row["ours_tok_s"] / row["hf_tok_s"]
        results["prompts"][name] = row
        print(f"{name:>10}: ours {row['ours_tok_s']:6.1f} tok/s  HF {row['hf_tok_s']:6.1f} tok/s  "
              f"ratio {row['ratio']:.3f}  identical={identical}", flush=True)

    script = str(Path(sys.executable).parent / "decode-tui")
    ttft = time_to_first_token([script, "generate", "--prompt", "Tell me a story.", "--format", "jsonl",
                                "--max-new-tokens", "4"], '"token_emitted"', args.ttft_repeats)
    floor = time_to_first_token([sys.executable, "-c", FLOOR_SCRIPT, str(resolve("smollm2").path)], "FIRST",
                                args.ttft_repeats)
    results["ttft_s"] = {"decode_tui_generate": statistics.median(ttft), "bare_transformers": statistics.median(floor),
                         "runs": ttft, "floor_runs": floor}
    print(f"time to first token: decode-tui generate {statistics.median(ttft):.2f} s (median of {len(ttft)}); "
          f"bare transformers script {statistics.median(floor):.2f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
