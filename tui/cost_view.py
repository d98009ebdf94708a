"""The draft's cost on screen: c, Leviathan et al.'s predicted speed-up and what the run did, as one line.

Shown by the speculative panel, the forwards screen and ``decode-tui bench`` alike. A module of its own, with
nothing but the core's draft counters behind it, so the app's panels import it without what the forwards
views need (the what-if, and torch with it): the app draws before torch is imported. It measures nothing.
"""

from __future__ import annotations

from ..core.record.draft_stats import DraftStats


def cost_line(stats: DraftStats, measured: float | None = None, short: bool = False) -> str | None:
    """The run's one prediction and what it rests on, beside what the run did: c (a draft forward over a plain
    step), v (a verification over a plain step; the paper counts it as 1), the per-position acceptance a and the
    mean draft length k, through Leviathan et al.'s (1 - a^(k+1)) / ((1 - a)(k c + v)). ``measured`` (``bench``:
    against greedy itself), else the rounds' own pace against the plain step; a measured speed-up far from the
    prediction says the likely cause. None before a draft round after the first was timed. For a draft model
    only: callers leave prompt lookup out, whose copy costs no forward. ``short``: the figures alone, for the
    speculative panel."""
    c, alpha, k, predicted = stats.cost_ratio(), stats.alpha(), stats.gamma(), stats.predicted()
    if c is None or alpha is None or k is None or predicted is None:
        return None
    v = stats.verify_steps() or 1.0
    observed = measured if measured is not None else stats.observed()
    far = stats.far_from_prediction(observed) if observed is not None else None
    step = stats.step_s()
    if short:
        return (f"c {c:.2f} · v {v:.2f} · predicted {predicted:.2f}x at a {alpha:.2f}, k {k:.1f}"
                + (f" · this run {observed:.2f}x" if observed is not None else "")
                + (" ⚠ far from it (f says why)" if far else ""))
    timed = "timed" if stats.plain_step_s is not None else "inferred from the verifications"
    line = (f"against a plain step of {step * 1e3:.1f} ms ({timed}): a draft forward costs c = {c:.2f} of it and "
            f"a verification v = {v:.2f}; (1 - a^(k+1)) / ((1 - a)(k c + v)) at a = {alpha:.2f}, k = {k:.1f} "
            f"predicts {predicted:.2f}x") if step is not None else ""
    if observed is not None:
        line += f"; measured {observed:.2f}x" + ("" if measured is not None else " (the rounds against the plain step)")
    if far is not None:
        line += f". Far from the prediction: {far}"
    return line
