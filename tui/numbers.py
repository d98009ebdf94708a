"""How the app writes probabilities: small ones keep their digits instead of reading as zero, and bars.

It knows numbers, not widgets.
"""

from __future__ import annotations


def prob(p: float) -> str:
    """``0.83``, ``0.12``; below 0.1 two significant digits (``0.013``, ``0.002``, ``4.1e-05``), never ``0.00``
    for a probability that is not zero: a token drawn with p = 0.002 is the lesson, not a rounding error. Two
    decimals there read p = 0.0128 and q = 0.0200 as 0.01 and 0.02, beside a test of u against p / q = 0.64."""
    if p == 0.0 or p >= 0.0995:  # from 0.0995 two significant digits would round to 0.1: two decimals, 0.10
        return f"{p:.2f}"
    return f"{p:.2g}"


def percent(p: float) -> str:
    """A candidate's share as a percentage, six cells wide: ``83.0%``, ``0.2%``, ``<0.1%`` (not ``0.0%``)."""
    if 0.0 < p < 0.0005:
        return " <0.1%"
    return f"{p:6.1%}"


def cut_at(p: float) -> str:
    """A probability threshold on the candidates' scale (a percentage, one decimal, as the bars beside it say
    theirs: ``4.3%``), with two significant digits where one decimal would read as nothing (``0.03%``)."""
    return f"{p:.1%}" if p >= 0.001 or p == 0.0 else f"{p * 100:.2g}%"


EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(p: float, width: int) -> str:
    """``p`` (0 to 1) as a bar up to ``width`` cells, in eighths of a cell, so that 6 % and 0.4 % differ in a
    short bar (whole cells drew both as one); never empty for a probability that is not zero."""
    eighths = round(max(0.0, min(p, 1.0)) * width * 8)
    if p > 0 and eighths == 0:
        eighths = 1
    full, rest = divmod(eighths, 8)
    return "█" * full + (EIGHTHS[rest] if rest else "")


def nth(index: int) -> int:
    """A token's or step's number on screen: counted from 1, as the lessons' narration and a reader count ("the
    third token" is token 3). The events' ``index`` and ``step`` count from 0 (docs/events.md); only the screen
    adds the one."""
    return index + 1


def given_tokens(kept: int | None, forced: int | None) -> str:
    """A branch's tokens that it did not decode, said beside the decoded ones: ``+3 kept, 2 forced``; empty where
    there are none."""
    said = [f"{kept} kept"] * bool(kept) + [f"{forced} forced"] * bool(forced)
    return f"+{', '.join(said)}" if said else ""


def decoded_tokens(decoded: int, kept: int | None = None, forced: int | None = None) -> str:
    """``12 tokens``, or for a run with a path ``5 tokens decoded (+1001 forced)``: tok/s and tokens per forward
    count only the decoded ones, so the figure says which they are."""
    given = given_tokens(kept, forced)
    return count(decoded, "token") + (f" decoded ({given})" if given else "")


def count(n: int, noun: str) -> str:
    """``1 token``, ``2 tokens``, ``1 target forward``: a figure with its noun in the right number."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def draft_counts(drafted: int, accepted: int, rounds: int | None = None, depth: int | None = None) -> str:
    """A run's draft counts, one definition wherever they are said (docs/events.md): the nodes drafted (a chain's
    tokens), the tokens kept (each round's kept path), their share, and the kept path a round on average:
    ``84 tokens kept of 85 nodes drafted (99%), a kept path of 7.6 a round``. Nodes where some round was a tree (its
    longest paths, ``depth``, add up to fewer than its nodes), drafted tokens otherwise."""
    unit = "nodes drafted" if depth is not None and depth < drafted else "drafted"
    said = f"{count(accepted, 'token')} kept of {drafted} {unit} ({accepted / drafted:.0%})" if drafted \
        else "nothing drafted"
    return said + (f", a kept path of {accepted / rounds:.1f} a round" if rounds else "")
