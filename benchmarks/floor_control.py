"""The floor beside its negative control: every drafting mode by default, and greedy timed twice, on each prompt.

``decode-tui bench --prompts``'s protocol (core/analysis/compare.py: a warm-up each, then rounds in an order
reversed every round), with the modes' settings built as the command line builds them (adaptive by default), and
one more row: ``greedy (again)``, greedy's own settings under another name. It does exactly greedy's work, so its
speed-up over greedy is 1.00x but for this machine's noise: its interval (``benchmarks/floor_table.py``) is what
the protocol can resolve on that prompt, and a drafting mode's figure is read against it. A control that falls
outside 1.00x says the machine, not the mode, moved the figure.

The rows are ``bench --format json``'s, one per prompt and mode, written and flushed as each prompt ends, so a run
stopped part way keeps the prompts it finished. ``--hog`` runs a busy-looping Python process beside it (a CPU hog on
one of this machine's two cores), ended with the run.

    python benchmarks/floor_control.py PROMPTS.jsonl OUT.json [--rounds 5] [--max-new-tokens 96] [--hog]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from decode_tui.cli.flags import ModeChoice
from decode_tui.cli.loads import load_models, with_draft_model
from decode_tui.cli.measure import read_prompts
from decode_tui.cli.options import DecodingOptions
from decode_tui.core.analysis.compare import bench

MODES = ("greedy", "speculative", "pld", "suffix", "recycle", "lookahead")
CONTROL = "greedy (again)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prompts", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--hog", action="store_true")
    args = parser.parse_args()
    prompts = read_prompts(args.prompts)
    options = DecodingOptions(max_new_tokens=args.max_new_tokens)
    configs = {m: options.for_mode(ModeChoice(m)).config() for m in args.modes.split(",")}
    configs[CONTROL] = configs["greedy"]
    lm, draft = load_models(options, max((p for _, p in prompts), key=len), configs["greedy"],
                            with_draft_model(*configs.values()))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hog else None
    try:
        with args.out.open("w", encoding="utf-8") as out:
            for i, (category, prompt) in enumerate(prompts, 1):
                def said(line: str, i: int = i) -> None:
                    print(f"prompt {i} of {len(prompts)}: {line}", file=sys.stderr, flush=True)

                rows = bench(lm, prompt, configs, runs=args.rounds, draft=draft, progress=said)
                for row in rows:
                    out.write(json.dumps({"category": category, "prompt": prompt, "hog": args.hog,
                                          **row.to_dict()}) + "\n")
                out.flush()
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


if __name__ == "__main__":
    main()
