"""What-if replays: predicted forwards equal real runs' (exactly for prompt lookup), and bad traces are refused."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from decode_tui.core.analysis.counted import counted, unreplayable
from decode_tui.core.analysis.whatif import Costs, WhatIf, best, table
from decode_tui.core.drafting import target_drafts
from decode_tui.core.drafting.draft_models import DraftModel
from decode_tui.core.drafting.drafters import Draft
from decode_tui.core.drafting.prompt_lookup import LookupMemo, PromptLookup, replay_lookup
from decode_tui.core.drafting.replay import (
    Trace,
    read_trace,
    replay_draft,
    replay_drafter,
    replay_greedy,
    trace_from_events,
)
from decode_tui.core.errors import UsageError
from decode_tui.core.params import SamplingParams, TargetDraft
from decode_tui.core.record.detokenize import Detokenizer
from decode_tui.core.record.events import Event, Finished, Mode, Started, TokenSource
from decode_tui.core.record.transcript import Transcript
from decode_tui.core.strategies.autoregressive import autoregressive
from decode_tui.core.strategies.speculative import speculative

from .conftest import tiny_model
from .test_autoregressive import loaded
from .test_speculative import V, repetitive_prompt

EOS = frozenset({V - 1})


def started(prompt: list[int], max_new: int, mode: Mode = "greedy", **params: Any) -> Started:
    return Started(mode=mode, model="tiny", prompt_token_ids=tuple(prompt), prompt_text="x",
                   params={"max_new_tokens": max_new, **params})


def greedy_trace(model: Any, tokenizer: Any, prompt: list[int], max_new: int) -> Any:
    transcript = Transcript("greedy", prompt, Detokenizer(tokenizer), EOS, max_new)
    events: list[Event] = [started(prompt, max_new), *autoregressive(model, transcript, SamplingParams(),
                                                                     greedy=True)]
    return trace_from_events(events)


def real_forwards(model: Any, tokenizer: Any, drafter: Any, prompt: list[int], max_new: int, k: int) -> Finished:
    transcript = Transcript("pld", prompt, Detokenizer(tokenizer), EOS, max_new)
    last = list(speculative(model, transcript, drafter, SamplingParams(), greedy=True, num_draft_tokens=k))[-1]
    assert isinstance(last, Finished)
    return last


def mixed_prompt(seed: int) -> list[int]:
    """Repeated phrases among fresh tokens: lookups that hit, miss, and hit the wrong occurrence."""
    g = torch.Generator().manual_seed(seed)
    phrase = torch.randint(1, V - 2, (5,), generator=g).tolist()
    noise = torch.randint(1, V - 2, (30,), generator=g).tolist()
    return noise[:6] + phrase + noise[6:14] + phrase[:3] + noise[14:22] + phrase + noise[22:]


@pytest.mark.parametrize("seed", range(4))
def test_predicted_pld_forwards_equal_a_real_runs(byte_bpe: Any, seed: int) -> None:
    model = tiny_model("llama", vocab_size=V, seed=seed)
    for prompt in (repetitive_prompt(seed, 14), mixed_prompt(seed)):
        trace = greedy_trace(model, byte_bpe, prompt, 48)
        for ngram, k in ((1, 1), (2, 4), (3, 10), (5, 12), (4, 3)):
            predicted = replay_lookup(trace, EOS, ngram, k)
            real = real_forwards(model, byte_bpe, PromptLookup(ngram, k, EOS), prompt, 48, k)
            assert real.token_ids == trace.token_ids  # greedy PLD is lossless, so the trace stands for it
            assert predicted.target_forwards == real.target_forwards, (seed, ngram, k)
            assert (predicted.drafted, predicted.accepted) == (real.drafted, real.accepted)


def test_predicted_forwards_respect_an_eos_and_the_length_limit(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=1)
    prompt = repetitive_prompt(1, 14)
    probe = greedy_trace(model, byte_bpe, prompt, 30)
    eos = probe.token_ids[9]  # pretend this token is the end of text: the run stops there
    transcript = Transcript("greedy", prompt, Detokenizer(byte_bpe), frozenset({eos}), 30)
    trace = trace_from_events([started(prompt, 30), *autoregressive(model, transcript, SamplingParams(),
                                                                    greedy=True)])
    assert trace.token_ids[-1] == eos and len(trace.token_ids) <= 10
    for max_new in (30, 7):
        short = trace if max_new == 30 else greedy_trace(model, byte_bpe, prompt, max_new)
        eos_ids = frozenset({eos}) if max_new == 30 else EOS
        for k in (2, 6):
            transcript = Transcript("pld", prompt, Detokenizer(byte_bpe), eos_ids, max_new)
            last = list(speculative(model, transcript, PromptLookup(2, k, eos_ids), SamplingParams(), greedy=True,
                                    num_draft_tokens=k))[-1]
            assert isinstance(last, Finished)
            assert replay_lookup(short, eos_ids, 2, k).target_forwards == last.target_forwards


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["other model", "int4"])
def test_draft_model_forwards_equal_a_real_runs_exactly(byte_bpe: Any, seed: int, kind: str) -> None:
    """Drafted, accepted and forwards, not only up to near-ties: a quantised draft rounds differently with
    different call shapes, so only drafting as a real run drafts (the same calls on its cache) gives a real
    run's drafts."""
    model = tiny_model("llama", vocab_size=V, seed=seed)
    made = TargetDraft(4)
    draft = (DraftModel(tiny_model("qwen2", vocab_size=V, seed=seed + 50), V, kind) if kind == "other model"
             else DraftModel(target_drafts.build(model, made), V, kind, target_drafts.kv_dtype(model, made)))
    prompt = repetitive_prompt(seed, 14)
    trace = greedy_trace(model, byte_bpe, prompt, 40)
    for k in (1, 3, 6):
        for threshold in (0.0, 0.4):
            replayed = replay_draft(trace, EOS, draft, k, threshold, target=model)
            real = real_forwards(model, byte_bpe, draft.drafter(threshold, EOS), prompt, 40, k)
            assert real.token_ids == trace.token_ids
            assert (replayed.target_forwards, replayed.drafted, replayed.accepted) == \
                (real.target_forwards, real.drafted, real.accepted), (seed, k, threshold)


class Scripted:
    """A drafter that proposes the given next tokens wherever it is asked (the Drafter protocol)."""

    kind = "model"
    source: TokenSource = "draft"
    tree_budget = 0
    free_to_ask = False
    stops_itself = False
    ranked = False
    learns = False

    def __init__(self, tokens: list[int]) -> None:
        self.tokens, self.start = tokens, 0

    def propose(self, context: list[int], k: int, processors: Any, greedy: bool, generator: Any) -> Draft:
        return Draft(self.tokens[len(context) - self.start :][:k])

    def rollback(self, confirmed: int) -> None:
        pass

    def observed(self, tokens: Any, logits: Any) -> None:
        pass

    def prefilled(self, context: list[int], cache: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def tune(self, params: Any) -> None:
        pass

    def draft_length(self, params: Any) -> int:
        return 4

    def replay(self, transcript: Any) -> None:
        return None

    def time_step(self, context: list[int], processors: Any) -> float:
        return 0.0


def test_the_target_drafting_for_itself_needs_one_forward_per_draft_plus_one() -> None:
    trace = trace_from_events([started([1, 2, 3], 20), Finished(
        mode="greedy", prompt_token_ids=(1, 2, 3), token_ids=tuple(range(10, 30)), text="", finish_reason="length",
        new_tokens=20, target_forwards=20, elapsed_s=1.0, tokens_per_s=20.0)])
    oracle = Scripted(list(trace.token_ids))
    oracle.start = 3  # the context is the prompt (3 tokens) and the tokens so far
    perfect = replay_drafter(trace, EOS, oracle, 4)
    # The prefill gives token 0; each round then drafts 4 and the target adds a fifth (the last round is cut
    # short by the limit): 1 + ceil(19 / 5).
    assert perfect.target_forwards == 1 + 4 and perfect.acceptance_rate == 1.0
    nothing = replay_drafter(trace, EOS, Scripted([0] * 40), 4)
    assert nothing.target_forwards == replay_greedy(trace).target_forwards == 20


def test_estimates_alike_within_the_measured_spread_are_not_ranked() -> None:
    """whatif named a "Best" that bench measured slower than the defaults: settings closer than the spread of
    the measurements are alike, and a real run's loop overhead is priced with every forward."""
    from decode_tui.core.analysis.whatif import WhatIf, alike

    def row(k: int, rate: float) -> WhatIf:
        return WhatIf("pld", 3, k, 10, 2.0, 0.5, rate, rate / 20.0)

    rows = [row(10, 30.0), row(4, 29.0), row(2, 24.0)]
    assert alike(rows, rows[0], 0.05) == rows[:2]  # 29 is within 5 % of 30, 24 is not
    assert alike(rows, rows[0], 0.01) == rows[:1]
    trace = trace_from_events([started([1, 2, 3], 4), Finished(
        mode="greedy", prompt_token_ids=(1, 2, 3), token_ids=(5, 6, 7, 8), text="", finish_reason="length",
        new_tokens=4, target_forwards=4, elapsed_s=1.0, tokens_per_s=4.0)])
    plain = Costs(0.1, (0.01, 0.02))
    loaded = Costs(0.1, (0.01, 0.02), overhead_s=0.005)
    assert loaded.seconds(replay_greedy(trace)) == pytest.approx(plain.seconds(replay_greedy(trace)) + 4 * 0.005)


def test_estimates_rank_settings_by_measured_costs() -> None:
    trace = trace_from_events([started([1, 2, 3, 4, 5, 6], 12), Finished(
        mode="greedy", prompt_token_ids=(1, 2, 3, 4, 5, 6), token_ids=(1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6),
        text="", finish_reason="length", new_tokens=12, target_forwards=12, elapsed_s=1.0, tokens_per_s=12.0)])
    replays = [replay_lookup(trace, EOS, 1, k) for k in (1, 10)]
    flat = Costs(prefill_s=0.0, verify_s=(0.1,) * 11)  # a GPU: verifying 11 costs a step
    steep = Costs(prefill_s=0.0, verify_s=tuple(0.1 * w for w in range(1, 12)))  # cost grows with every token
    assert best(table(trace, replays, flat)).draft_length == 10
    assert best(table(trace, replays, steep)).drafter == "greedy"  # nothing beats a step when width costs that much
    rows = table(trace, replays, None)
    assert all(r.est_tokens_per_s is None for r in rows)
    assert best(rows).target_forwards == min(r.target_forwards for r in rows)


def write_jsonl(path: Path, events: list[Event]) -> Path:
    path.write_text("".join(e.to_json() + "\n" for e in events), encoding="utf-8")
    return path


def test_bad_traces_are_refused_with_what_to_do(tmp_path: Path) -> None:
    done = Finished(mode="sample", prompt_token_ids=(1,), token_ids=(2,), text="", finish_reason="length",
                    new_tokens=1, target_forwards=1, elapsed_s=1.0, tokens_per_s=1.0)
    cases: dict[str, tuple[str | list[Event] | None, str]] = {
        "missing.jsonl": (None, "does not exist"),
        "text.jsonl": ("hello\n", "not a decode-tui event"),
        "empty.jsonl": ("", "holds no events"),
        "sampled.jsonl": ([started([1], 1, mode="sample"), done], "greedy"),
        "sampled-pld.jsonl": ([started([1], 1, mode="pld", draft_sample=True), done], "sampled drafts"),
        "headless.jsonl": ([done], "not a whole run"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        elif content is not None:
            write_jsonl(path, content)
        with pytest.raises(UsageError, match=message):
            read_trace(path)


def test_a_recording_reads_as_a_trace(tmp_path: Path) -> None:
    events = [started([1, 2], 3), Finished(mode="greedy", prompt_token_ids=(1, 2), token_ids=(5, 6, 7), text="",
                                           finish_reason="length", new_tokens=3, target_forwards=3, elapsed_s=1.0,
                                           tokens_per_s=3.0)]
    path = tmp_path / "rec.jsonl"
    header = json.dumps({"event": "recording", "version": 1, "settings": {}})
    path.write_text(header + "\n" + "".join(json.dumps({"t": 0.5, **e.to_dict()}) + "\n" for e in events))
    trace = read_trace(path)
    assert trace.token_ids == (5, 6, 7) and trace.max_new_tokens == 3 and trace.model == "tiny"


@pytest.mark.real_model
def test_predicted_pld_forwards_equal_real_runs_on_the_embedded_model(smollm2: Any) -> None:
    from decode_tui.core.modes import CODE_EDIT_PROMPT
    from decode_tui.core.params import DecodeConfig, DraftParams
    from decode_tui.core.run import Run

    events = list(Run(smollm2, CODE_EDIT_PROMPT, DecodeConfig(mode="greedy", max_new_tokens=48)).events())
    trace = trace_from_events(events)
    assert trace.eos_token_ids == smollm2.eos_token_ids  # the run recorded what ends its text
    for ngram, k in ((2, 4), (3, 10)):
        config = DecodeConfig(mode="pld", max_new_tokens=48, draft=DraftParams(max_ngram_size=ngram,
                                                                               num_pred_tokens=k))
        real = list(Run(smollm2, CODE_EDIT_PROMPT, config).events())[-1]
        assert isinstance(real, Finished) and real.token_ids == trace.token_ids
        assert replay_lookup(trace, smollm2.eos_token_ids, ngram, k).target_forwards == real.target_forwards


def test_a_real_prompt_lookup_run_prices_a_verifying_round_and_only_for_the_traces_own_text(byte_bpe: Any) -> None:
    import dataclasses

    from decode_tui.core.analysis.calibrate import calibrated, round_overhead
    from decode_tui.core.analysis.whatif import measure_costs

    from .test_autoregressive import loaded

    model = tiny_model("llama", vocab_size=V, seed=0)
    lm = loaded(model, byte_bpe, V - 1)
    prompt = repetitive_prompt(0, 14)
    transcript = Transcript("greedy", prompt, Detokenizer(byte_bpe), EOS, 24)
    trace = trace_from_events([started(prompt, 24, eos_token_ids=sorted(EOS)),
                               *autoregressive(model, transcript, SamplingParams(), greedy=True)])
    costs = calibrated(lm, trace, measure_costs(lm, trace, 11, repeats=2), 2, 2)
    assert costs.overhead_s >= 0 and costs.spread >= 0 and costs.round_overhead_s >= 0
    assert replay_lookup(trace, lm.eos_token_ids, 3, 10).drafted > 0, "the text has something to copy"
    assert round_overhead(lm, trace, costs, 2) >= 0
    other = dataclasses.replace(trace, token_ids=tuple(reversed(trace.token_ids)))  # not what this model writes
    assert round_overhead(lm, other, costs, 2) == 0.0


@given(prompt=st.lists(st.integers(0, 5), min_size=1, max_size=30),
       output=st.lists(st.integers(0, 6), min_size=1, max_size=40), ngram=st.integers(1, 3))
def test_memoised_lookup_replays_equal_the_plain_ones(prompt: list[int], output: list[int], ngram: int) -> None:
    """One memo of the longest copies serves every k and the text as it grows (6 is the EOS here: a copy stops
    before it)."""
    eos = frozenset({6})
    memo = LookupMemo(eos, ngram, 6)
    for upto in (len(output) // 2, len(output)):
        if upto == 0:
            continue
        trace = Trace(source="t", model="", mode="pld", prompt_ids=tuple(prompt), token_ids=tuple(output[:upto]),
                      max_new_tokens=upto, target_forwards=0, params={})
        for k in range(1, 7):
            assert memo.widths(trace, k) == replay_lookup(trace, eos, ngram, k).widths, (upto, k)


def test_the_modes_a_trace_cannot_replay_are_those_drafting_from_the_targets_own_outputs() -> None:
    assert unreplayable() == ("recycle", "lookahead")


@pytest.mark.parametrize("mode", unreplayable())
def test_a_mode_a_trace_cannot_replay_is_counted_on_a_greedy_run_of_its_prompt(byte_bpe: Any, mode: str) -> None:
    model = tiny_model("llama", vocab_size=V, seed=2)
    lm = loaded(model, byte_bpe, V - 1)
    prompt = mixed_prompt(2)
    trace = greedy_trace(model, byte_bpe, prompt, 24)
    said: list[str] = []
    row = counted(lm, trace, mode, 8, say=said.append)
    assert row is not None and not said
    assert row.drafter == mode and row.tree_budget == 8 and row.draft_length > 0
    new = len(trace.token_ids)
    # a width for every forward after the prefill; every drafted node fed once; each forward adds its accepted tokens
    # and one of the target's own (the last may be cut by the limit)
    assert len(row.widths) == row.target_forwards - 1 and row.target_forwards <= new
    assert row.drafted == sum(w - 1 for w in row.widths) and max(row.widths) <= 8 + 1
    assert row.accepted <= new - 1 < row.accepted + row.target_forwards
    # a trace whose tokens this model does not write (another machine's numerics): said, and no row
    other = dataclasses.replace(trace, token_ids=(trace.token_ids[0], (trace.token_ids[1] + 1) % (V - 1),
                                                  *trace.token_ids[2:]))
    assert counted(lm, other, mode, 8, say=said.append) is None
    assert said and f"--mode {mode}" in said[0]


def test_a_counted_modes_row_names_its_own_draft_length_option() -> None:
    row = WhatIf("recycle", None, 10, 20, 1.5, 0.2, None, None, tree_budget=4)
    data = row.to_dict()
    assert data["num_pred_tokens"] == 10 and data["tree_budget"] == 4 and data["drafter"] == "recycle"
