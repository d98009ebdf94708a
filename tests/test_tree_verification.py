"""Trees of drafts verified in one forward (core/strategies/tree_acceptance.py in speculative.py): greedy emits
plain greedy's tokens whatever the tree, sampling emits the target's distribution (a chi-square test, with a
control that follows the first child unconditionally and fails), every node gets its verdict, and the drafters
that give trees (prompt lookup's every match, suffix drafting) stay lossless."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from decode_tui.core.choosing.tree_sampling import Among
from decode_tui.core.drafting.drafters import Draft
from decode_tui.core.drafting.model_drafter import ModelDrafter
from decode_tui.core.drafting.prompt_lookup import PromptLookup
from decode_tui.core.drafting.suffix_drafting import SuffixDrafter, SuffixHistory, read_history
from decode_tui.core.errors import UsageError
from decode_tui.core.params import SamplingParams
from decode_tui.core.record.events import DraftProposed, DraftVerified, Event, Finished, TokenSource, from_dict
from decode_tui.core.strategies import tree_acceptance
from decode_tui.core.token_tree import ROOT, TokenTree

from .conftest import tiny_model
from .test_speculative import ARCHS, SAMPLING, V, chi_square_p_value, exact_distribution, greedy, repetitive_prompt, run


class Oracle:
    """Proposes random trees around a known right answer: the true continuation hidden at a random branch (or
    left out, or cut short), among decoy branches that share some of its prefix."""

    kind = "lookup"
    source: TokenSource = "lookup"
    tree_budget = 12
    free_to_ask = True
    stops_itself = False
    ranked = False
    learns = False

    def __init__(self, truth: list[int], prompt_length: int, seed: int) -> None:
        self.truth, self.start, self.rng = truth, prompt_length, random.Random(seed)

    def propose(self, context: list[int], k: int, processors: Any, greedy: bool, generator: Any) -> Draft:
        done = len(context) - self.start
        right = self.truth[done : done + self.rng.randint(0, k)]
        chains = []
        for _ in range(self.rng.randint(1, 3)):
            shared = right[: self.rng.randint(0, len(right))]
            chains.append([*shared, *(self.rng.randrange(1, V - 2) for _ in range(self.rng.randint(1, 3)))])
        if self.rng.random() < 0.8:
            chains.insert(self.rng.randint(0, len(chains)), right)
        tree = TokenTree.from_chains([c[:k] for c in chains if c])
        return Draft(list(tree.tokens), parents=tree.parents, sources=("oracle",) * len(tree))

    def rollback(self, confirmed: int) -> None:
        pass

    def observed(self, tokens: Any, logits: Any) -> None:
        pass

    def prefilled(self, context: list[int], cache: Any) -> None:
        pass

    def tune(self, params: Any) -> None:
        pass

    def draft_length(self, params: Any) -> int:
        return int(params.num_pred_tokens)

    def replay(self, transcript: Any) -> None:
        return None

    def time_step(self, context: list[int], processors: Any) -> float:
        return 0.0

    def close(self) -> None:
        pass


def rounds(events: list[Event]) -> list[tuple[DraftProposed, DraftVerified]]:
    proposed = [e for e in events if isinstance(e, DraftProposed)]
    verified = [e for e in events if isinstance(e, DraftVerified)]
    assert len(proposed) == len(verified)
    return list(zip(proposed, verified, strict=True))


@pytest.mark.parametrize("seed", range(8))
def test_greedy_tree_verification_emits_plain_greedys_tokens(byte_bpe: Any, seed: int) -> None:
    model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed)
    prompt = repetitive_prompt(seed, 3 + seed)
    for max_new, params in itertools.product((1, 5, 17), (SamplingParams(), SamplingParams(repetition_penalty=1.3))):
        expected = greedy(model, byte_bpe, prompt, max_new, params=params).token_ids
        events = run(model, byte_bpe, Oracle(list(expected), len(prompt), seed), prompt, max_new, params=params, k=6)
        result = events[-1]
        assert isinstance(result, Finished) and result.token_ids == expected, (max_new, params)
        for proposed, verified in rounds(events):
            assert proposed.parents is not None and verified.path is not None
            tree = TokenTree(proposed.token_ids, proposed.parents)
            path = list(verified.path)
            assert [v.position for v in verified.verdicts] == list(range(len(tree)))
            assert {v.position for v in verified.verdicts if v.verdict == "accepted"} == set(path)
            assert path == tree.path_to(path[-1]) if path else True, "the kept nodes are one path from the root"
            last = path[-1] if path else ROOT
            for child in tree.children(last):  # the target went elsewhere at the end of the path
                if verified.extra_token_id is not None:
                    assert verified.verdicts[child].verdict == "rejected"
                    assert tree.tokens[child] != verified.extra_token_id
            if not tree.children(last) and verified.extra_token_id is not None:
                assert verified.extra_kind == "bonus"
            for v in verified.verdicts:  # nothing below a node the target left is tested
                parent = tree.parents[v.position]
                if parent != ROOT and parent not in path:
                    assert v.verdict == "untested"


def test_a_tree_keeps_the_right_branch_a_chain_would_have_missed(byte_bpe: Any) -> None:
    """The true continuation as the tree's second branch: the round accepts it whole, where the first branch's
    chain would have accepted nothing."""
    model = tiny_model("llama", vocab_size=V, seed=5)
    prompt = [5, 6, 7, 8]
    truth = list(greedy(model, byte_bpe, prompt, 6).token_ids)

    class Second(Oracle):
        def propose(self, context: list[int], k: int, processors: Any, greedy: bool, generator: Any) -> Draft:
            done = len(context) - self.start
            right = self.truth[done : done + 3]
            wrong = [t + 1 if t + 1 < V - 2 else 1 for t in right]
            tree = TokenTree.from_chains([wrong, right])
            return Draft(list(tree.tokens), parents=tree.parents)

    events = run(model, byte_bpe, Second(truth, len(prompt), 0), prompt, 6, k=3)
    _, first = rounds(events)[0]
    assert first.accepted == 3 and first.path == (3, 4, 5)
    assert [v.verdict for v in first.verdicts] == ["rejected", "untested", "untested",
                                                   "accepted", "accepted", "accepted"]
    assert isinstance(events[-1], Finished) and events[-1].token_ids == tuple(truth)


@pytest.mark.parametrize("seed", range(8))
def test_prompt_lookup_trees_and_suffix_drafting_equal_plain_greedy(byte_bpe: Any, seed: int) -> None:
    model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed)
    g = torch.Generator().manual_seed(seed)
    # Two continuations of the same bigram, so lookups find several matches.
    a, b, c, d = torch.randint(1, V - 2, (4,), generator=g).tolist()
    prompt = [a, b, c, d, a, b, d, c, a, b, c, a, b][: 5 + seed]
    history = SuffixHistory()
    history.add(list(greedy(model, byte_bpe, prompt, 12).token_ids), "an earlier run")
    for max_new in (1, 4, 12):
        expected = greedy(model, byte_bpe, prompt, max_new).token_ids
        for drafter in (PromptLookup(3, 5, frozenset({V - 1}), tree_budget=8),
                        SuffixDrafter(SuffixHistory(), 5, 8, frozenset({V - 1})),
                        SuffixDrafter(history, 5, 8, frozenset({V - 1}))):
            result = run(model, byte_bpe, drafter, prompt, max_new, k=5)[-1]
            assert isinstance(result, Finished) and result.token_ids == expected, (type(drafter), max_new)


def test_a_second_run_drafts_its_whole_output_from_the_first(byte_bpe: Any) -> None:
    model = tiny_model("qwen2", vocab_size=V, seed=2)
    prompt = [11, 12, 13]
    first = greedy(model, byte_bpe, prompt, 24).token_ids
    history = SuffixHistory()
    history.add(list(first), "the first run")
    events = run(model, byte_bpe, SuffixDrafter(history, 8, 16, frozenset({V - 1})), prompt, 24, k=8)
    result = events[-1]
    assert isinstance(result, Finished) and result.token_ids == first
    # The draft grows with the match (one node for a one-token match, the paper's rule): a few short rounds first,
    # then whole 8-token paths.
    assert result.target_forwards <= 24 // 4
    alone = run(model, byte_bpe, SuffixDrafter(SuffixHistory(), 8, 16, frozenset({V - 1})), prompt, 24, k=8)[-1]
    assert isinstance(alone, Finished) and alone.target_forwards > result.target_forwards


class TopTree(Oracle):
    """Copies a tree of the target's own likeliest tokens (a deterministic function of the context, so q is
    one-hot): its top 3 at the root, each followed by the top 2 after it. Trees the target often follows, so the
    statistical test has power."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def propose(self, context: list[int], k: int, processors: Any, greedy: bool, generator: Any) -> Draft:
        with torch.inference_mode():
            first = self.model(torch.tensor([context])).logits[0, -1].topk(3).indices.tolist()
            chains = []
            for token in first:
                after = self.model(torch.tensor([[*context, token]])).logits[0, -1].topk(2).indices.tolist()
                chains += [[token, t][:k] for t in after]
        tree = TokenTree.from_chains(chains)
        return Draft(list(tree.tokens), parents=tree.parents)


def sampled(model: Any, tokenizer: Any, prompt: list[int], n: int) -> Counter[tuple[int, ...]]:
    counts: Counter[tuple[int, ...]] = Counter()
    for seed in range(n):
        result = run(model, tokenizer, TopTree(model), prompt, 3, params=SAMPLING, k=2, sample=True, seed=seed)[-1]
        assert isinstance(result, Finished)
        counts[tuple(result.token_ids)] += 1
    return counts


def tree_case() -> tuple[Any, list[int]]:
    return tiny_model("llama", vocab_size=V, seed=21, initializer_range=0.08), [7, 8, 9]


@pytest.mark.slow
def test_tree_sampling_preserves_the_target_distribution(byte_bpe: Any) -> None:
    model, prompt = tree_case()
    counts = sampled(model, byte_bpe, prompt, 3000)
    assert chi_square_p_value(counts, exact_distribution(model, prompt, SAMPLING, 3)) > 1e-3


@pytest.mark.slow
def test_negative_control_following_the_first_child_fails_the_same_test(byte_bpe: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def first_child(p: torch.Tensor, children: list[int], q: Any, generator: Any) -> Among:
        if children:
            return Among(0, children[0], [0.0])
        return Among(None, int(torch.multinomial(p, 1, generator=generator)), [])

    monkeypatch.setattr(tree_acceptance, "accept_among", first_child)
    model, prompt = tree_case()
    counts = sampled(model, byte_bpe, prompt, 3000)
    assert chi_square_p_value(counts, exact_distribution(model, prompt, SAMPLING, 3)) < 1e-6


def test_prompt_lookup_drafts_every_match_as_a_tree(byte_bpe: Any) -> None:
    """ "7 8" was followed by 9, by 5 and by 6: after it prompt lookup drafts three branches, the first match's
    first, and sampling verification runs over them."""
    model = tiny_model("llama", vocab_size=V, seed=21, initializer_range=0.08)
    draft = PromptLookup(2, 2, tree_budget=6).propose([7, 8, 9, 1, 7, 8, 5, 2, 7, 8, 6, 3, 7, 8], 2, [], False, None)
    assert draft.tree is not None and [draft.tree.tokens[i] for i in draft.tree.children(ROOT)] == [9, 5, 6]
    assert draft.first_branch().token_ids == [9, 1]
    events = run(model, byte_bpe, PromptLookup(2, 2, tree_budget=6), [7, 8, 9, 1, 7, 8, 5, 2, 7, 8, 6, 3, 7], 6,
                 params=SAMPLING, k=2, sample=True)
    assert isinstance(events[-1], Finished)
    for _, verified in rounds(events):
        tried = [v for v in verified.verdicts if v.verdict != "untested"]
        assert all(v.u is not None for v in tried), "each child tried was tested with a draw"


def test_an_end_of_text_on_the_accepted_path_ends_the_run_there(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=1)
    prompt = [3, 4, 5]
    truth = list(greedy(model, byte_bpe, prompt, 8).token_ids)
    eos = truth[3]  # the fourth greedy token ends the run when it is the EOS
    expected = greedy(model, byte_bpe, prompt, 8, eos=eos).token_ids
    assert expected == tuple(truth[:4])
    events = run(model, byte_bpe, Oracle(truth, len(prompt), 3), prompt, 8, eos=eos, k=6)
    result = events[-1]
    assert isinstance(result, Finished) and result.token_ids == expected
    for _, verified in rounds(events):
        assert verified.path is not None and len(verified.path) == verified.accepted


def test_a_recorded_tree_round_trips_and_a_malformed_one_is_refused(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=4)
    prompt = [9, 8, 7]
    truth = list(greedy(model, byte_bpe, prompt, 10).token_ids)
    events = run(model, byte_bpe, Oracle(truth, len(prompt), 1), prompt, 10, k=4)
    for event in events:
        assert from_dict(json.loads(json.dumps(event.to_dict()))) == event
    proposed = next(e for e in events if isinstance(e, DraftProposed)).to_dict()
    with pytest.raises(ValueError, match="parents"):
        from_dict({**proposed, "parents": [0] * len(proposed["token_ids"])})  # node 0 its own parent
    with pytest.raises(ValueError, match="parents"):
        from_dict({**proposed, "parents": [-1]})


def test_a_chain_from_the_history_is_as_long_as_the_draft_length_whatever_the_tree_budget(byte_bpe: Any) -> None:
    """A CPU's tree budget (4) capped suffix drafting's chains at 4 tokens where the history held the whole answer
    (18 forwards for 80 tokens where 10 could do): the budget caps a tree's nodes, not a chain's length. A tree is
    still cut to the budget, its first nodes kept (best first), and the output is greedy's."""
    history = SuffixHistory()
    history.add(list(range(20, 50)), "a run")
    drafter = SuffixDrafter(history, 10, 4)
    chain = drafter.propose([1, 2, *range(20, 32)], 10, [], True, None)
    assert chain.token_ids == list(range(32, 42)) and chain.parents is None
    forked = SuffixHistory()
    for tail in ([7, 8, 9, 10, 11], [7, 6, 5, 4, 3], [2, 1, 4, 4, 4]):
        forked.add([20, 21, 22, 23, *tail], "a run")
    tree = SuffixDrafter(forked, 10, 4).propose([1, 20, 21, 22, 23], 10, [], True, None)
    assert tree.parents is not None and len(tree.token_ids) == 4
    model = tiny_model("qwen2", vocab_size=V, seed=2)
    prompt = [11, 12, 13]
    first = greedy(model, byte_bpe, prompt, 40).token_ids
    again = SuffixHistory()
    again.add(list(first), "the first run")
    result = run(model, byte_bpe, SuffixDrafter(again, 10, 4, frozenset({V - 1})), prompt, 40, k=10)[-1]
    assert isinstance(result, Finished) and result.token_ids == first
    assert result.target_forwards <= 40 // 5, "chains of up to 10 tokens, not of the budget's 4"


def test_the_history_a_run_drafts_from_is_a_snapshot() -> None:
    history = SuffixHistory()
    history.add([1, 2, 3, 4], "first")
    frozen = history.snapshot()
    history.add([1, 2, 9, 9], "second")
    assert frozen.tree.count([1, 2, 9]) == 0 and history.tree.count([1, 2, 9]) == 1
    assert frozen.origins == ["first"]


def test_history_files_are_read_as_traces_or_text(tmp_path: Path) -> None:
    text = tmp_path / "earlier.txt"
    text.write_text("abc abc", encoding="utf-8")
    trace = tmp_path / "run.jsonl"
    trace.write_text(json.dumps({"event": "started", "mode": "greedy", "model": "m", "prompt_token_ids": [1],
                                 "prompt_text": "x", "params": {}}) + "\n" +
                     json.dumps({"event": "finished", "mode": "greedy", "prompt_token_ids": [1],
                                 "token_ids": [5, 6, 7], "text": "zz", "finish_reason": "length", "new_tokens": 3,
                                 "target_forwards": 3, "elapsed_s": 0.1, "tokens_per_s": 30.0}) + "\n",
                     encoding="utf-8")
    history = SuffixHistory()
    read_history([text, trace], lambda s: [ord(ch) for ch in s], "m", history)
    assert history.files is not None and history.files.origins == ("earlier.txt", "run.jsonl")
    assert history.count([ord("a"), ord("b"), ord("c")]) == 2 and history.count([5, 6, 7]) == 1, \
        "the text tokenised; the same model's ids as they are"
    assert history.count([ord("c"), 5]) == 0, "no match runs from one file into the next"
    other = SuffixHistory()
    read_history([trace], lambda s: [ord(ch) for ch in s], "another model", other)
    assert other.count([ord("z"), ord("z")]) == 1 and other.count([5]) == 0, "another model's text, tokenised anew"
    spaces = tmp_path / "spaces.txt"
    spaces.write_text("\n\n", encoding="utf-8")
    with pytest.raises(UsageError, match="nothing to draft from"):
        read_history([spaces], lambda s: [ord(ch) for ch in s], "m", SuffixHistory())
    with pytest.raises(UsageError, match="no such file"):
        read_history([tmp_path / "missing.txt"], lambda s: [], "m", SuffixHistory())


def test_a_history_that_cannot_give_a_draft_is_refused_before_any_model_loads(tmp_path: Path) -> None:
    from decode_tui.core.drafting import suffix_drafting
    from decode_tui.core.drafting.suffix_drafting import check_history_files

    good = tmp_path / "good.txt"
    good.write_text("def f(x):\n    return x\n", encoding="utf-8")
    check_history_files([good])
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)) * 8)
    latin = tmp_path / "latin1.txt"
    latin.write_bytes("café crème".encode("latin-1"))
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    cut = tmp_path / "cut.jsonl"
    cut.write_text(json.dumps({"event": "started", "mode": "greedy", "model": "m", "prompt_token_ids": [1],
                               "prompt_text": "x", "params": {}}) + '\n{"event": "token_emi', encoding="utf-8")
    unfinished = tmp_path / "unfinished.jsonl"
    unfinished.write_text(cut.read_text().splitlines()[0] + "\n", encoding="utf-8")
    for paths, says in (([tmp_path / "missing.txt"], "no such file"), ([tmp_path], "is a folder"),
                        ([binary], "not UTF-8 text"), ([latin], "not UTF-8 text"), ([empty], "is empty"),
                        ([cut], "line 2"), ([unfinished], "no `finished` event"),
                        ([good, good, tmp_path / "." / "good.txt"], "is given 3 times")):
        with pytest.raises(UsageError, match=says):
            check_history_files(paths)
    big = tmp_path / "big.txt"
    with big.open("wb") as f:
        f.truncate(suffix_drafting.MAX_HISTORY_BYTES + 1)  # sparse: its size alone refuses it
    with pytest.raises(UsageError, match=r"over the 64 MB a run reads"):
        check_history_files([good, big])


def test_history_files_are_read_once_for_a_warm_up_the_run_and_restarts(tmp_path: Path) -> None:
    from decode_tui.core.drafting.suffix_drafting import history_files
    from decode_tui.core.model.acquire import drive

    text = tmp_path / "earlier.txt"
    text.write_text("abc\n" * 3000, encoding="utf-8")
    encoded: list[int] = []

    def encode(s: str) -> list[int]:
        encoded.append(len(s))
        return [ord(ch) for ch in s]

    said: list[str] = []
    first = drive(history_files([text], encode, "m", encode), said.append)
    assert said[-1].startswith("sorting") and any("MB tokenised" in line for line in said)
    again = drive(history_files([text], encode, "m", encode), said.append)
    assert again is first and sum(encoded) == 12000, "read and indexed once"
    text.write_text("xyz\n", encoding="utf-8")
    assert drive(history_files([text], encode, "m", encode)) is not first, "a changed file is read again"


def test_the_run_tree_starts_again_when_the_context_is_not_a_continuation() -> None:
    drafter = SuffixDrafter(SuffixHistory(), 4, 8)
    # "1 2" matched: two nodes for a two-token pattern (the paper's max_spec_factor of 1).
    assert drafter.propose([1, 2, 3, 1, 2], 4, [], True, None).token_ids == [3, 1]
    # A rewound run (another context): what the old one saw is not drafted from.
    assert drafter.propose([4, 5, 1, 2], 4, [], True, None).token_ids == []


def test_a_tree_budget_the_context_cannot_hold_is_refused_and_suffix_mode_has_a_budget_per_device(
        byte_bpe: Any) -> None:
    from decode_tui.core.params import DecodeConfig, DraftParams
    from decode_tui.core.run import Run

    from .test_autoregressive import loaded

    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=4, max_positions=64), byte_bpe, 2)
    with pytest.raises(UsageError, match="--tree-budget 60 does not fit"):
        Run(lm, "Hello world", DecodeConfig(mode="suffix", draft=DraftParams(tree_budget=60)))
    # The device's own budget: measured on the CPU, the narrowest where the model reads too few positions for it.
    assert Run(lm, "Hello world", DecodeConfig(mode="suffix")).tree_budget == 3
    assert Run(lm, "Hello world", DecodeConfig(mode="pld")).tree_budget == 0, "prompt lookup drafts chains unasked"
    assert Run(lm, "Hello world", DecodeConfig(mode="pld", draft=DraftParams(tree_budget=5))).tree_budget == 5


@pytest.mark.parametrize("seed", range(6))
def test_a_draft_models_runners_up_join_as_leaves_and_greedy_stays_greedy(byte_bpe: Any, seed: int) -> None:
    model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed)
    draft = tiny_model(ARCHS[(seed + 1) % 4], vocab_size=V, seed=seed + 100, initializer_range=0.05)
    prompt = repetitive_prompt(seed, 6)
    expected = greedy(model, byte_bpe, prompt, 16).token_ids
    events = run(model, byte_bpe, ModelDrafter(draft, V, confidence_threshold=0.0, tree_budget=8), prompt, 16, k=4)
    result = events[-1]
    assert isinstance(result, Finished) and result.token_ids == expected
    trees = [(p, v) for p, v in rounds(events) if p.parents is not None]
    assert trees, "an unsure random draft has runners-up"
    for proposed, verified in trees:
        assert len(proposed.token_ids) <= 8 and proposed.q_probs is not None
        tree = TokenTree(proposed.token_ids, proposed.parents or ())
        chain = [i for i, s in enumerate(proposed.sources or ()) if s == "the draft's choice"]
        assert [tree.parents[i] for i in chain] == list(range(-1, len(chain) - 1)), "the chain comes first"
        for i in range(len(chain), len(tree)):
            assert not tree.children(i), "a runner-up is a leaf"
            sibling = next(c for c in chain if tree.parents[c] == tree.parents[i])
            assert proposed.q_probs[i] <= proposed.q_probs[sibling], "the second choice"
        assert [v.q for v in verified.verdicts] == list(proposed.q_probs)
    sampled = run(model, byte_bpe, ModelDrafter(draft, V, tree_budget=8), prompt, 8, k=4, sample=True,
                  params=SAMPLING)
    assert all(e.parents is None for e in sampled if isinstance(e, DraftProposed)), "no runners-up when sampling"


def test_every_timed_suffix_run_drafts_from_the_same_history(byte_bpe: Any, tmp_path: Path) -> None:
    """The fair-figures rule: a benchmark's rounds of suffix drafting each start from the history files alone, so no
    timed run learns from an earlier repeat of itself (each would otherwise copy the last one whole)."""
    from decode_tui.core.analysis.compare import timed_rounds
    from decode_tui.core.params import DecodeConfig, DraftParams

    from .test_autoregressive import loaded

    lm = loaded(tiny_model("llama", vocab_size=len(byte_bpe), seed=7), byte_bpe, 2)
    earlier = tmp_path / "earlier.txt"
    earlier.write_text("the cat sat on the mat", encoding="utf-8")
    config = DecodeConfig(mode="suffix", max_new_tokens=24, use_chat=False,
                          draft=DraftParams(history=(str(earlier),)))
    results = timed_rounds(lm, "a story", {"suffix": config}, runs=3)["suffix"]
    assert len({r.token_ids for r in results}) == 1
    assert len({r.target_forwards for r in results}) == 1, "every round drafted from the same state"
    session = SuffixHistory()
    session.add(list(results[0].token_ids), "a finished run")  # what the app's session would hold next
    from decode_tui.core.run import Run

    warmed = list(Run(lm, "a story", config, history=session).events())[-1]
    assert isinstance(warmed, Finished) and warmed.token_ids == results[0].token_ids
    assert warmed.target_forwards < results[0].target_forwards, "the session's earlier run is what it learns from"


@pytest.mark.parametrize("seed", range(4))
def test_suffix_draftings_replay_gives_each_draft_lengths_real_widths(byte_bpe: Any, seed: int) -> None:
    """The adaptive policy prices suffix drafting's draft lengths by an exact replay (core/replay.SuffixMemo): the
    widths it replays for k are those a real run at k feeds, and an adaptive run stays greedy's tokens."""
    from decode_tui.core.drafting.replay import Trace
    from decode_tui.core.drafting.suffix_drafting import SuffixMemo

    model = tiny_model(ARCHS[seed % 4], vocab_size=V, seed=seed)
    prompt = repetitive_prompt(seed, 8)
    history = SuffixHistory()
    history.add(list(greedy(model, byte_bpe, prompt, 10).token_ids), "earlier")
    expected = greedy(model, byte_bpe, prompt, 20)
    trace = Trace(source="t", model="", mode="greedy", prompt_ids=tuple(prompt), token_ids=expected.token_ids,
                  max_new_tokens=20, target_forwards=0, params={})
    memo = SuffixMemo(SuffixDrafter(history, 6, 8, frozenset({V - 1})), frozenset({V - 1}))
    for k in (1, 3, 6):
        events = run(model, byte_bpe, SuffixDrafter(history, 6, 8, frozenset({V - 1})), prompt, 20, k=k)
        widths = [1 + len(e.verdicts) for e in events if isinstance(e, DraftVerified)]
        forwards = events[-1].target_forwards if isinstance(events[-1], Finished) else None
        replayed = memo.widths(trace, k)
        assert [w for w in replayed if w > 1] == widths, k
        assert len(replayed) + 1 == forwards, k
    adaptive = run(model, byte_bpe, SuffixDrafter(history, 6, 8, frozenset({V - 1})), prompt, 20, k=6,
                   adaptive=True)[-1]
    assert isinstance(adaptive, Finished) and adaptive.token_ids == expected.token_ids
