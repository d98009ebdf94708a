"""Prints the floor table from the two runs' JSON lines: each drafting mode's speed-up over greedy per prompt
(the ratio of medians, the rounds' range), and the tokens a forward, before and after the replay margin."""
import json
import statistics
import sys
from pathlib import Path

here = Path(__file__).parent
modes = ["speculative", "pld", "suffix", "recycle", "lookahead"]
for name in sys.argv[1:] or ["no-copy-710d4ec.json", "no-copy.json"]:
    rows = [json.loads(line) for line in (here / name).read_text().splitlines()]
    print(f"== {name}")
    for prompt in dict.fromkeys(r["prompt"] for r in rows):
        by = {r["mode"]: r for r in rows if r["prompt"] == prompt}
        cells = [f"{by[m]['speedup']:.2f}x ({by[m]['speedup_low']:.2f}-{by[m]['speedup_high']:.2f}), "
                 f"{by[m]['tokens_per_forward']:.2f}/fwd" for m in modes]
        same = all(by[m]["identical"] for m in modes)
        print(f"| {by['greedy']['category']}: {prompt.split(chr(10))[-1][:40]} ({by['greedy']['new_tokens']}) | "
              + " | ".join(cells) + f" | {'yes' if same else 'NO'} |")
    for m in modes:
        values = [r["speedup"] for r in rows if r["mode"] == m]
        print(f"{m}: median {statistics.median(values):.2f}x, lowest {min(values):.2f}x")
