"""Suffix drafting (SuffixDecoding, Oliaro et al., 2024, arXiv 2411.04975): draft trees copied from everything the
session has seen, with no draft model.

Two suffix trees (:mod:`~decode_tui.core.drafting.suffix_tree`): one over this run's prompt and output, grown as tokens
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
import re
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UsageError
from ..model.acquire import drive
from ..token_tree import TokenTree
from .drafters import Draft, Replay
from .replay import Trace, replay_so_far, replay_widths
from .suffix_array import SuffixArray, build
from .suffix_tree import Speculation, SuffixTree

if TYPE_CHECKING:
    import torch
    from transformers import LogitsProcessor

    from ..model.loading import LoadedModel
    from ..params import DecodeConfig, DraftParams
    from ..record.events import Event, Stage, TokenSource
    from ..record.transcript import Transcript

# The most history text a run reads (all --history files together). An index over it needs about 70 bytes a token
# while it is built and 8 at rest (core/drafting/suffix_array.py), at about 4 bytes of English text a token.
MAX_HISTORY_BYTES = 64 * 2**20
_CHUNK_BYTES = 2**18  # a text is tokenised a chunk at a time: progress between chunks, and a stop there


@dataclass(frozen=True)
class HistoryFiles:
    """The ``--history`` files, tokenised and indexed once: what each gave, and the suffix array over it all."""

    index: SuffixArray
    origins: tuple[str, ...]


@dataclass
class SuffixHistory:
    """What a suffix run drafts from besides its own text: earlier runs of the session (a suffix tree, grown a run
    at a time) and the ``--history`` files (a suffix array, built once)."""

    tree: SuffixTree = field(default_factory=SuffixTree)
    origins: list[str] = field(default_factory=list)
    tokens: list[tuple[int, ...]] = field(default_factory=list)
    files: HistoryFiles | None = None

    def add(self, token_ids: Sequence[int], origin: str) -> None:
        """An earlier output joins the history (a finished run)."""
        if token_ids:
            self.tree.add(token_ids)
            self.origins.append(origin)
            self.tokens.append(tuple(token_ids))

    def snapshot(self) -> SuffixHistory:
        """A copy that later additions to this one do not change: what a measured run drafts from. The files'
        index is shared: nothing changes it."""
        copy = SuffixHistory(files=self.files)
        for tokens, origin in zip(self.tokens, self.origins, strict=True):
            copy.add(tokens, origin)
        return copy

    def count(self, tokens: Sequence[int]) -> int:
        """How many times ``tokens`` occurred in the earlier runs and the files."""
        return self.tree.count(tokens) + (self.files.index.count(tokens) if self.files is not None else 0)

    def speculate(self, context: Sequence[int], max_tokens: int) -> Speculation:
        """The better draft (the higher score) of the earlier runs' tree and the files' index."""
        runs = self.tree.speculate(context, max_tokens)
        if self.files is None:
            return runs
        files = self.files.index.speculate(context, max_tokens)
        return files if files.score > runs.score else runs

    def __len__(self) -> int:
        """The earlier runs held."""
        return len(self.tokens)


def check_history_files(paths: Sequence[FilePath], traces: bool = True) -> None:
    """Refuse, before any model loads, a ``--history`` list that cannot give anything to draft from: a missing
    file, a folder, a file named twice, an empty or binary file, a trace whose runs are damaged or that holds no
    output, or more than MAX_HISTORY_BYTES in all. Each UsageError says what to do. ``traces``: also check each
    jsonl trace's lines (a reader about to read them anyway leaves that to its own reading); one over
    PARSED_AT_ONCE is only searched for its ``finished`` line here, and its lines are checked as it is read, where
    the reading says how far along it is."""

    seen: dict[FilePath, int] = {}
    for path in paths:
        if path.is_dir():
            raise UsageError(f"--history {path}: is a folder. Name the files in it: a recording, a `generate "
                             "--format jsonl` trace or a text file.")
        if not path.is_file():
            raise UsageError(f"--history {path}: no such file. Name a recording, a `generate --format jsonl` "
                             "trace or a text file.")
        seen[path.resolve()] = seen.get(path.resolve(), 0) + 1
    for path, n in seen.items():
        if n > 1:
            raise UsageError(f"--history {path} is given {n} times: each file counts once. Give it once.")
    total = sum(path.stat().st_size for path in seen)
    if total > MAX_HISTORY_BYTES:
        raise UsageError(f"--history: {total / 2**20:.1f} MB of history in all, over the {MAX_HISTORY_BYTES // 2**20} "
                         f"MB a run reads (its index takes memory in proportion). Give the most relevant part: "
                         "earlier outputs of the same task draft best.")
    for path in paths:
        size = path.stat().st_size
        if size == 0:
            raise UsageError(f"--history {path}: the file is empty: nothing to draft from in it.")
        try:
            with path.open("rb") as f:
                head = f.read(65536)
        except OSError as exc:
            raise UsageError(f"--history {path}: cannot be read ({exc.strerror}).") from None
        if b"\0" in head or not _utf8(head, whole=size <= len(head)):
            raise UsageError(f"--history {path}: not UTF-8 text (a binary file?). Name a recording, a `generate "
                             "--format jsonl` trace or a text file.")
        if _is_jsonl(head.decode("utf-8", errors="ignore")):
            if not traces:
                continue
            from ..record.events import Finished

            finished = _has_finished(path) if size > PARSED_AT_ONCE else \
                any(isinstance(e, Finished) for e in drive(_outputs(path)))
            if not finished:
                raise UsageError(f"--history {path}: a trace with no `finished` event (cut off before its run "
                                 "ended?): nothing to draft from in it. Name a complete one.")
        elif size <= len(head) and not head.strip():
            raise UsageError(f"--history {path}: only white space: nothing to draft from in it.")


def _utf8(head: bytes, whole: bool) -> bool:
    """Whether ``head`` (a file's first bytes; ``whole``: all of it) is UTF-8, a character cut at its end allowed."""
    for cut in (0,) if whole else range(4):
        try:
            head[: len(head) - cut].decode("utf-8")
            return True
        except UnicodeDecodeError:
            continue
    return False


def reading_history(paths: Sequence[FilePath], encode: Callable[[str], list[int]], model: str,
                    ) -> Generator[str, None, HistoryFiles]:
    """Read, tokenise and index ``--history`` files, yielding how far along it is between steps (a caller says so,
    or stops there). A jsonl trace or recording gives each run's output (its token ids when ``model`` made them,
    else its text, tokenised anew); any other file is plain text, tokenised a chunk at a time. A UsageError for a
    file that cannot be read or gives no tokens."""
    from ..record.events import Finished, Started

    check_history_files(paths, traces=False)  # the traces are parsed below, and refused there if they give nothing
    sequences: list[np.ndarray] = []
    origins: list[str] = []
    for path in paths:
        before = len(sequences)
        try:
            with path.open("rb") as f:
                jsonl = _is_jsonl(f.read(65536).decode("utf-8", errors="ignore"))
        except OSError as exc:
            raise UsageError(f"--history {path}: cannot be read ({exc.strerror}).") from None
        if jsonl:
            events = yield from _outputs(path)
            started = next((e for e in events if isinstance(e, Started)), None)
            for event in events:
                if isinstance(event, Finished) and event.token_ids:
                    same = started is not None and started.model == model
                    sequences.append(np.asarray(event.token_ids if same else encode(event.text), dtype=np.int32))
        else:
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"--history {path}: cannot be read as text ({exc}).") from None
            size, done, pieces = len(text), 0, []
            while done < size:
                end = text.find("\n", done + _CHUNK_BYTES) + 1 or size  # after a line break: no word is cut
                pieces.append(np.asarray(encode(text[done:end]), dtype=np.int32))
                done = end
                yield f"reading {path.name}: {_bar(done, size)} {done / 2**20:.1f} of {size / 2**20:.1f} MB tokenised"
            sequences.append(np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32))
        if not any(len(s) for s in sequences[before:]):
            raise UsageError(f"--history {path}: nothing to draft from in it (no output, no text).")
        origins.append(path.name)
        yield f"read {path.name}"
    index = yield from build(sequences)
    return HistoryFiles(index, tuple(origins))


def _bar(done: int, total: int, width: int = 20) -> str:
    """How far along, drawn: ``▕██████░░░░▏``."""
    filled = round(width * done / total) if total else width
    return "▕" + "█" * filled + "░" * (width - filled) + "▏"


def _outputs(path: FilePath) -> Generator[str, None, list[Event]]:
    """A trace's or recording's ``started`` and ``finished`` events (what a history needs: the outputs and who made
    them), every line checked as :func:`~decode_tui.core.record.traces.read_events` checks it, yielding how many MB
    it has read as it goes (a big history's reading was a long silence)."""
    from ..record.events import Finished, Started
    from ..record.traces import line_event

    events: list[Event] = []
    size, done = max(1, path.stat().st_size), 0
    try:
        with path.open("rb") as f:
            for number, raw in enumerate(f, start=1):
                done += len(raw)
                if number % 2000 == 0:
                    yield f"reading {path.name}: {_bar(done, size)} {done / 2**20:.1f} of {size / 2**20:.1f} MB read"
                event = line_event(path, number, raw, "--history")
                if isinstance(event, Started | Finished):
                    events.append(event)
    except OSError as exc:
        raise UsageError(f"--history {path}: cannot be read ({exc.strerror}).") from None
    return events


PARSED_AT_ONCE = 4 * 2**20  # a trace up to this size is checked line by line before the model loads: in a moment
_FINISHED = re.compile(rb'"event"\s*:\s*"finished"')


def _has_finished(path: FilePath) -> bool:
    """Whether a trace holds a ``finished`` line, found without parsing it (each line is checked as it is read)."""
    with path.open("rb") as f:
        tail = b""
        while chunk := f.read(2**20):
            if _FINISHED.search(tail + chunk):
                return True
            tail = chunk[-64:]
    return False


def read_history(paths: Sequence[FilePath], encode: Callable[[str], list[int]], model: str,
                 history: SuffixHistory) -> None:
    """:func:`reading_history` run to its end, into ``history``."""
    history.files = drive(reading_history(paths, encode, model))


# The files read last, and what they were read for: a suffix run's warm-up, the run itself and every restart of it
# in the app read the same files, which are then tokenised and indexed once.
_LAST_READ: list[tuple[object, HistoryFiles]] = []


def history_files(paths: Sequence[FilePath], encode: Callable[[str], list[int]], model: str, tokenizer: object,
                  ) -> Generator[str, None, HistoryFiles]:
    """:func:`reading_history`, unless the same files (by path, size and modification time) were read last for the
    same model and tokenizer: then their index again, at once."""
    key = (tuple((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in paths if p.is_file()),
           model, id(tokenizer))
    if _LAST_READ and _LAST_READ[0][0] == key:
        return _LAST_READ[0][1]
    _LAST_READ.clear()  # the old index goes before the new one is built: one at a time in memory
    files = yield from reading_history(paths, encode, model)
    _LAST_READ.append((key, files))
    return files


def history_files_for(lm: LoadedModel, config: DecodeConfig) -> Generator[str, None, HistoryFiles]:
    """The ``--history`` files of ``config``, read for ``lm`` (its tokenizer, its name for traces' token ids)."""
    return history_files([FilePath(p) for p in config.draft.history],
                         lambda text: list(lm.tokenizer.encode(text, add_special_tokens=False)), lm.name,
                         lm.tokenizer)


def _is_jsonl(text: str) -> bool:
    """Whether ``text``'s first non-blank line is a JSON object: read off that line alone, however long the text."""
    start = len(text) - len(text.lstrip())
    end = text.find("\n", start)
    first = text[start:] if end < 0 else text[start:end]
    try:
        return isinstance(json.loads(first), dict)
    except json.JSONDecodeError:
        return False


class SuffixDrafter:
    """A drafter (:class:`~decode_tui.core.drafting.drafters.Drafter`) of suffix trees: this run's and the history's."""

    kind = "lookup"
    source: TokenSource = "lookup"
    free_to_ask = True
    stops_itself = False
    ranked = False  # its replay prices each draft length exactly: the policy does not cut its trees
    learns = False

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
        self._follow(context)
        depth = min(k, self.num_pred_tokens)
        if depth < 1:
            return Draft([])
        # Each tree's longest match. The run's tree holds the context's end too, but a suffix is drafted only
        # from what followed its earlier occurrences: nothing follows the context's own end yet.
        # The budget caps a tree's nodes, not a chain's length: where the text seen before continues one way only
        # (a task repeated), a chain as deep as the draft length pays where a tree that wide would not.
        ours = self.run.speculate(context, max(self.tree_budget, depth))
        theirs = self.history.speculate(context, max(self.tree_budget, depth))
        best, source = (ours, "this run") if ours.score >= theirs.score else (theirs, "earlier runs")
        tree = self._trimmed(best, depth)
        if not tree.is_chain() and len(tree) > self.tree_budget:  # the first nodes grown, best first: a tree's own
            tree = tree.kept([i < self.tree_budget for i in range(len(tree))])[0]
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

    def observed(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        pass  # it learns nothing from the target

    def prefilled(self, context: list[int], cache: object) -> None:
        pass

    def replay(self, transcript: Transcript) -> Replay | None:
        return replay_so_far(transcript, lambda: SuffixMemo(self, transcript.eos_token_ids),
                             lambda: (self.num_pred_tokens, self.tree_budget))

    def draft_length(self, params: DraftParams) -> int:
        return params.length("num_pred_tokens")

    def time_step(self, context: list[int], processors: list[tuple[Stage, LogitsProcessor]]) -> float:
        return 0.0  # a draft from the trees runs no forward

    def tune(self, params: DraftParams) -> None:
        self.num_pred_tokens = params.num_pred_tokens
        if params.tree_budget is not None:
            self.tree_budget = params.tree_budget

    def close(self) -> None:
        pass


class SuffixMemo:
    """Suffix drafting's replay widths for every k, each position's draft made once.

    Suffix drafting's tree at draft length k is its deepest tree with the nodes deeper than k left out (the trees
    it grows do not depend on k), so one tree per position serves the replays of every k. The trees are made in
    the order of the text, so the memo's own drafter grows its tree of the run a token at a time, as the live one
    does; it drafts from the same history.
    """

    def __init__(self, drafter: SuffixDrafter, eos_token_ids: frozenset[int]) -> None:
        self.eos_token_ids = eos_token_ids
        self.settings = (drafter.num_pred_tokens, drafter.tree_budget)
        self.drafter = SuffixDrafter(drafter.history, drafter.num_pred_tokens, drafter.tree_budget, eos_token_ids)
        self.trees: list[TokenTree] = []  # trees[i]: the draft after the prompt and the first i + 1 tokens

    def widths(self, trace: Trace, k: int) -> tuple[int, ...]:
        """The widths of the target's forwards greedy suffix drafting with draft length ``k`` would have used."""
        text = [*trace.prompt_ids, *trace.token_ids]
        for i in range(len(self.trees), len(trace.token_ids)):  # the positions not drafted yet, in order
            draft = self.drafter.propose(text[: len(trace.prompt_ids) + i + 1], self.drafter.num_pred_tokens, [],
                                         True, None)
            self.trees.append(draft.tree or TokenTree.from_chains([draft.token_ids]))
        start = len(trace.prompt_ids)

        def propose(context: list[int], _emitted: int, room: int) -> TokenTree:
            tree = self.trees[len(context) - start - 1]
            return tree.kept([depth <= room for depth in tree.depths()])[0]

        return tuple(replay_widths(trace, self.eos_token_ids, min(k, self.drafter.num_pred_tokens), propose)[1])
