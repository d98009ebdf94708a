"""Benchmark: resident memory with the target alone (greedy) and after switching to speculative mode.

What the app does when the mode switches: the target is loaded and has run, then the draft is built from it
(or loaded) and a speculative run goes. Each draft in a fresh process, so one's memory never hides another's.
Reports the resident set after the greedy run, after the speculative run, and the peak, in MB.

    python benchmarks/memory.py [--drafts int4,int8,layers:20] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, resource, sys
from decode_tui.core.drafting.drafters import load_draft
from decode_tui.core.model.loading import load_model
from decode_tui.core.params import DEMO_PROMPTS, DecodeConfig, DraftParams
from decode_tui.core.model.registry import resolve
from decode_tui.core.run import Run

def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024

lm = load_model(resolve("smollm2"))
prompt = DEMO_PROMPTS["speculative"]
list(Run(lm, prompt, DecodeConfig(max_new_tokens=32)).events())
greedy = rss()
draft = load_draft(lm, sys.argv[1])
list(Run(lm, prompt, DecodeConfig(mode="speculative", max_new_tokens=32, draft=DraftParams(draft=sys.argv[1])),
         draft=draft).events())
speculative = rss()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"draft": sys.argv[1], "greedy_mb": greedy, "speculative_mb": speculative, "peak_mb": peak,
                  "ratio": speculative / greedy}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafts", default="int4,int8,layers:20,self")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for spec in args.drafts.split(","):
        done = subprocess.run([sys.executable, "-c", CHILD, spec], capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"{spec:>12}: greedy {row['greedy_mb']:.0f} MB, speculative {row['speculative_mb']:.0f} MB "
              f"({row['ratio']:.2f}x), peak {row['peak_mb']:.0f} MB", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
