"""Benchmark: decode-tui's strategies against transformers' ``generate`` on the embedded model.

For greedy decoding and for beam search (4 beams), runs ours and HF's
alternately in one process on three prompts (an input-grounded summary, a
code edit, an open-ended story), 128 new tokens each with end-of-sequence
disabled so both sides do the same work, and reports tokens/s, the ratio and
whether the output is identical. Ours is measured through the whole pipeline
a user gets (``Run.events()``: candidates per step, detokenisation, events),
not a bare loop.

It then measures the time from starting ``decode-tui generate`` to its first
token on stdout (model already cached), next to the floor any
transformers-based tool pays here: a bare script that imports torch and
transformers, loads the same checkpoint and computes one token.

    python benchmarks/decode_vs_hf.py [--only greedy,beam,ttft] [--repeats 3] [--new-tokens 128] [--json out.json]
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

from decode_tui.core.model.embedded import pull
from decode_tui.core.model.loading import LoadedModel, load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.modes import CODE_EDIT_PROMPT
from decode_tui.core.params import DEFAULT_DRAFT, BeamParams, DecodeConfig
from decode_tui.core.record.events import Finished, Mode
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
    "code-edit": CODE_EDIT_PROMPT,  # PLD's demo prompt in the app
    "open-ended": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
}


def ours(lm: LoadedModel, prompt: str, new_tokens: int, num_beams: int = 1) -> tuple[list[int], float]:
    mode: Mode = "beam" if num_beams > 1 else "greedy"
    final, elapsed = timed_run(lm, prompt, DecodeConfig(mode=mode, max_new_tokens=new_tokens,
                                                        beam=BeamParams(num_beams=num_beams)))
    return list(final.token_ids), elapsed


def hf(lm: LoadedModel, prompt_ids: list[int], new_tokens: int, never: int, num_beams: int = 1,
       ) -> tuple[list[int], float]:
    """HF greedy or beam search; ``never`` stands in for EOS so that both sides run the full length.

    (``eos_token_id=None`` makes generate fall back to the model's own EOS.)
    """
    ids = torch.tensor([prompt_ids], device=lm.device)
    model: Any = lm.model  # transformers' generate is not typed as callable on PreTrainedModel
    gen_config = copy.deepcopy(lm.model.generation_config)
    gen_config.eos_token_id = never
    gen_config.do_sample = False
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gen_config,
                                max_new_tokens=new_tokens, num_beams=num_beams,
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
    parser.add_argument("--only", default="greedy,beam,drafting,ttft", help="comma-separated sections to run")
    parser.add_argument("--draft", default=DEFAULT_DRAFT, help="the speculative draft (default: %(default)s)")
    parser.add_argument("--prompts", default=",".join(PROMPTS), help="comma-separated prompt names to run")
    args = parser.parse_args()
    sections = set(args.only.split(","))
    unknown = set(args.prompts.split(",")) - set(PROMPTS)
    if unknown:
        parser.error(f"unknown prompt(s) {', '.join(sorted(unknown))}; choose from {', '.join(PROMPTS)}")
    prompts = {name: PROMPTS[name] for name in args.prompts.split(",")}

    pull("smollm2")
    lm = load_model(resolve("smollm2"), device="auto", dtype="auto")
    lm_natural = lm
    lm = dataclasses.replace(lm, eos_token_ids=frozenset())  # the same 128 tokens on both sides
    results: dict[str, Any] = {"machine": machine(), "device": str(lm.device), "dtype": str(lm.dtype),
                               "new_tokens": args.new_tokens}
    for section, num_beams in (("greedy", 1), ("beam", 4)):
        if section in sections:
            results[section] = compare(lm, args.new_tokens, args.repeats, num_beams, section, prompts)
    if "drafting" in sections:
        results["drafting"] = drafting(lm_natural, args.new_tokens, args.repeats, args.draft, prompts)
    if "ttft" in sections:
        results["ttft_s"] = ttft(args.ttft_repeats)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


def compare(lm: LoadedModel, new_tokens: int, repeats: int, num_beams: int, section: str,
            prompts: dict[str, str] = PROMPTS) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name, prompt in prompts.items():
        prompt_ids = Run(lm, prompt, DecodeConfig(max_new_tokens=new_tokens)).prompt_ids
        reference, _ = ours(lm, prompt, new_tokens, num_beams)  # also the warm-up
        never = next(t for t in range(len(lm.tokenizer) - 1, 0, -1) if t not in reference)
        hf(lm, prompt_ids, 8, never, num_beams)
        ours_tps, hf_tps, identical = [], [], True
        for _ in range(repeats):
            tokens_ours, t_ours = ours(lm, prompt, new_tokens, num_beams)
            tokens_hf, t_hf = hf(lm, prompt_ids, new_tokens, never, num_beams)
            identical &= tokens_ours == tokens_hf
            ours_tps.append(len(tokens_ours) / t_ours)
            hf_tps.append(len(tokens_hf) / t_hf)
        row = {"prompt_tokens": len(prompt_ids), "ours_tok_s": statistics.median(ours_tps),
               "hf_tok_s": statistics.median(hf_tps), "identical": identical}
        row["ratio"] = row["ours_tok_s"] / row["hf_tok_s"]
        rows[name] = row
        print(f"{section:>6} {name:>10}: ours {row['ours_tok_s']:6.2f} tok/s  HF {row['hf_tok_s']:6.2f} tok/s  "
              f"ratio {row['ratio']:.3f}  identical={identical}", flush=True)
    return rows


def timed_run(lm: LoadedModel, prompt: str, config: DecodeConfig, draft: Any = None) -> tuple[Finished, float]:
    run = Run(lm, prompt, config, draft)
    start = time.perf_counter()
    final = None
    for event in run.events():
        final = event
    assert isinstance(final, Finished)
    return final, time.perf_counter() - start


def timed_hf(lm: LoadedModel, prompt_ids: list[int], new_tokens: int, **kwargs: Any) -> tuple[list[int], float]:
    ids = torch.tensor([prompt_ids], device=lm.device)
    model: Any = lm.model
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
                                eos_token_id=sorted(lm.eos_token_ids), pad_token_id=lm.tokenizer.pad_token_id,
                                **kwargs)
    return [int(t) for t in out[0, len(prompt_ids):]], time.perf_counter() - start


def drafting(lm: LoadedModel, new_tokens: int, repeats: int, spec: str = DEFAULT_DRAFT,
             prompts: dict[str, str] = PROMPTS) -> dict[str, Any]:
    """Speculative (the default draft, or ``spec``) and prompt lookup against our greedy, and HF's own (prompt
    lookup, and assisted generation with the same draft module) against HF greedy.

    End-of-sequence stays on (the drafting modes must give greedy's exact tokens either way).
    """
    from decode_tui.core.drafting.draft_models import load_draft
    from decode_tui.core.params import DraftParams

    draft = load_draft(lm, spec)
    variants = {
        "pld": (DecodeConfig(mode="pld", max_new_tokens=new_tokens), None),
        "pld adaptive": (DecodeConfig(mode="pld", max_new_tokens=new_tokens,
                                      draft=DraftParams(adaptive=True)), None),
        f"speculative {spec} k={DraftParams().num_draft_tokens}": (
            DecodeConfig(mode="speculative", max_new_tokens=new_tokens, draft=DraftParams(draft=spec)), draft),
        f"speculative {spec} adaptive": (DecodeConfig(mode="speculative", max_new_tokens=new_tokens,
                                                      draft=DraftParams(draft=spec, adaptive=True)), draft),
    }
    rows: dict[str, Any] = {}
    for name, prompt in prompts.items():
        greedy_config = DecodeConfig(mode="greedy", max_new_tokens=new_tokens)
        prompt_ids = Run(lm, prompt, greedy_config).prompt_ids
        reference, _ = timed_run(lm, prompt, greedy_config)  # warm-up
        row: dict[str, Any] = {"new_tokens": reference.new_tokens}
        times: dict[str, list[float]] = {}
        same: dict[str, bool] = {}
        extra: dict[str, Any] = {}
        for _ in range(repeats):
            _, t = timed_run(lm, prompt, greedy_config)
            times.setdefault("greedy", []).append(t)
            for variant, (config, with_draft) in variants.items():
                result, t = timed_run(lm, prompt, config, with_draft)
                times.setdefault(variant, []).append(t)
                same[variant] = same.get(variant, True) and result.token_ids == reference.token_ids
                extra[variant] = {"acceptance_rate": result.acceptance_rate, "drafted": result.drafted,
                                  "tokens_per_forward": result.new_tokens / result.target_forwards}
            hf_greedy, t = timed_hf(lm, prompt_ids, new_tokens)
            times.setdefault("HF greedy", []).append(t)
            for variant, kwargs in (("HF prompt lookup", {"prompt_lookup_num_tokens": 10}),
                                    (f"HF assisted {spec}", {"assistant_model": draft.model})):
                tokens, t = timed_hf(lm, prompt_ids, new_tokens, **kwargs)
                times.setdefault(variant, []).append(t)
                same[variant] = same.get(variant, True) and tokens == hf_greedy
        greedy_t = statistics.median(times["greedy"])
        hf_t = statistics.median(times["HF greedy"])
        row["greedy_seconds"], row["hf_greedy_seconds"] = times["greedy"], times["HF greedy"]
        for variant, ts in times.items():
            if variant in ("greedy", "HF greedy"):
                continue
            base = hf_t if variant.startswith("HF") else greedy_t
            # The range: the slowest and the fastest round against the baseline's median.
            row[variant] = {"speedup": base / statistics.median(ts), "range": [base / max(ts), base / min(ts)],
                            "seconds": ts, "identical": same[variant], **extra.get(variant, {})}
            print(f"drafting {name:>10} {variant:>26}: {row[variant]['speedup']:.2f}x "
                  f"({base / max(ts):.2f}-{base / min(ts):.2f})  identical={same[variant]}"
                  + (f"  acceptance {extra[variant]['acceptance_rate']:.0%}  tokens/forward "
                     f"{extra[variant]['tokens_per_forward']:.2f}" if variant in extra else ""), flush=True)
        rows[name] = row
    return rows


def ttft(repeats: int) -> dict[str, Any]:
    script = str(Path(sys.executable).parent / "decode-tui")
    runs = time_to_first_token([script, "generate", "--prompt", "Tell me a story.", "--format", "jsonl",
                                "--max-new-tokens", "4"], '"token_emitted"', repeats)
    floor = time_to_first_token([sys.executable, "-c", FLOOR_SCRIPT, str(resolve("smollm2").path)], "FIRST",
                                repeats)
    print(f"time to first token: decode-tui generate {statistics.median(runs):.2f} s (median of {len(runs)}); "
          f"bare transformers script {statistics.median(floor):.2f} s", flush=True)
    return {"decode_tui_generate": statistics.median(runs), "bare_transformers": statistics.median(floor),
            "runs": runs, "floor_runs": floor}


if __name__ == "__main__":
    main()
