"""A verified draft tree as lines of text: the accepted path first, then the branches the target left.

Each node is a line, indented by its depth under its parent: its verdict's glyph (✓ on the accepted path, ✗ where
the target's choice left the tree, · below that: never tested), its token, the target's p of it after its
parent's path, the draw u where sampling tested it, and where it was copied from. At every node the child on the
accepted path comes first, so a short panel (80x24) that cuts the bottom keeps the path and its nearest siblings.

It knows events and text; the panel that shows the lines knows styles and sizes.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.cells import cell_len, set_cell_size
from rich.style import Style
from rich.text import Text

from ..core.record.events import DraftProposed, DraftVerified
from ..core.token_tree import ROOT, TokenTree
from .numbers import prob

TOKEN_W = 14
MAX_INDENT = 8  # levels indented; deeper nodes stay at this indent (their depth is printed)


def ordered(tree: TokenTree, path: tuple[int, ...]) -> list[int]:
    """The nodes depth first, the child on ``path`` before its siblings at every node."""
    on_path = set(path)
    out: list[int] = []
    stack = [ROOT]
    while stack:
        node = stack.pop()
        if node != ROOT:
            out.append(node)
        children = tree.children(node)
        children.sort(key=lambda c: c not in on_path)  # stable: the path's child first, then drafted order
        stack.extend(reversed(children))
    return out


def tree_lines(proposed: DraftProposed, verified: DraftVerified, style: dict[str, Style],
               glyph: Callable[[str], str], compact: bool = False) -> Text:
    """The round's tree, one node a line (see the module's docstring); ``compact``: for a narrow panel, without
    the draws and the sources, so that each node keeps one line."""
    assert proposed.parents is not None
    tree = TokenTree(proposed.token_ids, proposed.parents)
    path = verified.path or ()
    depths = tree.depths()
    text = Text()
    for node in ordered(tree, path):
        v = verified.verdicts[node] if node < len(verified.verdicts) else None
        verdict = v.verdict if v is not None else "untested"
        indent = "  " * min(depths[node] - 1, MAX_INDENT)
        piece = repr(proposed.texts[node])
        if cell_len(piece) > TOKEN_W:
            piece = set_cell_size(piece, TOKEN_W - 1) + "…"
        mark = glyph(verdict) or {"accepted": "+", "rejected": "x"}.get(verdict, ".")
        text.append(f"  {indent}{mark}", style=style[verdict])
        text.append(f"{set_cell_size(piece, TOKEN_W)}", style=style[verdict])
        p = f" p {prob(v.p)}" if v is not None and verdict != "untested" else ""
        u = f" u {v.u:.2f}" if v is not None and v.u is not None and not compact else ""
        deep = f" (depth {depths[node]})" if depths[node] - 1 > MAX_INDENT else ""
        source = f"  {proposed.sources[node]}" if proposed.sources and not compact else ""
        text.append(f"{p}{u}{deep}{source}\n")
    return text

