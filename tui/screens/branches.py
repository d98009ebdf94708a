"""The branches: a tree of every path forked in this run, each with where it forks, what was forced and how
likely it was, its length, sum log-prob, perplexity and finish. ``enter`` shows one (from its own events,
nothing decoded again); ``c`` compares the highlighted one with the one on screen, side by side from their fork."""

from __future__ import annotations

from typing import ClassVar, Literal

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Tree
from textual.widgets.tree import TreeNode

from ..branches import BranchTree

Picked = tuple[Literal["show", "compare"], int]


class BranchesScreen(ModalScreen[Picked | None]):
    CSS_PATH = "branches.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "compare", "Compare with the branch on screen", id="branches.compare"),
        Binding("escape", "cancel", "Close", id="branches.close"),
    ]

    def __init__(self, tree: BranchTree, states: dict[int, str] | None = None) -> None:
        """``states``: what the unfinished branches' runs are doing (running, paused); the others were stopped."""
        super().__init__()
        self.family = tree
        self.states = states or {}

    def compose(self) -> ComposeResult:
        with Vertical(id="branches-box"):
            yield Label(f"Branches ({len(self.family.branches)}; #{self.family.current} on screen) · enter shows one · "
                        "c compares it with the one on screen · esc closes", id="branches-title")
            widget: Tree[int] = Tree("this prompt", id="branches-tree")
            widget.show_root = False
            nodes: dict[int, TreeNode[int]] = {}
            for _, branch in self.family.rows():
                parent = nodes.get(branch.parent, widget.root) if branch.parent is not None else widget.root
                mark = "▶ " if branch.number == self.family.current else ""
                label = mark + branch.summary(self.states.get(branch.number, "stopped"))
                nodes[branch.number] = parent.add(label, data=branch.number, expand=True, allow_expand=False)
            yield widget

    def on_mount(self) -> None:
        tree = self.query_one(Tree)
        tree.focus()
        for node in tree.root.children:  # the first run is highlighted first
            tree.move_cursor(node)
            break

    def _highlighted(self) -> int | None:
        node = self.query_one(Tree).cursor_node
        return node.data if node is not None else None

    def on_tree_node_selected(self, event: Tree.NodeSelected[int]) -> None:
        if event.node.data is not None:
            self.dismiss(("show", event.node.data))

    def action_compare(self) -> None:
        number = self._highlighted()
        if number is not None:
            self.dismiss(("compare", number))

    def action_cancel(self) -> None:
        self.dismiss(None)
