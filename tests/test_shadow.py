"""Shadow rounds (core/strategies/shadow.py): what a tree round would have kept, read from the tokens plain steps
emit, equals what verifying the same tree kept, round for round."""

from __future__ import annotations

from typing import Any

import pytest

from decode_tui.core.drafting.drafters import Draft
from decode_tui.core.record.events import DraftProposed, DraftVerified, Finished, TokenEmitted
from decode_tui.core.strategies.adaptive import AdaptiveDraftLength
from decode_tui.core.strategies.shadow import ShadowRounds

from .conftest import tiny_model
from .test_recycling import drafter, greedy_continuation
from .test_speculative import V, run


def walked(drafts: list[Draft], tokens: list[int]) -> list[int]:
    """The rounds' emitted counts a ShadowRounds reports, asked for ``drafts`` in turn, fed ``tokens``."""
    kept: list[int] = []
    left = iter(drafts)
    shadow = ShadowRounds(lambda: next(left, Draft([])), lambda path: kept.append(len(path) + 1))
    for token in tokens:
        shadow.seen(token)
    return kept


def test_a_round_walks_its_tree_to_a_mismatch_or_a_leaf_and_its_bonus() -> None:
    tree = Draft([10, 20, 11], parents=(-1, -1, 0))  # 10 -> 11, and 20: two branches at the root
    assert walked([tree], [10, 11]) == [3], "a leaf: its two nodes and the bonus after it"
    assert walked([tree, tree], [10, 11, 99, 20]) == [3, 2], "the bonus is the round's; the next round follows it"
    assert walked([tree, tree], [10, 12, 10]) == [2], "the target's own token ends a round; the next is open"
    assert walked([tree], [30]) == [1], "nothing kept: the target's token alone"
    chain = Draft([5, 6, 7])
    assert walked([chain, chain], [5, 6, 8, 5, 6, 7]) == [3, 4]
    assert walked([Draft([]), chain], [1, 5, 6, 7]) == [4], "nothing drafted at a step: no round stands in for it"
    commonest = Draft([5, 9], parents=(-1, -1), pinned=2)  # recycling's back-off: no ranked tree
    assert walked([commonest, chain], [5, 5, 6, 7]) == [4], "no ranked tree drafted: no round stands in for it"


def test_shadow_rounds_keep_what_the_verified_rounds_kept(byte_bpe: Any) -> None:
    """Recycling's rounds, verified (greedy, no adaptive policy), replayed as shadow rounds along the same output:
    each round's tree, asked for at the same point of the text, keeps the same tokens by the plain steps' tokens
    as by its verification."""
    model = tiny_model("llama", vocab_size=V, seed=3)
    prompt = [5, 6, 7, 8]
    d = drafter(budget=8)
    run(model, byte_bpe, d, prompt, 32, k=5)  # a warm matrix: rounds that keep several tokens
    events = run(model, byte_bpe, d, prompt, 48, k=5)
    emitted: list[int] = []
    drafts: dict[int, Draft] = {}  # tokens emitted before a round -> its tree
    verified: list[int] = []  # each round's emitted tokens
    for event in events:
        if isinstance(event, TokenEmitted):
            emitted.append(event.token_id)
        elif isinstance(event, DraftProposed):
            drafts[len(emitted)] = Draft(list(event.token_ids), parents=event.parents)
        elif isinstance(event, DraftVerified):
            verified.append(event.accepted + (event.extra_token_id is not None))
    assert max(verified) >= 3, "some round kept several tokens"
    kept: list[int] = []
    seen = emitted[:1]  # the first token comes from the prefill, before any round
    shadow = ShadowRounds(lambda: drafts.get(len(seen), Draft([])), lambda path: kept.append(len(path) + 1))
    for token in emitted[1:]:
        seen.append(token)
        shadow.seen(token)
    assert kept == verified[: len(kept)] and len(kept) >= len(verified) - 1, (kept, verified)


def test_a_copy_retrieved_instead_of_a_tree_is_no_round_and_is_handed_to_the_loop_once() -> None:
    copy = Draft([7, 8], match=(0, 4), copied=(4, 6), retrieved=True)
    kept: list[int] = []
    shadow = ShadowRounds(lambda: copy, lambda path: kept.append(len(path) + 1))
    assert shadow.retrieved() is copy and shadow.retrieved().token_ids == [], "handed once"
    drafts = iter([copy, Draft([]), copy])
    shadow = ShadowRounds(lambda: next(drafts), lambda path: kept.append(len(path) + 1))
    shadow.seen(7)
    assert shadow.retrieved().token_ids == [], "a copy drafted before the last token is stale"
    shadow.seen(9)
    assert shadow.retrieved() is copy and kept == [], "a copy after it is handed over, and no round stood in"


def test_copies_found_during_plain_steps_are_verified_whatever_the_policy_chose(
        byte_bpe: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the policy taking plain steps throughout, a recycling drafter's copies (here: of the target's own greedy
    text, at two points) end the stretch, are verified whole and kept; the text is greedy's."""
    model = tiny_model("qwen2", vocab_size=V, seed=4)
    prompt = [5, 6, 7, 8, 9]
    expected = greedy_continuation(model, prompt, 24)
    assert len(expected) == 24
    d = drafter(budget=4, depth=8)

    def propose(context: list[int], k: int, *_: Any) -> Draft:
        at = len(context) - len(prompt)
        if at in (5, 14):  # a copy of what greedy will say next, as a retrieval round drafts one
            return Draft(expected[at : at + 6], match=(0, 4), copied=(0, 6), retrieved=True)
        return Draft([])

    monkeypatch.setattr(d, "propose", propose)
    monkeypatch.setattr(AdaptiveDraftLength, "choose", lambda self: self._decide("plain", 0, "plain, for the test"))
    events = run(model, byte_bpe, d, prompt, 24, k=8, adaptive=True)
    result = events[-1]
    assert isinstance(result, Finished) and list(result.token_ids) == expected
    rounds = [e for e in events if isinstance(e, DraftVerified)]
    assert [e.accepted for e in rounds] == [6, 6]
    assert result.target_forwards == 24 - 2 * 6
