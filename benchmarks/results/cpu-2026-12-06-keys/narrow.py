"""The price of narrow forwards on this CPU: floor_priced.py's ``priced_widths`` for 1-8 positions after the open
prompts' context (94 tokens), 24 rounds, the widths in turn; three processes' worth in one, each a fresh cache.

    python benchmarks/results/cpu-2026-12-06-keys/narrow.py     # from the repository root, the venv active
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from floor_priced import priced_widths

MODEL = Path.home() / ".cache/decode-tui/models/smollm2"

if __name__ == "__main__":
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.bfloat16).eval()
    widths = {1, 2, 3, 4, 6, 8, 16}
    for repeat in range(3):
        prices = priced_widths(model, 94, widths, 24)
        print(f"repeat {repeat + 1}: " + "  ".join(f"{w}: {prices[w] * 1e3:.2f} ms ({prices[w] / prices[1]:.3f})"
                                                    for w in sorted(widths)), flush=True)
