"""Token recycling: drafts grown from the target's own discarded guesses.

Luo et al., "Turning Trash into Treasure: Accelerating Inference of Large Language Models with Token Recycling"
(ACL 2025; reference code: github.com/Luowaterbi/TokenRecycling). For every token id the adjacency matrix ``M``
(V x k ids) holds the k most likely next tokens the target computed the last time it read that token. Each round a
draft tree is grown breadth-first from the pending token along a fixed template: node (parent, r) holds
``M[token of parent][r]``. The target verifies the tree in one forward (the verifier's tree attention), and every
row it read, kept or not, writes its top-k back into ``M``: the rejected branches are the recycled "trash".

Where the text's end occurred before, a round drafts what followed its longest earlier occurrence too. SAM-Decoding
(Hu et al., "SAM Decoding: Speculative Decoding via Suffix Automaton", ACL 2025; reference code:
github.com/hyx1999/SAM-Decoding, which pairs its retrieval with this very drafter) drafts that copy instead of the
tree where the match is ``RETRIEVED_MATCH`` tokens or more, as a chain verified whole. The matrix keys a guess by
one token, so it cannot follow a long copy (a code edit's) where prompt lookup can. A shorter match is a good guess
in code and a poor one in prose, so its copy is grafted onto the tree as one more branch (:func:`graft`), in place
of the tree's last-ranked nodes where the two would pass the budget (``Draft.within``), and verified past the policy's
cut where what grafts kept lately pays for their width. The longest match is found by a scan of the text
(:func:`retrieved`), where SAM-Decoding keeps a suffix automaton: the text is a prompt and an answer, and a scan of
it costs less than growing the tree.

The paper's template is a static tree of about 80 nodes, tuned on data; here it is grown best-first to the run's
tree budget (a few nodes on a small CPU, where each node costs a column of the forward), scoring a path by a prior
on how often the target picks its r-th guess (``RANK_PRIOR``). A row not yet filled grows nothing: on open-ended
text a third to a half of a cold run's tokens are new to it. There the round backs off, as Katz's back-off puts a
unigram model under a bigram one (Katz, "Estimation of probabilities from sparse data for the language model
component of a speech recognizer", 1987), to the text's ``COMMONEST`` most frequent tokens as the pending token's
children (:class:`Commonest`; ours, not the paper's, which drafts whatever an empty row holds). They are a tree of
no rank, verified where what such rounds kept lately pays for their width (``Draft.pinned``, as a graft's; a round
not verified is judged by the token its plain step emitted), so on a device where width is dear they cost nothing
but the counting.

It knows the matrix, the template and the Drafter protocol; nothing of verification or acceptance. The file the
matrix is kept in between runs is :mod:`.recycled_state`'s; the builder only says which, from the options.
"""

from __future__ import annotations

import contextlib
import heapq
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..token_tree import ROOT
from . import recycled_state
from .drafters import Draft, Drafter
from .lookup_tree import continuation
from .recycled_state import Loaded, load, save

if TYPE_CHECKING:
    from collections.abc import Sequence

    from transformers import LogitsProcessor

    from ..params import DraftParams
    from ..record.events import Stage, TokenSource
    from ..record.transcript import Transcript
    from .context import DraftingContext
    from .drafters import Replay

EMPTY = -1  # a cell of a row not filled yet
# A match of the text's end this long or longer drafts its copy instead of the tree: SAM-Decoding's
# ``len_threshold``. A shorter one's copy is grafted onto the tree.
RETRIEVED_MATCH = 4
MATCH_SCAN = 64  # a match is measured back this far at most: longer ones are as good a guess
# A prior on how often the target's next token is its r-th most likely guess of the last time it read the same
# token: what orders the template's nodes. Its shape matters more than its values (the paper's template is built
# from measured acceptance by rank in the same way).
RANK_PRIOR = (0.55, 0.15, 0.07, 0.04, 0.03, 0.02, 0.015, 0.01)
BLOCK = 256  # logits a block, for top_ids: a block's maximum is one vectorised pass, and k blocks a small topk
WRITTEN_SHOWN = 4  # rows written back since the last round that a draft's view shows (the newest)
# Where the pending token has no row: the text's most frequent tokens drafted as its children. Prose's commonest
# few (a comma, " the", " and", a full stop) follow a new word often enough to pay for a few columns where width is
# cheap; the policy drops them where it is not (BENCHMARKS.md, "Token recycling backs off to the text's commonest
# tokens").
COMMONEST = 5


class RecycledMatrix:
    """The adjacency matrix M [V, k]: row t holds the target's top-k next tokens after t, most likely first."""

    def __init__(self, vocab_size: int, k: int, rows: torch.Tensor | None = None) -> None:
        self.k = k
        self.rows = rows if rows is not None else torch.full((vocab_size, k), EMPTY, dtype=torch.int32)  # [V, k]
        self._filled = int((self.rows[:, 0] != EMPTY).sum())  # rows that hold guesses: counted once, then kept
        # (tokens, top-k) pairs whose writes wait for the next read: a topk on the device is queued now and read
        # back once, when the next draft needs the rows.
        self.pending: list[tuple[Sequence[int], torch.Tensor]] = []
        # The rows the last flush changed, as (token, row before, row after): what the view shows as written back.
        self.written: list[tuple[int, list[int], list[int]]] = []

    @property
    def vocab_size(self) -> int:
        return int(self.rows.shape[0])

    def filled(self) -> int:
        """How many rows hold guesses."""
        self.flush()
        return self._filled

    def observe(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        """The target read ``tokens`` and gave ``logits`` [n, V] after each: their rows become its top-k."""
        n = min(len(tokens), int(logits.shape[0]))
        if n:
            self.pending.append((tokens[:n], top_ids(logits[:n], self.k)))  # [n, k]

    def flush(self) -> None:
        if not self.pending:
            return
        self.written = []
        for tokens, top in self.pending:
            last = {t: i for i, t in enumerate(tokens) if 0 <= t < self.vocab_size}  # a later read of a token wins
            if last:
                top = top.to("cpu", torch.int32)
                at = torch.as_tensor(list(last.values()), dtype=torch.long)
                index = torch.as_tensor(list(last), dtype=torch.long)
                before = self.rows[index].clone()  # [n, k]
                self.rows[index, : top.shape[1]] = top[at]
                after = self.rows[index]  # [n, k]
                self._filled += int((before[:, 0] == EMPTY).sum())  # a row written is filled
                changed = (before != after).any(-1).tolist()
                self.written += [(token, before[i].tolist(), after[i].tolist())
                                 for i, token in enumerate(last) if changed[i]]
        self.pending.clear()

    def row(self, token: int) -> list[int]:
        self.flush()
        return self.rows[token].tolist() if 0 <= token < self.vocab_size else [EMPTY] * self.k


def top_ids(logits: torch.Tensor, k: int) -> torch.Tensor:
    """The ids of each row's k largest logits (``logits`` [n, V] -> [n, k]), largest first; among equal logits any.

    Written by hand around ``torch.topk``: on a CPU topk walks each row of the vocabulary as one, and every forward's
    rows pass through here (one a plain step, a tree's every node). The k largest lie in the k blocks of BLOCK
    logits whose maxima are largest (a block holding one of them, left out, would mean k blocks each holding a larger
    one), so topk runs over the block maxima and then over those k blocks: a vectorised pass over the row and two
    small topks, which take less time (BENCHMARKS.md, "Token recycling copies where the text repeats")."""
    n, v = logits.shape
    k = min(k, v)
    blocks = v // BLOCK
    if blocks <= k:
        return logits.topk(k, dim=-1).indices
    body = logits[:, : blocks * BLOCK].view(n, blocks, BLOCK)  # [n, B, BLOCK]
    best = body.amax(-1).topk(k, dim=-1).indices  # [n, k] the blocks that hold the k largest
    candidates = body.gather(1, best[..., None].expand(n, k, BLOCK)).reshape(n, k * BLOCK)  # [n, k * BLOCK]
    ids = (best[..., None] * BLOCK + torch.arange(BLOCK, device=logits.device)).reshape(n, k * BLOCK)
    if v > blocks * BLOCK:  # the last few, in no block: candidates too
        candidates = torch.cat([candidates, logits[:, blocks * BLOCK :]], dim=1)
        ids = torch.cat([ids, torch.arange(blocks * BLOCK, v, device=logits.device).expand(n, -1)], dim=1)
    return ids.gather(1, candidates.topk(k, dim=-1).indices)  # [n, k]


def template(budget: int, depth: int, k: int) -> list[tuple[int, int]]:
    """The draft tree's shape: ``budget`` nodes (parent node, rank), parents first, grown best-first by the
    product of RANK_PRIOR along each path, no deeper than ``depth``; rank r < k."""
    prior = [RANK_PRIOR[min(r, len(RANK_PRIOR) - 1)] for r in range(k)]
    nodes: list[tuple[int, int]] = []
    depths: list[int] = []
    frontier = [(-prior[0], ROOT, 0, 1)]  # (-score, parent, rank, depth): the best child not yet taken
    while frontier and len(nodes) < budget:
        score, parent, rank, d = heapq.heappop(frontier)
        node = len(nodes)
        nodes.append((parent, rank))
        depths.append(d)
        if rank + 1 < k:  # its next sibling
            parent_score = -score / prior[rank]
            heapq.heappush(frontier, (-parent_score * prior[rank + 1], parent, rank + 1, d))
        if d < depth:  # its first child
            heapq.heappush(frontier, (score * prior[0], node, 0, d + 1))
    return nodes


def retrieved(context: Sequence[int], n_predicts: int, eos_token_ids: frozenset[int] = frozenset(),
              shortest: int = 1) -> Draft | None:
    """SAM-Decoding's retrieval: the earlier occurrence of the longest suffix of ``context`` (the first, on a tie)
    and the ``n_predicts`` tokens that followed it, cut before an end of text, as a copy (its match and source spans
    for the view); None where that suffix is shorter than ``shortest`` or nothing followed it."""
    n = len(context)
    if n <= shortest:
        return None
    last, end, longest = context[-1], -1, 0
    for i in range(n - 1):  # i: where an occurrence ends; the suffix itself (i = n - 1) never matches itself
        if context[i] != last:
            continue
        size = 1
        while size < min(MATCH_SCAN, i + 1) and context[i - size] == context[n - 1 - size]:
            size += 1
        if size > longest:
            end, longest = i, size
    if longest < shortest:
        return None
    begin = end + 1
    tokens, stopped = continuation(context, begin, n_predicts, eos_token_ids)
    if not tokens:
        return None
    return Draft(tokens, match=(begin - longest, begin), copied=(begin, begin + len(tokens)), stopped=stopped,
                 sources=None, retrieved=True)


def graft(tokens: list[int], parents: list[int], sources: list[str], copy: Draft) -> int:
    """Add ``copy`` to the tree (``tokens``, ``parents``, ``sources``, grown in place) as a branch from the root,
    through the nodes the tree already has; returns how many nodes it added (the tree's last)."""
    added, node = 0, ROOT
    source = f"copied after the match at {copy.match[0]}" if copy.match else "copied"
    for token in copy.token_ids:
        child = next((i for i in range(len(tokens)) if parents[i] == node and tokens[i] == token), None)
        if child is None:
            child = len(tokens)
            tokens.append(token)
            parents.append(node)
            sources.append(source)
            added += 1
        node = child
    return added


class Commonest:
    """The answer's most frequent tokens, counted as it grows (a text that is not the last one counted, a rewound or
    another run's, is counted afresh): the text from ``start`` on (past the prompt, whose chat template's markers
    and line breaks would outnumber the answer's words), never ``skip``'s tokens (the tokenizer's special ones)."""

    def __init__(self, skip: frozenset[int] = frozenset(), start: int = 0) -> None:
        self.skip, self.start = skip, start
        self.counts: Counter[int] = Counter()
        self.upto, self.last = start, -1  # the text counted: its length and last token

    def of(self, context: Sequence[int], n: int) -> list[int]:
        """The ``n`` most frequent tokens of ``context`` from ``start`` on, most frequent first (the first seen, on a
        tie)."""
        grown = self.upto == self.start or (self.upto <= len(context) and context[self.upto - 1] == self.last)
        if not grown:
            self.counts.clear()
            self.upto = self.start
        self.counts.update(t for t in context[self.upto :] if t not in self.skip)
        self.upto, self.last = len(context), context[-1] if context else -1
        return [t for t, _ in self.counts.most_common(n)]


class RecyclingDrafter:
    """Drafts a tree (a chain where the budget is 0) from the recycled matrix, with or instead of a copy where the
    text's end occurred before (:func:`retrieved`), or the text's commonest tokens where the matrix has no row for
    its end (:class:`Commonest`), and recycles every row the target reads."""

    kind = "recycle"
    source: TokenSource = "draft"
    free_to_ask = True  # a draft is read from the matrix: no forward
    stops_itself = False
    ranked = True  # the template is grown best-first: its first n nodes are the best n
    learns = True

    def __init__(self, matrix: RecycledMatrix, num_pred_tokens: int, tree_budget: int,
                 eos_token_ids: frozenset[int] = frozenset(), keep: Callable[[torch.Tensor], None] | None = None,
                 special: frozenset[int] = frozenset(), prompt_length: int = 0) -> None:
        self.matrix = matrix
        self.keep = keep  # writes the matrix's rows back for the next run, when the run is over (None: nothing kept)
        self.num_pred_tokens = num_pred_tokens  # the deepest path drafted
        self.tree_budget = tree_budget
        self.eos_token_ids = eos_token_ids
        self.commonest = Commonest(eos_token_ids | special, prompt_length)  # no end of text, no template marker
        self._shape: tuple[tuple[int, int, int], list[tuple[int, int]]] | None = None

    def _template(self, depth: int) -> list[tuple[int, int]]:
        width = self.tree_budget if self.tree_budget > 0 else depth  # a chain: rank 0 all the way down
        key = (width, depth, self.matrix.k if self.tree_budget > 0 else 1)
        if self._shape is None or self._shape[0] != key:
            self._shape = (key, template(*key))
        return self._shape[1]

    def propose(self, context: list[int], k: int, processors: list[tuple[Stage, LogitsProcessor]], greedy: bool,
                generator: torch.Generator | None) -> Draft:
        depth = min(k, self.num_pred_tokens)
        if depth < 1 or not context:
            return Draft([])
        copy = retrieved(context, depth, self.eos_token_ids)
        if copy is not None and copy.match is not None and copy.match[1] - copy.match[0] >= RETRIEVED_MATCH:
            return replace(copy, state=self.state())
        self.matrix.flush()
        tokens: list[int] = []
        parents: list[int] = []
        sources: list[str] = []
        at: dict[int, int] = {}  # template node -> draft node (a node whose row cell was empty grows nothing)
        rows: dict[int, list[int]] = {}  # token -> its row, read once a round
        for i, (parent, rank) in enumerate(self._template(depth)):
            if parent != ROOT and parent not in at:
                continue
            above = context[-1] if parent == ROOT else tokens[at[parent]]
            if above in self.eos_token_ids:
                continue  # nothing follows an end of text
            row = rows.get(above)
            if row is None:
                row = rows[above] = self.matrix.row(above)
            token = row[rank]
            if token == EMPTY:
                continue
            at[i] = len(tokens)
            tokens.append(token)
            parents.append(ROOT if parent == ROOT else at[parent])
            sources.append(f"guess {rank + 1} after the token above")
        pinned = match = 0
        if copy is not None and self.tree_budget > 0:  # a shorter match's copy, within the tree's budget
            pinned = graft(tokens, parents, sources, replace(copy, token_ids=copy.token_ids[: self.tree_budget]))
            match = copy.match[1] - copy.match[0] if pinned and copy.match is not None else 0
        if not tokens:
            return self._backed_off(context)
        # For the view: the rows read, each as its token and then its guesses; the rows the forwards since the last
        # round wrote (the last few), each with what it held before.
        read: tuple[tuple[str, tuple[int, ...]], ...] = tuple(
            ("row", (token, *(t for t in row if t != EMPTY))) for token, row in rows.items())
        for token, before, after in self.matrix.written[-WRITTEN_SHOWN:]:
            read += (("written", (token, *(t for t in after if t != EMPTY))),
                     ("was", (token, *(t for t in before if t != EMPTY))))
        chain = all(p == i - 1 for i, p in enumerate(parents))  # verified the chain's way
        draft = Draft(tokens, parents=None if chain else tuple(parents), sources=tuple(sources), rows=read,
                      state=self.state(), pinned=pinned, graft_match=match)
        # The graft's nodes take the place of the tree's last-ranked ones where the two would pass the budget.
        return draft.within(self.tree_budget) if pinned else draft

    def _backed_off(self, context: list[int]) -> Draft:
        """The text's commonest tokens as the children of the pending token, whose row is empty: a tree of no rank
        (every node pinned, after a match of no tokens), which the policy verifies where such trees pay."""
        common = [] if context[-1] in self.eos_token_ids or self.tree_budget <= 0 else self.commonest.of(
            context, min(COMMONEST, self.tree_budget))
        if not common:
            return Draft([], stopped="the matrix has no row for the last token yet", state=self.state())
        return Draft(common, parents=(ROOT,) * len(common) if len(common) > 1 else None,
                     sources=("one of the text's commonest tokens (no row for the token above)",) * len(common),
                     rows=(("row", (context[-1],)), ("commonest", tuple(common))), state=self.state(),
                     pinned=len(common), graft_match=0)

    def state(self) -> str:
        """The matrix's fill, for the stats: rows that hold guesses, of one a token of the vocabulary."""
        return f"matrix {self.matrix.filled():,} of {self.matrix.vocab_size:,} rows"

    def observed(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        self.matrix.observe(tokens, logits)

    def rollback(self, confirmed: int) -> None:
        pass  # the matrix keeps every row it read, kept or not: that is the recycling

    def prefilled(self, context: list[int], cache: object) -> None:
        pass

    def replay(self, transcript: Transcript) -> Replay | None:
        return None  # the matrix changes with every forward: the policy probes instead

    def draft_length(self, params: DraftParams) -> int:
        return params.length("num_pred_tokens")

    def time_step(self, context: list[int], processors: list[tuple[Stage, LogitsProcessor]]) -> float:
        return 0.0

    def tune(self, params: DraftParams) -> None:
        self.num_pred_tokens = params.num_pred_tokens
        if params.tree_budget is not None:
            self.tree_budget = params.tree_budget

    def close(self) -> None:
        self.matrix.flush()
        if self.keep is not None:
            keep, self.keep = self.keep, None  # once: a run closes its drafter once, a stopped one maybe twice
            keep(self.matrix.rows)


def build(ctx: DraftingContext) -> Drafter:
    """recycle: a drafter over a matrix as wide as the target's vocabulary, ``--recycle-k`` guesses a row, started
    from the state the options name (:mod:`.recycled_state`) and, unless they say not to, written back at the end."""
    vocab = int(ctx.lm.model.get_output_embeddings().weight.shape[0])
    p = ctx.params
    path = Path(p.recycle_state).expanduser() if p.recycle_state else recycled_state.default_path(ctx.lm.name)
    loaded = Loaded(None, "matrix: empty (a cold start)") if p.cold else load(path, vocab, p.recycle_k, ctx.lm.name)
    ctx.say(loaded.said)

    def keep(rows: torch.Tensor) -> None:
        # A cache that cannot be written costs the next run its warm start, nothing more.
        with contextlib.suppress(OSError):
            save(path, rows, ctx.lm.name)

    special = frozenset(getattr(ctx.lm.tokenizer, "all_special_ids", None) or ())
    return RecyclingDrafter(RecycledMatrix(vocab, p.recycle_k, loaded.rows), p.num_pred_tokens, ctx.tree_budget,
                            ctx.eos_token_ids, keep if p.recycle_keep else None, special, ctx.prompt_length)
