"""What-if tables: what another drafting setting would have cost on a greedy run that already happened.

The replays (:mod:`decode_tui.core.drafting.replay`) give the exact target forwards each setting would have
needed, and how wide each was. Forwards become an estimate of tokens per second through :class:`Costs`, measured
on this machine by :func:`measure_costs`: the prefill, a verify of every width 1 .. k + 1 at the trace's context
length, and a draft step; :func:`table` ranks the settings.

It knows replays, this machine's costs and the ranking; it does not know the verifier's loop nor any front end.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..drafting.prompt_lookup import replay_lookup
from ..drafting.replay import DRAFT_LENGTHS, NGRAM_SIZES, Replayed, Trace, replay_greedy, replay_tree
from ..execution.tree_budget import CANDIDATES
from ..modes import MODE_SPECS

# The --tree-budget settings tried for prompt lookup's every match and for suffix drafting: the smallest budgets a
# device may be given, each a tree that fills a power of two positions with its pending token.
TREE_BUDGETS = CANDIDATES[:3]

if TYPE_CHECKING:

    from ..drafting.draft_models import DraftModel
    from ..model.loading import LoadedModel


@dataclass(frozen=True)
class Costs:
    """This machine's measured seconds for the parts of a run (plain path, the trace's context length)."""

    prefill_s: float
    verify_s: tuple[float, ...]  # verify_s[w - 1]: one target forward over w tokens (w = 1 is a plain step)
    draft_step_s: float = 0.0  # one draft-model token (0 for PLD, whose lookup time is measured while replaying)
    draft_prefill_s: float = 0.0  # the draft model's prefill of the prompt, once a run
    # The decoding loop's own work around each target forward (choosing the token, the events, the text): a real
    # run pays it every forward, and estimates without it come out optimistic.
    # Measured on a real greedy run of the trace's prompt (core/analysis/calibrate.py).
    overhead_s: float = 0.0
    # How much the measured times varied from one repeat to the next, as a share (0.08: 8 %): two settings whose
    # estimates differ by less are alike as far as these measurements can tell.
    spread: float = 0.0
    # What a verifying round costs beyond its forward and a plain step's loop work: the acceptance test, the draft
    # events, several tokens emitted at once. Measured on a real prompt-lookup run of the trace's text
    # (core/analysis/calibrate.py).
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
    :func:`decode_tui.core.analysis.calibrate.calibrated`'s to add. ``progress`` hears how far along it is, a pass at a
    time (a long trace's prefills take minutes on a CPU).
    """
    import torch

    from ..execution.forward import forward, new_cache, rollback

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
    # pads to it (core/execution/widths.py); elsewhere a wider forward that timed faster was noise. So each width costs
    # at most what the next wider one did.
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

    drafter: str  # replay.Drafter, or a mode run for its counts (core/analysis/counted.py)
    max_ngram_size: int | None
    draft_length: int
    target_forwards: int
    tokens_per_forward: float
    acceptance_rate: float | None
    est_tokens_per_s: float | None
    est_speedup: float | None  # over greedy's estimate
    tree_budget: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``num_pred_tokens`` for PLD and trees, ``num_draft_tokens`` for a draft model, a mode's
        own draft length option for a mode's row, ``tree_budget`` for trees."""
        data = asdict(self)
        length = data.pop("draft_length")
        if not self.tree_budget:
            data.pop("tree_budget")
        spec = MODE_SPECS[self.drafter].drafter if self.drafter in MODE_SPECS else None
        if self.drafter == "pld tree":
            data["num_pred_tokens"] = length
        elif self.drafter == "draft":
            data["num_draft_tokens"] = length
        elif spec is not None:  # a mode's own row: its own draft length option
            data[spec.length] = length
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


def tree_rows(trace: Trace, eos_token_ids: frozenset[int], budgets: Iterable[int] = TREE_BUDGETS,
              max_ngram_size: int = 3, num_pred_tokens: int = 10) -> list[Replayed]:
    """:func:`replay_tree` at each tree budget: prompt lookup's every match, and suffix drafting."""
    from ..drafting.prompt_lookup import PromptLookup
    from ..drafting.suffix_drafting import SuffixDrafter, SuffixHistory

    rows = []
    for budget in budgets:
        lookup = PromptLookup(max_ngram_size, num_pred_tokens, eos_token_ids, budget)
        rows.append(replay_tree(trace, eos_token_ids, lookup, num_pred_tokens, name="pld tree",
                                max_ngram_size=max_ngram_size))
        suffix = SuffixDrafter(SuffixHistory(), num_pred_tokens, budget, eos_token_ids)
        rows.append(replay_tree(trace, eos_token_ids, suffix, num_pred_tokens, name="suffix"))
    return rows
