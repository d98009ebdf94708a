"""Token trees: many drafted continuations verified in one forward pass (SpecInfer, Miao et al., 2023).

A drafter that has several guesses for what follows (every earlier match of an n-gram, a draft model's
runners-up) proposes them as a tree: continuations sharing their prefixes, each node one token. The target
reads the pending token and every node in one forward pass. Each node attends to the cache and to its own
ancestors only (a tree attention mask), at the position its depth gives it, so its logits are those the
target would give after the node's own path, as if that path alone had been fed. The verifier then follows
the target's choice down the tree from the root and keeps that path's keys and values, moved to where a chain's
would be: nothing is fed again.

A chain is the tree whose nodes each have one child: ``TokenTree.from_chains([draft])``.

Rows of a tree forward: row 0 is the pending token (depth 0, the root), row 1 + i is node i. Nodes are in
topological order (a parent before its children), as the papers' trees are laid out.

The forward over a tree (its attention mask, its positions, the keys and values kept) is
:mod:`~decode_tui.core.execution.tree_attention`; this module is the tree alone, with no torch, so that the app can
draw a recorded tree before it has imported torch. It knows nothing of drafters, sampling or events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ROOT = -1  # the parent of the root's children: the pending token


@dataclass(frozen=True)
class TokenTree:
    """Drafted tokens as a tree: node i holds ``tokens[i]`` and follows ``parents[i]`` (ROOT, or an earlier node)."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents):
            raise ValueError("a token tree needs one parent per token")
        for i, parent in enumerate(self.parents):
            if not ROOT <= parent < i:
                raise ValueError(f"node {i}'s parent {parent} is not an earlier node or the root (-1)")

    @classmethod
    def from_chains(cls, chains: Sequence[Sequence[int]]) -> TokenTree:
        """The trie of ``chains``: continuations that start alike share their nodes, in the order first met."""
        tokens: list[int] = []
        parents: list[int] = []
        child: dict[tuple[int, int], int] = {}  # (parent, token) -> node
        for chain in chains:
            parent = ROOT
            for token in chain:
                node = child.get((parent, token))
                if node is None:
                    node = child[(parent, token)] = len(tokens)
                    tokens.append(token)
                    parents.append(parent)
                parent = node
        return cls(tuple(tokens), tuple(parents))

    def __len__(self) -> int:
        return len(self.tokens)

    def depths(self) -> list[int]:
        """Each node's depth: 1 for the root's children (the pending token is depth 0)."""
        depth: list[int] = []
        for parent in self.parents:
            depth.append(1 if parent == ROOT else depth[parent] + 1)
        return depth

    @property
    def depth(self) -> int:
        """The deepest node's depth: the most tokens one verification of the tree can accept (0 for no nodes)."""
        return max(self.depths(), default=0)

    def first_branch(self) -> list[int]:
        """The nodes of the first branch (the first child at every node), root first: the chain a drafter of
        chains would have drafted, where the tree was grown from it."""
        branch, node = [], ROOT
        while children := self.children(node):
            node = children[0]
            branch.append(node)
        return branch

    def children(self, node: int) -> list[int]:
        """The nodes that follow ``node`` (ROOT: the pending token), in order."""
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def path_to(self, node: int) -> list[int]:
        """The nodes from the root's child down to ``node``, in order."""
        path = []
        while node != ROOT:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def child(self, node: int, token: int) -> int | None:
        """The child of ``node`` (ROOT: the pending token) that holds ``token``, if one does."""
        return next((c for c in self.children(node) if self.tokens[c] == token), None)

    def walk(self, tokens: Sequence[int]) -> list[int]:
        """The nodes that ``tokens`` follow down from the root, one a token, up to the first that is no child of the
        node reached: the path a round that emitted ``tokens`` kept of this tree."""
        path: list[int] = []
        for token in tokens:
            node = self.child(path[-1] if path else ROOT, token)
            if node is None:
                break
            path.append(node)
        return path

    def below(self, node: int) -> list[int]:
        """Every node under ``node`` (its children, theirs, ...), in order."""
        under = {node}
        for i in range(node + 1, len(self.tokens)):  # parents come first
            if self.parents[i] in under:
                under.add(i)
        return sorted(under - {node})

    def kept(self, keep: Sequence[bool]) -> tuple[TokenTree, list[int]]:
        """The tree of the nodes ``keep`` marks whose ancestors are all kept (a node left out takes its subtree
        with it), and for each new node its index in this tree."""
        index: dict[int, int] = {ROOT: ROOT}
        tokens: list[int] = []
        parents: list[int] = []
        old: list[int] = []
        for i, (token, parent) in enumerate(zip(self.tokens, self.parents, strict=True)):
            if keep[i] and parent in index:
                index[i] = len(tokens)
                tokens.append(token)
                parents.append(index[parent])
                old.append(i)
        return TokenTree(tuple(tokens), tuple(parents)), old

    def is_chain(self) -> bool:
        return all(parent == i - 1 for i, parent in enumerate(self.parents))


def greedy_path(tree: TokenTree, choice: Sequence[int]) -> tuple[list[int], int]:
    """Follow the target's own choice down the tree: ``choice[r]`` is its token at row r (0 the pending token,
    1 + i node i). Returns the nodes accepted, root first, and the target's token after the last of them (the
    correction, or the bonus token after a whole path)."""
    path: list[int] = []
    node = ROOT
    while True:
        wanted = choice[node + 1]
        follow = tree.child(node, wanted)
        if follow is None:
            return path, wanted
        path.append(follow)
        node = follow
