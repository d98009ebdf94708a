"""Token recycling (core/drafting/recycling.py): the matrix keeps the target's last top-k after each token it read,
the template grows best-first within its budget, greedy recycling is transformers' greedy token for token, and
sampling through recycled trees keeps the target's distribution (a chi-square test; its negative control is the
tree verifier's, tests/test_tree_verification.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decode_tui.core.drafting.drafters import Draft
from decode_tui.core.drafting.recycling import (
    BLOCK,
    COMMONEST,
    EMPTY,
    RETRIEVED_MATCH,
    Commonest,
    RecycledMatrix,
    RecyclingDrafter,
    graft,
    retrieved,
    template,
    top_ids,
)
from decode_tui.core.record.events import DraftProposed, DraftVerified, Finished, Started
from decode_tui.core.token_tree import ROOT, TokenTree

from .conftest import tiny_model
from .test_speculative import (
    SAMPLING,
    V,
    chi_square_p_value,
    exact_distribution,
    run,
    transformers_greedy_case,
)

EOS = V - 1


def drafter(k: int = 8, budget: int = 8, depth: int = 5) -> RecyclingDrafter:
    return RecyclingDrafter(RecycledMatrix(V, k), depth, budget, frozenset({EOS}))


def test_the_template_is_a_tree_of_its_budget_grown_best_first() -> None:
    for budget, depth, k in ((1, 5, 8), (4, 5, 8), (16, 3, 8), (80, 6, 8), (10, 10, 1)):
        nodes = template(budget, depth, k)
        assert len(nodes) == budget if k > 1 or budget <= depth else len(nodes) == depth
        tree = TokenTree(tuple(range(len(nodes))), tuple(parent for parent, _ in nodes))  # parents come first
        assert tree.depth <= depth and all(0 <= rank < k for _, rank in nodes)
    assert template(4, 5, 8)[0] == (ROOT, 0)  # the likeliest guess after the pending token first
    assert template(5, 5, 1) == [(ROOT, 0), (0, 0), (1, 0), (2, 0), (3, 0)]  # k = 1: a chain
    # A second guess at the root outranks a fourth token down the first chain's path under the prior.
    assert (ROOT, 1) in template(4, 5, 8)


def test_the_matrix_keeps_each_tokens_latest_top_k() -> None:
    matrix = RecycledMatrix(V, 3)
    assert matrix.filled() == 0 and matrix.row(5) == [EMPTY] * 3
    logits = torch.zeros(2, V)
    logits[0, [10, 11, 12]] = torch.tensor([3.0, 2.0, 1.0])
    logits[1, [20, 21, 22]] = torch.tensor([1.0, 3.0, 2.0])
    matrix.observe([5, 6], logits)
    assert matrix.row(5) == [10, 11, 12] and matrix.row(6) == [21, 22, 20] and matrix.filled() == 2
    later = torch.zeros(1, V)
    later[0, [30, 31, 32]] = torch.tensor([3.0, 2.0, 1.0])
    matrix.observe([5], later)
    assert matrix.row(5) == [30, 31, 32], "a later read of a token replaces its row"
    assert matrix.row(V + 3) == [EMPTY] * 3, "a token past the vocabulary has no row"


def test_a_draft_follows_the_rows_and_an_empty_row_backs_off_to_the_commonest_tokens() -> None:
    d = drafter(k=2, budget=4, depth=3)
    backed = d.propose([1, 2, 2, 1, 2, 3], 3, [], True, None)  # no row for 3: the text's commonest, most first
    assert backed.token_ids == [2, 1, 3] and backed.unranked and backed.graft_match == 0
    assert backed.tree is not None and set(backed.tree.parents) == {ROOT}, "each a child of the pending token"
    assert backed.rows is not None and ("commonest", (2, 1, 3)) in backed.rows
    assert d.propose([1, 2, EOS], 3, [], True, None).token_ids == [], "nothing is drafted after an end of text"
    assert RecyclingDrafter(RecycledMatrix(V, 2), 3, 0).propose([1, 2, 3], 3, [], True, None).token_ids == [], \
        "a chain (no tree budget) has no tree to back off to"
    d.matrix.rows[3] = torch.tensor([40, 41], dtype=torch.int32)
    d.matrix.rows[40] = torch.tensor([50, EOS], dtype=torch.int32)
    d.matrix.rows[50] = torch.tensor([60, 61], dtype=torch.int32)
    draft = d.propose([1, 2, 3], 3, [], True, None)
    tree = draft.tree
    assert tree is not None and draft.sources is not None and len(draft.sources) == len(draft.token_ids)
    assert tree.first_branch() == [0, 1, 2] and [tree.tokens[i] for i in tree.first_branch()] == [40, 50, 60]
    assert 41 in tree.tokens  # the second guess at the root
    d.matrix.rows[EOS] = torch.tensor([7, 8], dtype=torch.int32)
    assert all(tree.tokens[p] != EOS for p in tree.parents if p != ROOT), "nothing is drafted after an end of text"
    chain = RecyclingDrafter(d.matrix, 3, 0).propose([1, 2, 3], 3, [], True, None)
    assert chain.tree is None and chain.token_ids == [40, 50, 60], "with no tree budget, a chain of first guesses"


def test_the_commonest_tokens_are_counted_as_the_text_grows_and_afresh_for_another_text() -> None:
    common = Commonest(skip=frozenset({9}))
    assert common.of([], 3) == []
    assert common.of([9, 9, 9, 4, 5, 5], 3) == [5, 4], "a skipped token (a special one) is never among them"
    assert common.of([9, 9, 9, 4, 5, 5, 4, 4], 2) == [4, 5], "the text grew: only its new tokens are counted"
    assert common.of([9, 9, 9, 4, 6, 6, 6], 2) == [6, 4], "another text (a rewind, another run): counted afresh"
    assert common.of([7, 7], 5) == [7], "a shorter text is another text too"
    assert common.of([1, 2, 3], 2) == [1, 2], "on a tie, the first seen"
    answer = Commonest(start=3)  # a prompt of three tokens
    assert answer.of([4, 4, 4], 2) == [] and answer.of([4, 4, 4, 5, 6, 6], 2) == [6, 5], "the answer's, not the prompt"
    assert answer.of([4, 4, 4, 5, 6, 6, 5, 5], 1) == [5] and answer.of([4, 4, 4, 7], 1) == [7], "rewound: afresh"
    d = RecyclingDrafter(RecycledMatrix(V, 2), 3, 4, frozenset({EOS}), special=frozenset({1}))
    assert 1 not in d.propose([1, 1, 1, 2, 3], 3, [], True, None).token_ids, "the tokenizer's special ones neither"
    assert COMMONEST < 8 and len(drafter(budget=64).propose(list(range(40)), 3, [], True, None).token_ids) == COMMONEST
    assert len(drafter(budget=2).propose(list(range(40)), 3, [], True, None).token_ids) == 2, "within the budget"


def test_the_longest_earlier_occurrence_of_the_texts_end_is_retrieved() -> None:
    text = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 30, 2, 3, 4, 5, 20, 21, 9, 2, 3, 4, 5]
    copy = retrieved(text, 3)
    # [2, 3, 4, 5] ends the text twice before; [1, 2, 3, 4, 5] is no longer match: the first occurrence, on a tie
    assert copy is not None and copy.retrieved and copy.token_ids == [6, 7, 8] and copy.tree is None
    assert copy.match == (1, 5) and copy.copied == (5, 8)
    longer = [*text[:-5], 30, 2, 3, 4, 5]  # now [30, 2, 3, 4, 5] matches the second occurrence: the longer match wins
    found = retrieved(longer, 3)
    assert found is not None and found.token_ids == [20, 21, 30] and found.match == (10, 15)
    assert retrieved([1, 2, 3, 9, 1, 2, 3], 3, shortest=4) is None, "a match shorter than asked for"
    short = retrieved([1, 2, 3, 9, 1, 2, 3], 3)
    assert short is not None and short.match == (0, 3) and short.token_ids == [9, 1, 2]
    assert retrieved([1, 2, 3, 4, EOS, 7, 1, 2, 3, 4], 3, frozenset({EOS})) is None, "nothing before an end of text"
    cut = retrieved([1, 2, 3, 4, 5, 1, 2, 3, 4], 5)
    assert cut is not None and cut.token_ids == [5, 1, 2, 3, 4] and cut.stopped is None  # a copy may overlap the end
    ends = retrieved([1, 2, 3, 4, 5, 6, 1, 2, 3, 4], 8)
    assert ends is not None and ends.token_ids == [5, 6, 1, 2, 3, 4] and ends.stopped is not None
    assert retrieved([1, 2, 3], 3) is None, "no token of the text's end occurred before"


def test_a_long_match_is_copied_instead_of_the_tree_and_a_short_ones_copy_joins_the_tree() -> None:
    """SAM-Decoding's rule at RETRIEVED_MATCH tokens or more: the copy alone, a chain; under it, the copy grafted onto
    the recycled tree through the nodes it shares, its own nodes last: verified with the whole tree, dropped by a
    cut."""
    assert RETRIEVED_MATCH == 4
    d = drafter(k=2, budget=4, depth=3)
    d.matrix.rows[5] = torch.tensor([40, 41], dtype=torch.int32)
    d.matrix.rows[40] = torch.tensor([50, 51], dtype=torch.int32)
    long = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 30, 2, 3, 4, 5]
    draft = d.propose(long, 3, [], True, None)
    assert draft.retrieved and draft.token_ids == [6, 7, 8] and draft.tree is None and draft.state is not None
    assert draft.cut(1).token_ids == [6], "a cut is the strategy's to skip (core/strategies/speculative.py)"

    short = [9, 5, 40, 77, 3, 5]  # "5" occurred before, followed by 40, 77, 3: the copy shares the tree's node 40
    tree = d.propose(short, 3, [], True, None)
    assert not tree.retrieved and tree.tree is not None and tree.sources is not None and tree.pinned == 2
    grown = tree.tree
    # The template's three nodes (40, 50, 41: 50's row is empty), the copy's two; over the budget of 4, the
    # last-ranked node (41) gives way.
    assert grown.tokens == (40, 50, 77, 3)
    assert [grown.tokens[n] for n in grown.path_to(3)] == [40, 77, 3], "through the tree's own 40"
    assert tree.sources[2:] == ("copied after the match at 1",) * 2
    assert tree.cut(2, pinned=True) is tree, "every ranked node verified, and the copy where it pays"
    assert tree.cut(2).token_ids == [40, 50], "where it does not pay it is dropped, every ranked node kept or not"
    cut = tree.cut(1)
    assert cut.token_ids == [40] and cut.pinned == 0, "a cut drops it unless told to keep it"
    assert tree.cut(1, pinned=True).token_ids == [40, 77, 3]
    two = Draft([1, 2, 3], parents=(-1, 0, 0), sources=("a", "b", "c")).within(2)
    assert (two.token_ids, two.parents, two.sources) == ([1, 2], None, ("a", "b")), "a chain, where the cut is one"
    assert tree.within(3).token_ids == [40, 77, 3], "the copy's path whole, then the ranked nodes that fit"
    assert tree.within(4) is tree
    assert graft([], [], [], Draft([7, 8], match=(3, 4))) == 2


@st.composite
def grafted_trees(draw: Any) -> tuple[Draft, list[int]]:
    """A ranked tree (parents first), and a copy grafted on it as recycling grafts one: through the tree's own nodes
    from the root down to one of them (or none), then new nodes in a chain. Token i + 100 marks node i. Returns the
    draft and the graft's whole path, by node."""
    ranked = draw(st.integers(1, 12))
    parents = [draw(st.integers(-1, i - 1)) for i in range(ranked)]
    through = draw(st.integers(-1, ranked - 1))  # the last tree node the copy runs through (-1: none)
    path = TokenTree(tuple(range(ranked)), tuple(parents)).path_to(through) if through >= 0 else []
    pinned = draw(st.integers(1, 5))
    parents += [through, *range(ranked, ranked + pinned - 1)]
    tokens = [i + 100 for i in range(len(parents))]
    return (Draft(tokens, parents=tuple(parents), sources=tuple(map(str, range(len(tokens)))), pinned=pinned,
                  graft_match=2), path + list(range(ranked, ranked + pinned)))


@given(grafted_trees(), st.integers(0, 18))
@settings(max_examples=200, deadline=None)
def test_a_draft_within_a_budget_keeps_its_graft_whole_and_the_first_ranked_nodes_that_fit(
        grafted: tuple[Draft, list[int]], budget: int) -> None:
    draft, path = grafted
    ranked = len(draft.token_ids) - draft.pinned
    cut = draft.within(budget)
    if len(draft.token_ids) <= budget:
        assert cut is draft
        return
    kept = [t - 100 for t in cut.token_ids]  # the nodes kept, by their index in the draft
    assert len(kept) == max(budget, len(path)), "the budget filled, or only the graft's path where it is longer"
    assert set(path) <= set(kept) and cut.pinned == draft.pinned and cut.graft_match == draft.graft_match
    others = [i for i in range(ranked) if i not in path]
    assert [i for i in kept if i < ranked and i not in path] == others[: len(kept) - len(path)], "in rank order"
    tree = cut.token_tree()
    assert [kept[i] for i in tree.path_to(len(kept) - 1)] == path, "the graft's path, as the draft had it"
    parents = draft.token_tree().parents
    assert all(parents[k] == (kept[p] if p >= 0 else -1) for k, p in zip(kept, tree.parents, strict=True))
    assert cut.sources == tuple(str(i) for i in kept)


def greedy_continuation(model: Any, prompt: list[int], max_new: int) -> list[int]:
    with torch.inference_mode():
        hf: list[int] = model.generate(torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False,
                                       eos_token_id=EOS, pad_token_id=0)[0, len(prompt) :].tolist()
    return hf[: hf.index(EOS) + 1] if EOS in hf else hf


def copying_prompt(model: Any, seed: int) -> list[int]:
    """A prompt whose last three tokens and the target's first token after it occurred earlier in it: the first
    round retrieves what followed them. Found by trying every token w as the 4-gram's last (one batched forward) for
    one that the target then says first, on a few random fillers."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(10):
        a, b, c = (torch.randint(1, V - 2, (n,), generator=g).tolist() for n in (5, 3, 12))
        candidates = torch.tensor([[*a, *b, w, *c, *b] for w in range(1, V - 1)])  # [V - 2, 23]
        with torch.inference_mode():
            first = model(candidates).logits[:, -1].argmax(-1)  # [V - 2]
        fixed = (first == torch.arange(1, V - 1)).nonzero()
        if len(fixed):
            return candidates[int(fixed[0])].tolist()
    raise AssertionError("no prompt found for this model")


@pytest.mark.parametrize("seed", range(4))
def test_recycling_with_retrieved_copies_is_transformers_greedy_under_the_adaptive_policy(byte_bpe: Any,
                                                                                         seed: int) -> None:
    """Where the first round retrieves a copy longer than the tree budget, it is verified whole, and the text is
    still greedy's, adaptive or not."""
    model = tiny_model(["llama", "qwen2", "phi3", "gpt2"][seed], vocab_size=V, seed=seed)
    prompt = copying_prompt(model, seed)
    expected = greedy_continuation(model, prompt, 24)
    for adaptive in (False, True):
        events = run(model, byte_bpe, drafter(budget=4, depth=8), prompt, 24, k=8, adaptive=adaptive)
        result = events[-1]
        assert isinstance(result, Finished) and list(result.token_ids) == expected
        copies = [e for e in events if isinstance(e, DraftProposed) and e.match_start is not None]
        assert copies and all(e.parents is None for e in copies)
        assert len(copies[0].token_ids) > 4, "a copy longer than the tree budget is verified whole"
        verified = next(e for e in events if isinstance(e, DraftVerified))
        assert len(verified.verdicts) >= min(len(copies[0].token_ids), verified.accepted + 1)


@pytest.mark.parametrize("seed", range(8))
def test_greedy_recycling_is_transformers_greedy(byte_bpe: Any, seed: int) -> None:
    max_new = 24
    model, prompt, expected = transformers_greedy_case(seed, 100, max_new)
    d = drafter(budget=[1, 4, 8, 16][seed % 4])
    events = run(model, byte_bpe, d, prompt, max_new, k=5)
    result = events[-1]
    assert isinstance(result, Finished) and list(result.token_ids) == expected
    assert d.matrix.filled() >= len(set(prompt)), "the prefill filled every prompt token's row"
    again = run(model, byte_bpe, d, prompt, max_new, k=5)  # warm: every row of the first run's
    assert isinstance(again[-1], Finished) and list(again[-1].token_ids) == expected
    assert any(isinstance(e, DraftProposed) and e.drafter == "recycle" for e in again)


def test_a_warm_matrix_keeps_more_tokens_a_forward_than_a_cold_one(byte_bpe: Any) -> None:
    """The second run of a prompt drafts from the rows the first one wrote, the rejected branches' among them."""
    model = tiny_model("llama", vocab_size=V, seed=3)
    prompt = [5, 6, 7, 8]
    warm = drafter(budget=8)
    cold_run = run(model, byte_bpe, warm, prompt, 32, k=5)[-1]
    warm_run = run(model, byte_bpe, warm, prompt, 32, k=5)[-1]
    assert isinstance(cold_run, Finished) and isinstance(warm_run, Finished)
    assert warm_run.token_ids == cold_run.token_ids
    assert warm_run.target_forwards < cold_run.target_forwards


def test_rejected_branches_are_recycled(byte_bpe: Any) -> None:
    """Every node the target read writes its row, kept or not."""
    model = tiny_model("qwen2", vocab_size=V, seed=5)
    prompt = [9, 10, 11]
    d = drafter(budget=8)
    events = run(model, byte_bpe, d, prompt, 16, k=4)
    rejected = {v.token_id for e in events if isinstance(e, DraftVerified) for v in e.verdicts
                if v.verdict == "rejected"}
    assert rejected, "some node was rejected"
    assert all(d.matrix.row(t)[0] != EMPTY for t in rejected)


@pytest.mark.slow
def test_recycled_trees_keep_the_target_distribution_when_sampling(byte_bpe: Any) -> None:
    model = tiny_model("llama", vocab_size=V, seed=21, initializer_range=0.08)
    prompt = [7, 8, 9]
    counts: Counter[tuple[int, ...]] = Counter()
    d = drafter(k=3, budget=6, depth=2)  # one matrix for every run: warm, and changed by every draw's branches
    for seed in range(1000):
        result = run(model, byte_bpe, d, prompt, 3, params=SAMPLING, k=2, sample=True, seed=seed)[-1]
        assert isinstance(result, Finished)
        counts[tuple(result.token_ids)] += 1
    assert chi_square_p_value(counts, exact_distribution(model, prompt, SAMPLING, 3)) > 1e-3


def test_a_matrix_file_round_trips_and_a_bad_one_starts_cold(tmp_path: Path) -> None:
    from decode_tui.core.drafting.recycled_state import load, save

    path = tmp_path / "recycled" / "m.pt"
    said = load(path, V, 8, "tiny")
    assert said.rows is None and "no earlier run" in said.said
    rows = torch.full((V, 8), EMPTY, dtype=torch.int32)
    rows[5] = torch.arange(8, dtype=torch.int32)
    save(path, rows, "tiny")
    assert [p.name for p in path.parent.iterdir()] == ["m.pt"], "no temporary file is left beside it"
    back = load(path, V, 8, "tiny")
    assert back.rows is not None and torch.equal(back.rows, rows) and "1 rows from earlier runs" in back.said
    narrower = load(path, V, 3, "tiny")
    assert narrower.rows is not None and narrower.rows[5].tolist() == [0, 1, 2]
    wider = load(path, V, 10, "tiny")
    assert wider.rows is not None and wider.rows[5].tolist() == [*range(8), EMPTY, EMPTY]
    other = load(path, V + 1, 8, "other")
    assert other.rows is None and f"vocabulary of {V} tokens" in other.said
    whole = path.read_bytes()
    for name, content in (("empty", b""), ("truncated", whole[: len(whole) // 2]), ("random", bytes(range(256)))):
        bad = tmp_path / f"{name}.pt"
        bad.write_bytes(content)
        result = load(bad, V, 8, "tiny")
        assert result.rows is None and "could not be read" in result.said and "\n" not in result.said, name


def test_a_run_starts_from_the_last_runs_matrix_and_bench_repeats_start_cold(byte_bpe: Any, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The builder reads the model's file and the drafter writes it back on close; a benchmark's settings read
    nothing and write nothing."""
    from decode_tui.core.drafting.context import DraftingContext
    from decode_tui.core.drafting.recycling import build
    from decode_tui.core.drafting.suffix_drafting import SuffixHistory
    from decode_tui.core.params import DraftParams

    monkeypatch.setenv("DECODE_TUI_CACHE", str(tmp_path))
    model = tiny_model("llama", vocab_size=V, seed=3)

    class LM:
        name = "tiny"
        tokenizer = None  # no special tokens

    lm = LM()
    lm.model = model  # type: ignore[attr-defined]

    def built(params: DraftParams) -> tuple[RecyclingDrafter, list[str]]:
        said: list[str] = []
        ctx = DraftingContext(lm=lm, params=params, eos_token_ids=frozenset({EOS}), prompt_length=4,  # type: ignore[arg-type]
                              tree_budget=8, draft=None, history=SuffixHistory(), say=said.append)
        d = build(ctx)
        assert isinstance(d, RecyclingDrafter)
        return d, said

    first, said = built(DraftParams())
    assert "no earlier run" in said[0]
    run(model, byte_bpe, first, [5, 6, 7, 8], 16, k=5)
    filled = first.matrix.filled()
    first.close()
    second, said = built(DraftParams())
    assert second.matrix.filled() == filled and f"{filled:,} rows from earlier runs" in said[0]
    repeat, said = built(DraftParams().repeatable())
    assert repeat.matrix.filled() == 0 and "cold" in said[0]
    run(model, byte_bpe, repeat, [9, 10, 11], 16, k=5)
    repeat.close()
    assert built(DraftParams())[0].matrix.filled() == filled, "a benchmark's run wrote nothing back"


def test_a_draft_shows_the_rows_it_read_and_the_rows_written_since_the_last_round() -> None:
    d = drafter(k=2, budget=4, depth=3)
    d.matrix.rows[3] = torch.tensor([40, 41], dtype=torch.int32)
    logits = torch.zeros(1, V)
    logits[0, [42, 40]] = torch.tensor([2.0, 1.0])
    d.observed([3], logits)  # the target read token 3 again: its row becomes [42, 40]
    draft = d.propose([1, 2, 3], 3, [], True, None)
    assert draft.rows is not None
    labels = [label for label, _ in draft.rows]
    assert ("row", (3, 42, 40)) in draft.rows, "the row read, as it is now"
    assert ("written", (3, 42, 40)) in draft.rows and ("was", (3, 40, 41)) in draft.rows
    assert labels.index("was") == labels.index("written") + 1
    again = d.propose([1, 2, 3], 3, [], True, None)
    assert again.rows is not None and "written" in [label for label, _ in again.rows], "kept until the next write"


def test_each_draft_says_the_matrixs_fill_and_the_stats_bar_shows_the_latest(byte_bpe: Any) -> None:
    """Issue 74: the matrix's fill (rows filled of V) in the stats. Each recycled draft says the rows filled when it
    was drafted, which only grow over a run; the run view keeps the latest and the stats bar shows it."""
    from decode_tui.tui.run_view import RunView
    from decode_tui.tui.widgets.stats_bar import StatsBar

    model = tiny_model("llama", vocab_size=V, seed=3)
    d = drafter(budget=8)
    events = run(model, byte_bpe, d, [5, 6, 7, 8], 32, k=5)
    said = [e.state for e in events if isinstance(e, DraftProposed)]
    assert said and all(state is not None for state in said)
    filled = [int(str(state).split()[1].replace(",", "")) for state in said]
    assert filled == sorted(filled) and filled[0] >= 4, said  # the prompt's rows at least, from the prefill
    assert said[-1] == f"matrix {filled[-1]:,} of {V:,} rows" and filled[-1] <= d.matrix.filled()
    started = Started(mode="recycle", model="tiny", prompt_token_ids=(5, 6, 7, 8), prompt_text="x", params={})
    view = RunView(paused=False, now=0.0)
    view.apply([started, *(e for e in events if not isinstance(e, Finished))], 1.0, paused=False)
    assert view.counters.drafter_state == said[-1]
    bar = StatsBar()
    bar.show(view.counters)
    assert said[-1] in [full for full, _, _ in bar._parts]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 9), st.sampled_from([torch.float32, torch.bfloat16]), st.integers(0, 2**31))
def test_the_blocked_top_k_finds_what_topk_finds(rows: int, k: int, dtype: torch.dtype, seed: int) -> None:
    """recycling.top_ids's k ids hold the k largest logits of each row, largest first (ties in bfloat16 too), on a
    vocabulary of whole blocks and one with a remainder past them."""
    g = torch.Generator().manual_seed(seed)
    for vocab in (64 * BLOCK, 40 * BLOCK + 37, 3 * BLOCK):
        logits = torch.randn(rows, vocab, generator=g).to(dtype)
        ids = top_ids(logits, k)
        assert ids.shape == (rows, k)
        assert torch.equal(logits.gather(1, ids), logits.topk(k, dim=-1).values)
        assert all(len(set(row)) == k for row in ids.tolist())


def test_the_fill_is_counted_as_rows_are_written() -> None:
    matrix = RecycledMatrix(V, 3)
    assert matrix.filled() == 0
    matrix.observe([5, 6, 5], torch.randn(3, V))
    assert matrix.filled() == 2
    matrix.observe([6, 7], torch.randn(2, V))
    assert matrix.filled() == 3 == int((matrix.rows[:, 0] != EMPTY).sum())
    assert RecycledMatrix(V, 3, matrix.rows.clone()).filled() == 3, "a matrix loaded counts its rows"
