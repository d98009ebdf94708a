"""Two branches side by side from where they part: each one's text from the fork, and its figures (length,
sum log-prob, perplexity, finish), all from its own events."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from ..branches import Branch, BranchTree


def figures(branch: Branch, fork: int) -> str:
    """The branch's figures, and the log-prob of its part after the fork (what the comparison is about)."""
    done = branch.finished
    after = [t.logprob for t in branch.tokens[fork:] if t.logprob is not None]
    lines = [f"#{branch.number}: {len(branch.tokens)} tokens, {len(branch.tokens) - fork} after the fork"]
    if done is not None and done.sum_logprob is not None and done.perplexity is not None:
        lines.append(f"sum log-prob {done.sum_logprob:.2f} · perplexity {done.perplexity:.2f}")
    if after:
        lines.append(f"after the fork: sum log-prob {sum(after):.2f}, mean {sum(after) / len(after):.3f}")
    lines.append(f"finish: {done.finish_reason}" if done else "still running")
    return "\n".join(lines)


class CompareBranches(ModalScreen[None]):
    CSS_PATH = "compare_branches.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close", id="compare.close")]

    def __init__(self, tree: BranchTree, a: int, b: int) -> None:
        super().__init__()
        self.family, self.a, self.b = tree, a, b

    def compose(self) -> ComposeResult:
        fork = self.family.fork_point(self.a, self.b)
        shared = "".join(t.text for t in self.family.branches[self.a].tokens[:fork])
        with Vertical(id="compare-box"):
            yield Label(f"#{self.a} and #{self.b} share {fork} tokens: …{shared[-60:]!r}; from there · esc closes",
                        id="compare-title")
            with Horizontal(id="compare-sides"):
                for number in (self.a, self.b):
                    branch = self.family.branches[number]
                    with Vertical(classes="compare-side"):
                        yield Static(figures(branch, fork), classes="compare-figures")
                        yield Static("".join(t.text for t in branch.tokens[fork:]), classes="compare-text")

    def action_close(self) -> None:
        self.dismiss(None)
