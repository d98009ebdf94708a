"""Suffix drafting (SuffixDecoding, Oliaro et al., 2024, arXiv 2411.04975): draft trees copied from everything the
session has seen, with no draft model.

Two suffix trees (:mod:`~decode_tui.core.suffix_tree`): one over this run's prompt and output, grown as tokens
are confirmed, and one over earlier outputs (:class:`SuffixHistory`: earlier runs of the session and files the
user names with ``--history``). Each round both grow a draft tree for the context's end, and the one with the
higher score (the expected number of accepted tokens) is proposed. Its nodes are copies, so q is one-hot, and
the verifier accepts them with the tree rule (:mod:`~decode_tui.core.strategies.tree_acceptance`).

Fair figures: a measured run drafts from a snapshot of the history taken when it starts
(:meth:`SuffixHistory.snapshot`), and what it outputs joins the history only when its caller says so
(:meth:`SuffixHistory.add`), so a benchmark never learns from an earlier repeat of itself unless asked to.

It knows token ids, the trees and where the history came from; nothing of models or verification.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import TYPE_CHECKING, Literal

from .errors import UsageError
from .suffix_tree import Speculation, SuffixTree
from .token_tree import TokenTree

if TYPE_CHECKING:
    import torch
    from transformers import LogitsProcessor

    from .drafters import Draft
    from .events import Stage
    from .params import DraftParams

@dataclass
class SuffixHistory:
    """The suffix tree over earlier outputs, and what each came from (for messages and the panel)."""

    tree: SuffixTree = field(default_factory=SuffixTree)
    origins: list[str] = field(default_factory=list)
    tokens: list[tuple[int, ...]] = field(default_factory=list)

    def add(self, token_ids: Sequence[int], origin: str) -> None:
        """An earlier output joins the history (a finished run, a file)."""
        if token_ids:
            self.tree.add(token_ids)
            self.origins.append(origin)
            self.tokens.append(tuple(token_ids))

    def snapshot(self) -> SuffixHistory:
        """A copy that later additions to this one do not change: what a measured run drafts from."""
        copy = SuffixHistory()
        for tokens, origin in zip(self.tokens, self.origins, strict=True):
            copy.add(tokens, origin)
        return copy

    def __len__(self) -> int:
        return len(self.tokens)


def read_history(paths: Sequence[FilePath], encode: Callable[[str], list[int]], model: str,
                 history: SuffixHistory) -> None:
    """Add ``--history`` files to ``history``: a jsonl trace or recording gives each run's output (its token ids
    when ``model`` made them, else its text, tokenised anew); any other file is plain text, tokenised whole. A
    UsageError for a file that cannot be read or gives no tokens."""
    from .events import Finished, Started
    from .traces import read_events

    for path in paths:
        before = len(history)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UsageError(f"--history {path}: no such file. Name a recording, a `generate --format jsonl` "
                             "trace or a text file.") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--history {path}: cannot be read as text ({exc}).") from None
        if _is_jsonl(text):
            events = read_events(path, "--history")
            started = next((e for e in events if isinstance(e, Started)), None)
            for event in events:
                if isinstance(event, Finished):
                    same = started is not None and started.model == model
                    history.add(event.token_ids if same else encode(event.text), f"{path.name}")
        else:
            history.add(encode(text), path.name)
        if len(history) == before:
            raise UsageError(f"--history {path}: nothing to draft from in it (no output, no text).")


def _is_jsonl(text: str) -> bool:
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        return isinstance(json.loads(first), dict)
    except json.JSONDecodeError:
        return False


class SuffixDrafter:
    """A drafter (:class:`~decode_tui.core.drafters.Drafter`) of suffix trees: this run's and the history's."""

    kind: Literal["model", "lookup"] = "lookup"

    def __init__(self, history: SuffixHistory, num_pred_tokens: int, tree_budget: int,
                 eos_token_ids: frozenset[int] = frozenset()) -> None:
        if tree_budget < 1 or num_pred_tokens < 1:
            raise UsageError("Suffix drafting needs --tree-budget and --num-pred-tokens of at least 1.")
        self.history = history
        self.num_pred_tokens = num_pred_tokens  # the deepest path drafted: the most tokens a round can accept
        self.tree_budget = tree_budget
        self.eos_token_ids = eos_token_ids
        self.run = SuffixTree()
        self.seen: list[int] = []  # what the run's tree holds, in order

    def propose(self, context: list[int], k: int, processors: list[tuple[Stage, LogitsProcessor]], greedy: bool,
                generator: torch.Generator | None) -> Draft:
        from .drafters import Draft

        self._follow(context)
        depth = min(k, self.num_pred_tokens)
        if depth < 1:
            return Draft([])
        # Each tree's longest match. The run's tree holds the context's end too, but a suffix is drafted only
        # from what followed its earlier occurrences: nothing follows the context's own end yet.
        ours = self.run.speculate(context, self.tree_budget)
        theirs = self.history.tree.speculate(context, self.tree_budget)
        best, source = (ours, "this run") if ours.score >= theirs.score else (theirs, "earlier runs")
        tree = self._trimmed(best, depth)
        if not tree.tokens:
            return Draft([], stopped="no suffix of the text's end was seen before")
        match = (len(context) - best.match_length, len(context))
        if tree.is_chain():  # verified the chain's way (its cheapest width); still said where it came from
            return Draft(list(tree.tokens), match=match, sources=(source,) * len(tree))
        return Draft(list(tree.tokens), match=match, parents=tree.parents, sources=(source,) * len(tree))

    def _trimmed(self, speculation: Speculation, depth: int) -> TokenTree:
        """The draft tree without nodes deeper than ``depth`` or at an end-of-text token (the target decides itself
        whether to end), nor anything below them."""
        tree = speculation.tree
        depths = tree.depths()
        keep = [d <= depth and t not in self.eos_token_ids for d, t in zip(depths, tree.tokens, strict=True)]
        return tree.kept(keep)[0]

    def _follow(self, context: list[int]) -> None:
        """The run's tree over ``context``: grown by what was confirmed since the last round; built anew where
        the context is not a continuation of what it holds (a branch, a rewind, another run)."""
        n = len(self.seen)
        if context[:n] != self.seen:
            self.run, self.seen, n = SuffixTree(), [], 0
        self.run.extend(0, context[n:])
        self.seen = list(context)

    def rollback(self, confirmed: int) -> None:
        pass  # only confirmed tokens are ever added (from the context, at the next round)

    def prefilled(self, context: list[int], cache: object) -> None:
        pass

    def tune(self, params: DraftParams) -> None:
        self.num_pred_tokens = params.num_pred_tokens
        if params.tree_budget is not None:
            self.tree_budget = params.tree_budget

    def close(self) -> None:
        pass

