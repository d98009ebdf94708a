"""A tree round's host work after its forward, greedy: ``tree_distributions`` (the target's p at every row) and
``accept_tree`` (the choice followed down the tree, the verdicts, the emitted tokens' figures), on random logits of
SmolLM2's vocabulary, binary trees of 5 and 15 nodes, median of 200.

    python benchmarks/results/cpu-2026-12-06-keys/acceptance_host.py     # from the repository root, the venv active
"""

from __future__ import annotations

import statistics
import time

import torch

from decode_tui.core.strategies.tree_acceptance import accept_tree, tree_distributions
from decode_tui.core.token_tree import TokenTree

if __name__ == "__main__":
    torch.manual_seed(0)
    for n in (5, 15):
        tree = TokenTree(tuple(range(100, 100 + n)), (-1, *(i // 2 for i in range(n - 1))))
        logits = torch.randn(n + 1, 49152)
        spent: dict[str, list[float]] = {"distributions": [], "acceptance": []}
        for _ in range(200):
            started = time.perf_counter()
            p = tree_distributions([], list(range(50)), tree, logits)
            between = time.perf_counter()
            accept_tree(p, tree, True, None, raw=logits)
            spent["distributions"].append(between - started)
            spent["acceptance"].append(time.perf_counter() - between)
        print(f"{n} nodes: " + ", ".join(f"{name} {statistics.median(s) * 1e3:.2f} ms" for name, s in spent.items()))
