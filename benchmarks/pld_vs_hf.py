"""Benchmark: our prompt lookup (PLD) against transformers' (``generate(prompt_lookup_num_tokens=10)``).

Each side is measured against its own greedy decoding, in one process, on the same prompt ids, by the
project's protocol: a warm-up of each run, then ``--repeats`` rounds with the order reversed from one round
to the next (ours greedy, ours PLD, ours adaptive PLD, HF greedy, HF PLD; then backwards), and each side's
speed-up is the median of the rounds' ratios, with its lowest and highest. It also counts the target's
forward passes on both sides (HF's by wrapping the model's ``forward``) and checks that all four outputs
are the same tokens. The prompts are input-grounded, where PLD is meant to help: the benchmarks' summary
and code edit, a question answered from a passage, and an edit of a JSON object; and, as a control where
nothing can be copied, an open-ended story. Our adaptive PLD (``--adaptive``) is timed beside the fixed one.

    python benchmarks/pld_vs_hf.py [--repeats 5] [--new-tokens 96] [--max-ngram-size 3] [--num-pred-tokens 10]
                                   [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
from decode_vs_hf import PROMPTS as BENCH_PROMPTS  # run as a script: benchmarks/ is on the path
from decode_vs_hf import machine

from decode_tui.core.model.embedded import pull
from decode_tui.core.model.loading import LoadedModel, load_model
from decode_tui.core.model.registry import resolve
from decode_tui.core.modes import CODE_EDIT_PROMPT
from decode_tui.core.params import DecodeConfig, DraftParams
from decode_tui.core.record.events import Finished
from decode_tui.core.run import Run

PROMPTS = {
    "summarise": BENCH_PROMPTS["summarise"],
    "code-edit": CODE_EDIT_PROMPT,
    "passage-qa": (
        "Read the passage, then answer the question in full sentences, quoting the passage.\n\n"
        "Passage: The Rhine is a river that begins in the Swiss Alps, flows through Liechtenstein, Austria, "
        "Germany, France and the Netherlands, and empties into the North Sea. It is about 1,230 kilometres long. "
        "Cities on the Rhine include Basel, Strasbourg, Mannheim, Cologne and Duesseldorf. The river has been an "
        "important trade route since Roman times, and today it carries more freight than any other river in "
        "Europe.\n\nQuestion: Where does the Rhine begin, which countries and cities does it flow through, and "
        "where does it end?"
    ),
    "json-edit": (
        'Change the city to "Lyon" and the age to 31 in this JSON object, and return the whole object.\n\n'
        '{"name": "Marie Dubois", "age": 30, "email": "marie.dubois@example.com", "address": {"street": '
        '"12 Rue de la Paix", "city": "Paris", "postcode": "75002", "country": "France"}, "languages": '
        '["French", "English", "Spanish"], "active": true}'
    ),
    # A control with nothing in the prompt to copy: drafting can only cost here.
    "open-ended": BENCH_PROMPTS["open-ended"],
}


class ForwardCounter:
    """Counts the calls to a model's ``forward`` (each is one target forward pass, the prefill included)."""

    def __init__(self, model: Any) -> None:
        self.count = 0
        self.original = model.forward

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return self.original(*args, **kwargs)

        model.forward = counting


def ours(lm: LoadedModel, prompt: str, config: DecodeConfig) -> tuple[list[int], float, int]:
    started = time.perf_counter()
    final = None
    for event in Run(lm, prompt, config).events():
        final = event
    assert isinstance(final, Finished)
    return list(final.token_ids), time.perf_counter() - started, final.target_forwards


def hf(lm: LoadedModel, counter: ForwardCounter, prompt_ids: list[int], new_tokens: int,
       **kwargs: Any) -> tuple[list[int], float, int]:
    ids = torch.tensor([prompt_ids], device=lm.device)
    model: Any = lm.model
    counter.count = 0
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
                             eos_token_id=sorted(lm.eos_token_ids), pad_token_id=lm.tokenizer.pad_token_id, **kwargs)
    return [int(t) for t in out[0, len(prompt_ids):]], time.perf_counter() - started, counter.count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--max-ngram-size", type=int, default=DraftParams.max_ngram_size)
    parser.add_argument("--num-pred-tokens", type=int, default=DraftParams.num_pred_tokens)
    parser.add_argument("--only", help="comma-separated prompt names")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pull("smollm2")
    lm = load_model(resolve("smollm2"), device="cpu", dtype="float32")
    counter = ForwardCounter(lm.model)
    greedy = DecodeConfig(mode="greedy", max_new_tokens=args.new_tokens)
    pld = DecodeConfig(mode="pld", max_new_tokens=args.new_tokens,
                       draft=DraftParams(max_ngram_size=args.max_ngram_size, num_pred_tokens=args.num_pred_tokens))
    adaptive = DecodeConfig(mode="pld", max_new_tokens=args.new_tokens,
                            draft=DraftParams(max_ngram_size=args.max_ngram_size,
                                              num_pred_tokens=args.num_pred_tokens, adaptive=True))
    results: dict[str, Any] = {
        "machine": machine(),
        "protocol": "warm-up each, then rounds alternated (ours greedy, ours PLD, HF greedy, HF PLD; reversed "
                    "every other round); speed-up = median of the rounds' ratios, each side over its own greedy",
        "ours": {"max_ngram_size": args.max_ngram_size, "num_pred_tokens": args.num_pred_tokens},
        "hf": {"prompt_lookup_num_tokens": 10, "max_matching_ngram_size": 2},
        "prompts": {},
    }
    names = args.only.split(",") if args.only else list(PROMPTS)
    for name in names:
        prompt = PROMPTS[name]
        prompt_ids = Run(lm, prompt, greedy).prompt_ids
        sides = {
            "ours greedy": partial(ours, lm, prompt, greedy),
            "ours pld": partial(ours, lm, prompt, pld),
            "ours pld adaptive": partial(ours, lm, prompt, adaptive),
            "hf greedy": partial(hf, lm, counter, prompt_ids, args.new_tokens),
            "hf pld": partial(hf, lm, counter, prompt_ids, args.new_tokens, prompt_lookup_num_tokens=10),
        }
        for run in sides.values():
            run()  # warm-up
        times: dict[str, list[float]] = {side: [] for side in sides}
        tokens: dict[str, list[int]] = {}
        forwards: dict[str, int] = {}
        for i in range(args.repeats):
            for side in list(sides) if i % 2 == 0 else list(reversed(sides)):
                tokens[side], seconds, forwards[side] = sides[side]()
                times[side].append(seconds)
        ours_ratios = [g / p for g, p in zip(times["ours greedy"], times["ours pld"], strict=True)]
        hf_ratios = [g / p for g, p in zip(times["hf greedy"], times["hf pld"], strict=True)]
        adaptive_ratios = [g / p for g, p in zip(times["ours greedy"], times["ours pld adaptive"], strict=True)]
        row: dict[str, Any] = {
            "new_tokens": len(tokens["ours greedy"]),
            "identical": len({tuple(t) for t in tokens.values()}) == 1,
            "target_forwards": forwards,
            "median_s": {side: statistics.median(ts) for side, ts in times.items()},
            "ours_speedup": statistics.median(ours_ratios), "ours_range": [min(ours_ratios), max(ours_ratios)],
            "hf_speedup": statistics.median(hf_ratios), "hf_range": [min(hf_ratios), max(hf_ratios)],
            "ours_adaptive_speedup": statistics.median(adaptive_ratios),
            "ours_adaptive_range": [min(adaptive_ratios), max(adaptive_ratios)],
        }
        row["ours_over_hf"] = row["ours_speedup"] / row["hf_speedup"]
        results["prompts"][name] = row
        print(f"{name:>11}: {row['new_tokens']} tokens, identical={row['identical']}; ours {row['ours_speedup']:.2f}x "
              f"({min(ours_ratios):.2f}-{max(ours_ratios):.2f}), {forwards['ours pld']} forwards; HF "
              f"{row['hf_speedup']:.2f}x ({min(hf_ratios):.2f}-{max(hf_ratios):.2f}), {forwards['hf pld']} forwards; "
              f"ours/HF {row['ours_over_hf']:.2f}; ours adaptive {row['ours_adaptive_speedup']:.2f}x "
              f"({min(adaptive_ratios):.2f}-{max(adaptive_ratios):.2f}), {forwards['ours pld adaptive']} forwards; "
              f"greedy ours {row['median_s']['ours greedy']:.2f} s, HF "
              f"{row['median_s']['hf greedy']:.2f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
