"""The draft's cost on screen: c, Leviathan et al.'s predicted speed-up and what the run did, as one line.

Shown by the speculative panel, the forwards screen and ``decode-tui bench`` alike. A module of its own, with
nothing but the core's draft counters behind it, so the app's panels import it without what the forwards
views need (the what-if, and torch with it): the app draws before torch is imported. It measures nothing.
"""

from __future__ import annotations

from ..core.draft_stats import DraftStats, predicted_speedup


def cost_line(stats: DraftStats, measured: float | None = None, short: bool = False) -> str | None:
    """The draft's cost ratio c and what Leviathan et al.'s formula predicts from it, beside what the run did:
    ``measured`` (``bench``: against greedy itself), else the rounds' own pace against a plain step. None before
    a draft round after the first was timed. For a draft model only: callers leave prompt lookup out, whose copy
    costs no forward. ``short``: the figures alone, for the speculative panel."""
    c, alpha, k, predicted = stats.cost_ratio(), stats.alpha(), stats.gamma(), stats.predicted()
    if c is None or alpha is None or k is None or predicted is None:
        return None
    if short:
        observed = stats.observed()
        return (f"draft cost c {c:.2f} of a step · Leviathan (1-a^(k+1))/((1-a)(kc+1)) {predicted:.2f}x at a "
                f"{alpha:.2f}, k {k:.1f}" + (f" · this run {observed:.2f}x" if observed is not None else ""))
    line = (f"draft cost c = {c:.2f} of a target step: (1 - a^(k+1)) / ((1 - a)(k c + 1)) at a = {alpha:.2f}, "
            f"k = {k:.1f} predicts {predicted:.2f}x")
    verify = stats.verify_steps()
    if verify is not None and verify > 1.05:  # the formula counts a verification as one step
        line += (f"; a verification costs {verify:.2f} steps here, which makes it "
                 f"{predicted_speedup(alpha, k, c, verify):.2f}x")
    observed = measured if measured is not None else stats.observed()
    if observed is not None:
        line += f"; measured {observed:.2f}x" + ("" if measured is not None else " (the rounds against a plain step)")
    return line
