"""What-if replays: what another drafting setting would have cost on a greedy run that already happened.

A greedy run's output is fixed, and greedy speculative decoding and prompt
lookup (PLD) give exactly that output whatever they draft. So the only thing
a drafting setting changes is how many target forward passes the run needs,
and how wide each one is. That can be computed from the trace alone:

- :func:`replay_drafter` runs the real drafter (any
  :class:`~decode_tui.core.drafters.Drafter`) on the same contexts the real
  loop would see, rolls it back after each round as the verifier does, and
  accepts the longest prefix that equals the recorded tokens. So a round
  proposes exactly what it proposes in a real run: prompt lookup
  (:func:`replay_lookup`) is a pure function of the context, and a draft
  model drafting greedily makes the very same calls on its cache, which
  matters: the int8 draft quantises its activations per call, so one
  teacher-forced pass over the whole text (an earlier version of this
  replay) drafted other tokens than a real run steps through, and counted
  40 forwards where real runs needed 38. The forwards are exact; tests check
  them against real runs. A draft model's replay costs its drafting (a few
  seconds a draft length on a CPU), not the target's forwards.

Forwards become an estimate of tokens per second through :class:`Costs`,
measured on this machine by :func:`measure_costs`: the prefill, a verify of
every width 1 .. k + 1 at the trace's context length, and a draft step.

It knows runs as token lists and the drafters' proposal rules; it does not
know the verifier's loop beyond what it replicates here, nor any front end.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .drafters import Drafter as Proposer
from .drafters import PromptLookup
from .errors import UsageError
from .events import Event, Finished, Started
from .modes import DRAFTING_MODES
from .params import DraftParams, SamplingParams
from .sampling import stage_processors
from .token_tree import TokenTree, greedy_path
from .traces import read_events

if TYPE_CHECKING:
    from transformers import LogitsProcessor, PreTrainedModel

    from .drafters import DraftModel
    from .events import Stage
    from .loading import LoadedModel
    from .suffix_drafting import SuffixDrafter

NGRAM_SIZES = range(1, 6)  # max_ngram_size settings a PLD what-if tries
DRAFT_LENGTHS = range(1, 13)  # num_pred_tokens / num_draft_tokens settings
TREE_BUDGETS = (4, 8, 16)  # --tree-budget settings: prompt lookup's every match, and suffix drafting

Drafter = Literal["greedy", "pld", "draft", "pld tree", "suffix"]


@dataclass(frozen=True)
class Trace:
    """What a what-if needs of a finished greedy run: who decoded what, from which prompt, up to which limit."""

    source: str  # the file it was read from, for messages
    model: str
    mode: str
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]  # the new tokens, an EOS that ended the run included
    max_new_tokens: int
    target_forwards: int  # the recorded run's own count
    params: Mapping[str, Any]

    @property
    def eos_token_ids(self) -> frozenset[int] | None:
        """The end-of-text tokens the run stopped at (None in traces made before runs recorded them)."""
        ids = self.params.get("eos_token_ids")
        return frozenset(int(i) for i in ids) if isinstance(ids, list | tuple) else None


def trace_from_events(events: Iterable[Event], source: str = "the run") -> Trace:
    """The :class:`Trace` of a run's events; a UsageError if they are not one whole greedy run."""
    started = finished = None
    for event in events:
        if isinstance(event, Started):
            started = event
        elif isinstance(event, Finished):
            finished = event
    if started is None or finished is None:
        raise UsageError(f"{source} is not a whole run: it has no {'start' if started is None else 'end'}. Record "
                         "one with `decode-tui generate --mode greedy --format jsonl > run.jsonl`.")
    params = started.params
    greedy = started.mode == "greedy" or (started.mode in DRAFTING_MODES and not params.get("draft_sample"))
    if not greedy:
        what = f"{started.mode} run" + (" with sampled drafts" if started.mode in DRAFTING_MODES else "")
        raise UsageError(f"{source} is a {what}: a what-if replays greedy output, whose tokens do not depend on "
                         "how they were drafted. Record a greedy run (or a greedy pld or speculative one).")
    if finished.finish_reason in ("cancelled", "error"):
        ended = "cancelled" if finished.finish_reason == "cancelled" else "ended by an error"
        raise UsageError(f"{source} was {ended} after {finished.new_tokens} tokens: its length limit is unknown, "
                         "so its forwards cannot be replayed exactly. Record a run that ends by itself.")
    return Trace(source=source, model=started.model, mode=started.mode, prompt_ids=started.prompt_token_ids,
                 token_ids=finished.token_ids, max_new_tokens=int(params.get("max_new_tokens", finished.new_tokens)),
                 target_forwards=finished.target_forwards, params=params)


def read_trace(path: Path) -> Trace:
    """A trace from ``generate --format jsonl`` output or an app recording (``run --record``, the export key)."""
    hint = f"Record a greedy run with `decode-tui generate --mode greedy --format jsonl > {path.name}`."
    return trace_from_events(read_events(path, "A what-if", hint), str(path))


@dataclass(frozen=True)
class Replayed:
    """One setting replayed on a trace: the target forwards it needs and what each fed the target."""

    drafter: Drafter
    max_ngram_size: int | None  # pld
    draft_length: int  # num_pred_tokens (pld) or num_draft_tokens (draft); 0 for greedy
    target_forwards: int  # the prefill included, as Finished.target_forwards counts
    widths: tuple[int, ...]  # tokens fed to each forward after the prefill (1: a plain step)
    drafted: int
    accepted: int
    lookup_s: float = 0.0  # the lookups' own time, measured while replaying them (pld)
    tree_budget: int = 0  # drafted nodes a verification at most, where the drafts are trees (0: chains)

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


# (context, emitted so far, k) -> draft tokens, or a tree of them
Propose = Callable[[list[int], int, int], "list[int] | TokenTree"]


def _replay(trace: Trace, eos_token_ids: frozenset[int], k_max: int, propose: Propose,
            confirmed: Callable[[int], None] = lambda _: None) -> tuple[int, list[int], int, int]:
    """The verifier's greedy loop (core.strategies.speculative) on recorded tokens: forwards, widths, counts.
    ``confirmed(n)`` is told, after each round, how many context tokens are now settled (the drafter's rollback)."""
    out = trace.token_ids
    limit = min(trace.max_new_tokens, len(out))
    context = [*trace.prompt_ids, out[0]]  # the first token comes from the prefill
    emitted, forwards, drafted, accepted = 1, 1, 0, 0
    widths: list[int] = []
    done = out[0] in eos_token_ids or emitted >= limit
    while not done:
        k = min(k_max, limit - emitted - 1)  # the target always adds one token of its own
        proposed = propose(context, emitted, k) if k > 0 else []
        if isinstance(proposed, TokenTree):  # the target's own tokens, followed down the tree as far as they go
            # The target's token at each row: after the pending token, and after each node's path (its depth).
            choice = [out[emitted], *(out[emitted + depth] for depth in proposed.depths())]
            path, _ = greedy_path(proposed, choice)
            n, width = len(path), len(proposed) + 1
        else:
            draft = proposed[:k]
            n = 0
            while n < len(draft) and draft[n] == out[emitted + n]:
                n += 1
            width = len(draft) + 1
        forwards += 1
        widths.append(width)
        drafted += width - 1
        accepted += n
        # The accepted prefix, then the target's own token, unless an EOS or the limit came first.
        for token in out[emitted : emitted + n + 1]:
            context.append(token)
            emitted += 1
            if token in eos_token_ids or emitted >= limit:
                done = True
                break
        confirmed(len(context) - 1)  # everything but the pending token, as the verifier rolls back
    return forwards, widths, drafted, accepted


def replay_greedy(trace: Trace) -> Replayed:
    """Plain greedy: one forward per token."""
    n = min(trace.max_new_tokens, len(trace.token_ids))
    return Replayed("greedy", None, 0, n, (1,) * (n - 1), 0, 0)


def replay_drafter(trace: Trace, eos_token_ids: frozenset[int], drafter: Proposer, k: int,
                   processors: list[tuple[Stage, LogitsProcessor]] | None = None) -> Replayed:
    """Greedy speculative decoding with ``drafter`` and draft length ``k`` on the trace: exact forwards (the real
    drafter on the real contexts, rolled back after each round as the verifier rolls it back)."""
    spent = 0.0

    def propose(context: list[int], _emitted: int, room: int) -> list[int]:
        nonlocal spent
        started = time.perf_counter()
        tokens = drafter.propose(context, room, processors or [], True, None).token_ids
        spent += time.perf_counter() - started
        return tokens

    forwards, widths, drafted, accepted = _replay(trace, eos_token_ids, k, propose, drafter.rollback)
    if drafter.kind == "lookup":
        assert isinstance(drafter, PromptLookup)
        return Replayed("pld", drafter.max_ngram_size, k, forwards, tuple(widths), drafted, accepted, spent)
    return Replayed("draft", None, k, forwards, tuple(widths), drafted, accepted)


def replay_tree(trace: Trace, eos_token_ids: frozenset[int], drafter: Proposer, k: int) -> Replayed:
    """Greedy tree verification with a copying drafter that gives trees (prompt lookup's every match, suffix
    drafting with no history but the trace's own text) on the trace: exact forwards, each as wide as its tree."""
    spent = 0.0

    def propose(context: list[int], _emitted: int, room: int) -> list[int] | TokenTree:
        nonlocal spent
        started = time.perf_counter()
        draft = drafter.propose(context, room, [], True, None)
        spent += time.perf_counter() - started
        return draft.tree or TokenTree.from_chains([draft.token_ids[:room]])

    forwards, widths, drafted, accepted = _replay(trace, eos_token_ids, k, propose, drafter.rollback)
    size = drafter.max_ngram_size if isinstance(drafter, PromptLookup) else None
    kind: Drafter = "pld tree" if isinstance(drafter, PromptLookup) else "suffix"
    return Replayed(kind, size, k, forwards, tuple(widths), drafted, accepted, spent, drafter.tree_budget)


def tree_rows(trace: Trace, eos_token_ids: frozenset[int], budgets: Iterable[int] = TREE_BUDGETS,
              max_ngram_size: int = 3, num_pred_tokens: int = 10) -> list[Replayed]:
    """:func:`replay_tree` at each tree budget: prompt lookup's every match, and suffix drafting."""
    from .suffix_drafting import SuffixDrafter, SuffixHistory

    rows = []
    for budget in budgets:
        rows.append(replay_tree(trace, eos_token_ids, PromptLookup(max_ngram_size, num_pred_tokens, eos_token_ids,
                                                                   budget), num_pred_tokens))
        rows.append(replay_tree(trace, eos_token_ids, SuffixDrafter(SuffixHistory(), num_pred_tokens, budget,
                                                                    eos_token_ids), num_pred_tokens))
    return rows


def replay_lookup(trace: Trace, eos_token_ids: frozenset[int], max_ngram_size: int,
                  num_pred_tokens: int) -> Replayed:
    """Greedy PLD with these settings on the trace (its lookups timed as they run: they are part of its cost)."""
    return replay_drafter(trace, eos_token_ids, PromptLookup(max_ngram_size, num_pred_tokens, eos_token_ids),
                          num_pred_tokens)


class LookupMemo:
    """:func:`replay_lookup`'s widths for every k, its lookups kept from call to call.

    A lookup with a shorter k finds the same n-gram and copies a prefix of the same tokens, so the replays of
    one text under every k, and of the same text grown longer, can share one lookup per position: each position's
    longest copy is looked up once and cut to what a replay asks. The adaptive draft length replays eleven
    lengths every few rounds, which without this took 4 % of a run. Positions are known by the context's length,
    so a memo serves one text as it grows (one run); other lookup settings need another memo.
    """

    def __init__(self, eos_token_ids: frozenset[int], max_ngram_size: int, num_pred_tokens: int) -> None:
        self.eos_token_ids = eos_token_ids
        self.lookup = PromptLookup(max_ngram_size, num_pred_tokens, eos_token_ids)
        self.settings = (max_ngram_size, num_pred_tokens)
        self.copies: dict[int, list[int]] = {}  # context length -> the longest copy found there

    def widths(self, trace: Trace, k: int) -> tuple[int, ...]:
        """The widths of the target's forwards greedy PLD with draft length ``k`` would have used on ``trace``."""
        def propose(context: list[int], _emitted: int, room: int) -> list[int]:
            if len(context) not in self.copies:
                self.copies[len(context)] = self.lookup.propose(context, self.lookup.num_pred_tokens, [], True,
                                                                None).token_ids
            return self.copies[len(context)][:room]

        return tuple(_replay(trace, self.eos_token_ids, min(k, self.lookup.num_pred_tokens), propose)[1])


class SuffixMemo:
    """Suffix drafting's replay widths for every k, each position's draft made once.

    Suffix drafting's tree at draft length k is its deepest tree with the nodes deeper than k left out (the trees
    it grows do not depend on k), so one tree per position serves the replays of every k. The trees are made in
    the order of the text, so the memo's own drafter grows its tree of the run a token at a time, as the live one
    does; it drafts from the same history.
    """

    def __init__(self, drafter: SuffixDrafter, eos_token_ids: frozenset[int]) -> None:
        from .suffix_drafting import SuffixDrafter

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

        return tuple(_replay(trace, self.eos_token_ids, min(k, self.drafter.num_pred_tokens), propose)[1])


def draft_confidence(trace: Trace, given: float | None) -> float:
    """The draft confidence cut-off a draft replay uses: the one given, else the trace's own (a speculative run),
    else the decoding default."""
    if given is not None:
        return given
    own = trace.params.get("confidence_threshold")
    return float(own) if isinstance(own, int | float) and not isinstance(own, bool) else \
        DraftParams().confidence_threshold


def _processors(trace: Trace) -> list[tuple[Stage, LogitsProcessor]]:
    """What a greedy run's drafter applies to its scores: the run's repetition penalty (greedy keeps no other)."""
    penalty = trace.params.get("repetition_penalty", 1.0)
    return stage_processors(SamplingParams(repetition_penalty=float(penalty)), greedy=True)


def replay_draft(trace: Trace, eos_token_ids: frozenset[int], draft: DraftModel, num_draft_tokens: int,
                 confidence_threshold: float = 0.4, *, target: PreTrainedModel) -> Replayed:
    """Greedy speculative decoding with this draft model and draft length, as a real run drafts: the draft
    stops after a token it gave less than ``confidence_threshold``, or after an end-of-text token. A draft made
    from the target starts from the target's keys and values of the prompt, as in a run: one target prefill."""
    import torch

    from .forward import forward, new_cache

    drafter = draft.drafter(confidence_threshold, eos_token_ids)
    with torch.inference_mode():
        if draft.target_kv is not None:
            cache = new_cache(target)
            forward(target, torch.tensor([trace.prompt_ids], device=target.device), cache)
            drafter.prefilled(list(trace.prompt_ids), cache)
        return replay_drafter(trace, eos_token_ids, drafter, num_draft_tokens, _processors(trace))


@dataclass(frozen=True)
class Costs:
    """This machine's measured seconds for the parts of a run (plain path, the trace's context length)."""

    prefill_s: float
    verify_s: tuple[float, ...]  # verify_s[w - 1]: one target forward over w tokens (w = 1 is a plain step)
    draft_step_s: float = 0.0  # one draft-model token (0 for PLD, whose lookup time is measured while replaying)
    draft_prefill_s: float = 0.0  # the draft model's prefill of the prompt, once a run
    # The decoding loop's own work around each target forward (choosing the token, the events, the text): a real
    # run pays it every forward, and estimates without it came out optimistic (1.7x where bench measured 1.41x).
    # Measured on a real greedy run of the trace's prompt (core/calibrate.py).
    overhead_s: float = 0.0
    # How much the measured times varied from one repeat to the next, as a share (0.08: 8 %): two settings whose
    # estimates differ by less are alike as far as these measurements can tell.
    spread: float = 0.0
    # What a verifying round costs beyond its forward and a plain step's loop work: the acceptance test, the draft
    # events, several tokens emitted at once. Measured on a real prompt-lookup run of the trace's text
    # (core/calibrate.py).
    round_overhead_s: float = 0.0

    def verify(self, width: int) -> float:
        if width <= len(self.verify_s):
            return self.verify_s[width - 1]
        # Past what was measured: extend the last measured slope (a verify's cost is close to linear in width).
        slope = self.verify_s[-1] - self.verify_s[-2] if len(self.verify_s) > 1 else 0.0
        return self.verify_s[-1] + slope * (width - len(self.verify_s))

    def seconds(self, replayed: Replayed) -> float:
        """The estimated duration of a run replayed with ``replayed``'s setting."""
        total = (self.prefill_s + sum(self.verify(w) for w in replayed.widths) + replayed.lookup_s
                 + self.overhead_s * replayed.target_forwards
                 + self.round_overhead_s * sum(1 for w in replayed.widths if w > 1))
        if replayed.drafter == "draft":
            total += self.draft_prefill_s + replayed.drafted * self.draft_step_s
        return total


def measure_costs(lm: LoadedModel, trace: Trace, max_width: int, draft: DraftModel | None = None,
                  repeats: int = 5, progress: Callable[[str], None] | None = None) -> Costs:
    """Time the prefill, a forward over 1 .. ``max_width`` tokens and (with a draft) a draft step, on this machine.

    At the middle of the trace's text (attention's cost grows with the context), each width timed ``repeats``
    times in turn and the median kept, with how much the repeats varied (``spread``); the cache is cropped back
    after each, as a rejected draft's is. What a real run pays around its forwards is
    :func:`decode_tui.core.calibrate.calibrated`'s to add. ``progress`` hears how far along it is, a pass at a
    time (a long trace's prefills take minutes on a CPU).
    """
    import torch

    from .forward import forward, new_cache, rollback

    device = lm.device
    half = list(trace.prompt_ids) + list(trace.token_ids[: len(trace.token_ids) // 2])
    feed = list(trace.token_ids[len(trace.token_ids) // 2 :]) + list(trace.prompt_ids)
    feed = (feed * (max_width // max(len(feed), 1) + 1))[:max_width]  # any tokens: the cost is what counts

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def timed(model: Any, cache: Any, ids: list[int], keep: int = 1) -> float:
        sync()
        started = time.perf_counter()
        forward(model, torch.tensor([ids], device=device), cache, keep=keep)
        sync()
        return time.perf_counter() - started

    with torch.inference_mode():
        prefills, samples = [], {w: [] for w in range(1, max_width + 1)}  # type: ignore[var-annotated]
        for repeat in range(repeats + 1):  # the first pass warms up and is not kept
            if progress is not None:
                progress(f"pass {repeat + 1} of {repeats + 1}: a prefill of {len(trace.prompt_ids)} tokens, then "
                         f"forwards of 1 to {max_width} tokens after {len(half)}")
            cache = new_cache(lm.model, rollback=True)
            prefills.append(timed(lm.model, cache, list(trace.prompt_ids)))
            cache = new_cache(lm.model, rollback=True)
            forward(lm.model, torch.tensor([half], device=device), cache)
            for w in samples:
                seconds = timed(lm.model, cache, feed[:w], keep=w)
                rollback(cache, len(half))
                if repeat:
                    samples[w].append(seconds)
        prefills = prefills[1:]
        draft_step = draft_prefill = 0.0
        if draft is not None:
            steps, draft_prefills = [], []
            for repeat in range(repeats):
                if progress is not None:
                    progress(f"the draft model's prefill and step, {repeat + 1} of {repeats}")
                cache = new_cache(draft.model, rollback=True)
                draft_prefills.append(timed(draft.model, cache, half))
                steps.append(timed(draft.model, cache, feed[:1]))
            draft_step = statistics.median(steps)
            # A run's draft prefills the prompt only, and a draft made from the target not even that: it takes the
            # target's keys and values.
            if draft.target_kv is None:
                draft_prefill = statistics.median(draft_prefills) * len(trace.prompt_ids) / len(half)
    verify = [statistics.median(samples[w]) for w in samples]
    # A verification never costs more than a wider one: on a CPU, where a wider forward can be cheaper, the verifier
    # pads to it (core/widths.py); elsewhere a wider forward that timed faster was noise. So each width costs at most
    # what the next wider one did.
    for w in range(len(verify) - 2, -1, -1):
        verify[w] = min(verify[w], verify[w + 1])
    # The spread: each width's interquartile range over its median, the median of those over the widths.
    spread = statistics.median(_iqr(times) / statistics.median(times) for times in samples.values())
    return Costs(statistics.median(prefills), tuple(verify), draft_step, draft_prefill, spread=spread)


def _iqr(values: Sequence[float]) -> float:
    """The interquartile range (0 for a single value)."""
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]


@dataclass(frozen=True)
class WhatIf:
    """One setting's row: its forwards and, with costs, its estimated speed."""

    drafter: Drafter
    max_ngram_size: int | None
    draft_length: int
    target_forwards: int
    tokens_per_forward: float
    acceptance_rate: float | None
    est_tokens_per_s: float | None
    est_speedup: float | None  # over greedy's estimate
    tree_budget: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``num_pred_tokens`` for PLD and trees, ``num_draft_tokens`` for a draft model,
        ``tree_budget`` for trees."""
        data = asdict(self)
        length = data.pop("draft_length")
        if not self.tree_budget:
            data.pop("tree_budget")
        if self.drafter in ("pld", "pld tree", "suffix"):
            data["num_pred_tokens"] = length
        elif self.drafter == "draft":
            data["num_draft_tokens"] = length
        return data


def table(trace: Trace, replays: Sequence[Replayed], costs: Costs | None) -> list[WhatIf]:
    """Rows for ``replays``, greedy's first, each with its estimate over greedy's when ``costs`` are known."""
    new_tokens = min(trace.max_new_tokens, len(trace.token_ids))
    greedy = replay_greedy(trace)
    base = new_tokens / costs.seconds(greedy) if costs else None
    rows = []
    for r in [greedy, *replays]:
        rate = new_tokens / costs.seconds(r) if costs else None
        rows.append(WhatIf(r.drafter, r.max_ngram_size, r.draft_length, r.target_forwards,
                           new_tokens / r.target_forwards, r.acceptance_rate, rate,
                           rate / base if rate is not None and base else None, r.tree_budget))
    return rows


def best(rows: Sequence[WhatIf]) -> WhatIf:
    """The fastest setting by estimate, else the one with the fewest forwards (the shorter draft on a tie)."""
    if all(r.est_tokens_per_s is not None for r in rows):
        return max(rows, key=lambda r: (r.est_tokens_per_s or 0.0, -r.draft_length))
    return min(rows, key=lambda r: (r.target_forwards, r.draft_length))


def alike(rows: Sequence[WhatIf], top: WhatIf, spread: float) -> list[WhatIf]:
    """The rows whose estimate is within ``spread`` (a share) of ``top``'s, ``top`` first: settings the
    measurements cannot tell apart, so none of them can be named the best."""
    if top.est_tokens_per_s is None:
        return [top]
    floor = top.est_tokens_per_s * (1 - spread)
    return [top, *(r for r in rows if r is not top and (r.est_tokens_per_s or 0.0) >= floor)]


def lookup_grid(trace: Trace, eos_token_ids: frozenset[int], ngram_sizes: Iterable[int] = NGRAM_SIZES,
                lengths: Iterable[int] = DRAFT_LENGTHS) -> list[Replayed]:
    """:func:`replay_lookup` for every (max_ngram_size, num_pred_tokens) pair."""
    return [replay_lookup(trace, eos_token_ids, n, k) for n in ngram_sizes for k in lengths]
