"""How the app writes probabilities: small ones keep their digits instead of reading as zero.

It knows numbers, not widgets.
"""

from __future__ import annotations


def prob(p: float) -> str:
    """``0.83``, ``0.05``; below 0.005 two significant digits (``0.002``, ``4.1e-05``), never ``0.00`` for a
    probability that is not zero: a token drawn with p = 0.002 is the lesson, not a rounding error."""
    if p == 0.0 or p >= 0.005:
        return f"{p:.2f}"
    return f"{p:.2g}"


def percent(p: float) -> str:
    """A candidate's share as a percentage, six cells wide: ``83.0%``, ``0.2%``, ``<0.1%`` (not ``0.0%``)."""
    if 0.0 < p < 0.0005:
        return " <0.1%"
    return f"{p:6.1%}"
