"""A ranked tree (token recycling's, grown best first) is verified only as far as pays on the device: the adaptive
policy measures each node's chance of being kept and verifies the first n nodes with the most tokens a second
(core/strategies/adaptive.py, ``_best_nodes``; Sequoia's hardware-aware tree size)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from typing import Any

import pytest
import torch

from decode_tui.core.drafting.drafters import Draft
from decode_tui.core.drafting.recycling import template
from decode_tui.core.execution.target import Target
from decode_tui.core.execution.widths import width_costs
from decode_tui.core.params import SamplingParams
from decode_tui.core.record.events import DraftLengthDecided, DraftProposed, Finished
from decode_tui.core.strategies.adaptive import AdaptiveDraftLength
from decode_tui.core.strategies.rounds import judge_unverified, kept_of_whole, policy_cut, verified_part
from decode_tui.core.strategies.tree_sizes import (
    NODE_DECAY,
    PRIOR_COMMONEST,
    PRIOR_GRAFT,
    DecayedTokens,
    RankedSizes,
    Size,
    graft_pays,
)
from decode_tui.core.strategies.verify import Verified
from decode_tui.core.token_tree import ROOT, TokenTree

from .conftest import tiny_model
from .test_recycling import drafter
from .test_speculative import V, greedy, run, simulated_costs, transcript

BUDGET = 8
SHAPE = template(BUDGET, 5, 8)  # recycling's tree: (parent, rank) a node, best first
TREE = TokenTree(tuple(rank for _, rank in SHAPE), tuple(parent for parent, _ in SHAPE))  # a node's token: its rank
# A verification of n nodes, in plain steps, on three devices:
# - this session's CPU (Intel Xeon, 2 cores, SmolLM2 in float32; BENCHMARKS.md "Token recycling's tree sized by its
#   nodes"): 2 positions cost little more than 1;
# - the AMD CPU of earlier sessions (tests/test_speculative.py's CPU_WIDTHS): 2 positions cost 1.6 steps;
# - a GPU: any width up to a few dozen about a step.
INTEL = {0: 1.0, 1: 1.09, 2: 1.18, 3: 1.47, 4: 1.50, 5: 1.58, 6: 1.74, 7: 1.76, 8: 1.80}
AMD = {0: 1.0, 1: 1.61, 2: 2.14, 3: 1.67, 4: 1.77}
DEVICES: dict[str, Callable[[int], float]] = {"intel": lambda n: INTEL[n], "amd": lambda n: AMD.get(n, 2.0),
                                              "gpu": lambda n: 1.0 + 0.005 * n}


def ranked_policy(device: str) -> AdaptiveDraftLength:
    """The policy for recycling's tree on ``device``: on a CPU told what the warm-up timed (forwards of 2 .. 8
    positions, 1 .. 7 nodes), as the loop tells it; on a GPU nothing is timed."""
    forwards = {n: DEVICES[device](n) for n in range(1, 8)} if device != "gpu" else None
    return AdaptiveDraftLength(10, tree_budget=BUDGET, ranked=True, forwards=forwards, shadows=True)


def speed(policy: AdaptiveDraftLength, tokens: int, chances: tuple[float, ...], widths: Callable[[int], float],
          seed: int = 0) -> float:
    """Tokens a second against plain decoding's, with the target's next token its r-th recycled guess with
    probability ``chances[r]`` (else none of them) at every level of the tree; plain steps stand in for tree rounds
    (shadow rounds), as the loop runs them for a drafter free to ask. A round keeps the path the target's choices
    walk, as far as the nodes verified reach."""
    g = torch.Generator().manual_seed(seed)

    def path() -> list[int]:
        walked: list[int] = []
        while True:
            draw, rank, total = float(torch.rand(1, generator=g)), None, 0.0
            for r, chance in enumerate(chances):
                total += chance
                if draw < total:
                    rank = r
                    break
            node = walked[-1] if walked else ROOT
            child = TREE.child(node, rank) if rank is not None else None
            if child is None:
                return walked
            walked.append(child)

    spent = done = 0.0
    while done < tokens:
        if policy.choose() == 0:
            steps = min(policy.plain_stretch(), int(tokens - done))
            left = steps
            while left > 0 and len(shadow := path()) + 1 <= left:  # a round still open at the stretch's end: dropped
                policy.observe_shadow(shadow)
                left -= len(shadow) + 1
            policy.observe_plain(steps, float(steps))
            spent, done = spent + steps, done + steps
            continue
        nodes = policy.nodes or BUDGET
        whole = path()
        kept = next((i for i, node in enumerate(whole) if node >= nodes), len(whole))  # parents come first
        policy.observe(TREE.depth, kept, widths(nodes), 0.0, None, nodes)
        # The loop's walk: the kept nodes and the target's token after them, which may follow a node past the cut
        # (the nodes under it unknown).
        walked = whole[: kept + 1]
        policy.observe_path(walked, TREE.below(walked[-1]) if walked and walked[-1] >= nodes else ())
        spent, done = spent + widths(nodes), done + kept + 1
    return done / spent


# A cold matrix on open-ended text: the target's next token is the first guess a third of the time.
OPEN = (0.35, 0.1, 0.05)


def test_on_a_cpu_where_two_positions_cost_little_more_than_one_the_first_nodes_pay() -> None:
    """On this Intel CPU's prices the policy drafts the first few nodes of the tree (1 or 2: 1.09 and 1.18 steps): over
    eight draws of the target's choices, a median of 1.15x plain decoding or more and never under it. The control,
    the same drafter's whole tree priced as one (the policy before this change), mostly keeps to plain steps (its 8
    nodes cost 1.8 steps and keep about 1.7 tokens) and goes slower in every draw than the ranked policy."""
    ranked, whole = [], []
    for seed in range(8):
        policy = ranked_policy("intel")
        ranked.append(speed(policy, 128, OPEN, DEVICES["intel"], seed))
        assert policy.nodes < BUDGET, (seed, policy.nodes, policy.reason)  # a part of the tree, never all of it
        whole.append(speed(AdaptiveDraftLength(10, tree_budget=BUDGET), 128, OPEN, DEVICES["intel"], seed))
    assert statistics.median(ranked) >= 1.15 and min(ranked) >= 1.0, ranked
    assert all(r > w for r, w in zip(ranked, whole, strict=True)), (ranked, whole)
    policy = ranked_policy("intel")
    speed(policy, 128, OPEN, DEVICES["intel"], 0)
    assert re.fullmatch(r"drafting the first [12] nodes? of a tree 10 deep: its first [12] nodes? keep an estimated "
                        r"1\.\d\d tokens a round and cost 1\.[01]\d plain steps: drafting goes 1\.\d\dx",
                        policy.reason), policy.reason


@pytest.mark.parametrize("tokens", [48, 96])
@pytest.mark.parametrize("chances", [(0.0,), OPEN])
def test_where_no_size_pays_the_floor_holds(tokens: int, chances: tuple[float, ...]) -> None:
    """Issue 73's floor on the AMD CPU's prices (any verification 1.6 plain steps or more), where the target keeps
    too little of a cold tree for any size to pay: the ranked policy keeps 0.95 of plain decoding's speed or more,
    and ends on plain steps."""
    policy = ranked_policy("amd")
    assert speed(policy, tokens, chances, DEVICES["amd"]) >= 0.95
    assert policy.decision == ("plain", 0) and policy.nodes == 0


def test_where_a_few_nodes_pay_on_dear_widths_the_median_holds() -> None:
    """On the AMD CPU's prices with the first node kept half the time, three or four nodes pay about 1.1x: over
    eight draws of 96 tokens the ranked policy's median keeps plain decoding's speed (each draw's first rounds
    measure the chances, and a short answer's draws spread either way)."""
    draws = [speed(ranked_policy("amd"), 96, (0.5, 0.1), DEVICES["amd"], seed) for seed in range(8)]
    assert statistics.median(draws) >= 0.97, draws


def test_where_width_is_nearly_free_the_whole_tree_is_drafted() -> None:
    """On a GPU's prices every node that is ever kept pays its column: the whole tree, and well over plain speed."""
    policy = ranked_policy("gpu")
    assert speed(policy, 128, (0.5, 0.2, 0.1), DEVICES["gpu"]) >= 1.4
    assert policy.decision[0] == "draft" and policy.nodes == BUDGET


def test_each_node_is_measured_over_the_rounds_that_showed_it() -> None:
    """A node's chance is its decayed share of the rounds that showed whether it was kept: every node of a round
    but those under a node past the cut that the target's own token matched (never read), which keep their count;
    a node no round kept counts 0; a policy for an unranked drafter keeps no such counts."""
    policy = AdaptiveDraftLength(10, tree_budget=4, ranked=True)
    for _ in range(60):
        policy.observe_path([0, 1])
        policy.observe_path([])
        policy.observe_path([0], unknown=[1, 2])  # node 0 kept past the cut: what came of 1 and 2 was not seen
    chances = [policy.sizes.chances.chance(node) for node in range(4)]
    assert chances == pytest.approx([2 / 3, 0.5, 0.0, 0.0], abs=0.03)
    unranked = AdaptiveDraftLength(10, tree_budget=4)
    before = (list(unranked.sizes.chances.kept), list(unranked.sizes.chances.seen))
    unranked.observe_path([0, 1, 2])
    assert (unranked.sizes.chances.kept, unranked.sizes.chances.seen) == before


def test_the_nodes_under_a_node_are_its_subtree() -> None:
    tree = TokenTree((10, 20, 11, 12, 21), (-1, -1, 0, 2, 1))
    assert tree.below(0) == [2, 3] and tree.below(1) == [4] and tree.below(3) == []


def test_a_draft_cut_to_its_first_nodes_is_the_tree_they_make() -> None:
    tree = Draft([10, 20, 11, 12], parents=(-1, -1, 0, 2), sources=("a", "b", "c", "d"))
    assert tree.cut(3) == Draft([10, 20, 11], parents=(-1, -1, 0), sources=("a", "b", "c"))
    assert tree.cut(1) == Draft([10], sources=("a",)), "one node: a chain, verified the chain's way"
    chain_like = Draft([10, 11, 20], parents=(-1, 0, -1))
    assert chain_like.cut(2) == Draft([10, 11]), "its first two nodes are a chain"
    assert tree.cut(4) is tree and tree.cut(9) is tree
    assert Draft([1, 2, 3]).cut(2) == Draft([1, 2])
    q = torch.rand(3, 5)
    cut = Draft([1, 2, 3], q=q, q_probs=(0.1, 0.2, 0.3)).cut(1)
    assert cut.q is not None and torch.equal(cut.q, q[:1]) and cut.q_probs == (0.1,)


def test_a_walk_follows_tokens_down_the_tree_until_one_is_no_child() -> None:
    tree = TokenTree((10, 20, 11, 12), (-1, -1, 0, 2))
    assert tree.walk([10, 11, 12, 99]) == [0, 2, 3]
    assert tree.walk([20, 11]) == [1]
    assert tree.walk([30]) == [] and tree.walk([]) == []
    assert Draft([5, 6]).token_tree().walk([5, 6, 7]) == [0, 1]


@pytest.mark.parametrize("seed", range(4))
def test_cut_trees_give_plain_greedys_tokens(byte_bpe: Any, monkeypatch: Any, seed: int) -> None:
    """Recycling in the real loop, adaptive, on a device where each position of a forward costs nearly what a step
    does (so the policy cuts its trees): token for token plain greedy, with rounds that verified only the first
    nodes of their tree, saying so."""
    model = tiny_model(("llama", "qwen2", "gpt2", "phi3")[seed], vocab_size=V, seed=seed)
    prompt = [5, 6, 7, 8, 5, 6, 7]
    d = drafter(budget=BUDGET)
    run(model, byte_bpe, d, prompt, 32, k=5)  # a warm matrix: its first guesses are kept
    simulated_costs(monkeypatch, {model: (0.006, 0.002)})  # 2 positions 1.25 steps, 9 positions 3.0
    events = run(model, byte_bpe, d, prompt, 48, k=5, adaptive=True)
    result = events[-1]
    assert isinstance(result, Finished)
    assert result.token_ids == greedy(model, byte_bpe, prompt, 48, params=SamplingParams()).token_ids
    reasons = [e.reason for e in events if isinstance(e, DraftLengthDecided)]
    assert any(r.startswith("drafting the first ") for r in reasons), reasons
    nodes = [len(e.token_ids) for e in events if isinstance(e, DraftProposed)]
    assert nodes and min(nodes) < BUDGET, nodes


def test_the_loop_prices_a_ranked_trees_sizes_from_the_warm_ups_widths(byte_bpe: Any) -> None:
    """On a CPU the policy is told what the warm-up timed: n nodes at the price of the forward of n + 1 positions
    padded as the verifier would pad it (here 2 .. 5 positions to 5, the cheapest); nothing past MAX_WIDTH."""
    model = tiny_model("llama", vocab_size=V, seed=0)
    width_costs(model).fill(lambda w: {2: 1.0, 3: 1.2, 5: 0.5}.get(w, 2.0))
    prompt = [5, 6, 7]
    target = Target(model, transcript(byte_bpe, prompt, 8, V - 1), prompt, fast=False, graphs=False, max_len=32,
                    reuse=False, tree_width=BUDGET + 1)
    assert target.forward_prices(BUDGET) == {1: 0.5, 2: 0.5, 3: 0.5, 4: 0.5, 5: 2.0, 6: 2.0, 7: 2.0}


def test_a_graft_rides_past_a_cut_only_where_its_tokens_pay_for_its_width() -> None:
    """A copy grafted onto a ranked tree (recycling's, after a short match) is kept past the policy's cut where the
    tokens it kept lately, added to the first n nodes', give as many tokens a second with its width as without."""
    size = Size(gain=1.5, nodes=4, tokens=2.0, steps=1.3)
    cheap = [1.0, 1.1, 1.15, 1.2, 1.25, 1.3, 1.32, 1.34, 1.36, 1.4]  # [plain steps] to verify 0 .. 9 nodes
    dear = [1.0 + 0.5 * n for n in range(10)]
    assert graft_pays(size, cheap, 0.0, 3, 0.5), "(2.0 + 0.5) / 1.34 beats 2.0 / 1.25"
    assert not graft_pays(size, dear, 0.0, 3, 0.5), "(2.0 + 0.5) / 4.5 loses to 2.0 / 3.0"
    assert graft_pays(size, dear, 0.0, 3, 1.5), "a graft that keeps enough pays even so"
    assert not graft_pays(size, cheap, 0.0, 6, 9.0), "a width past the prices is not priced"
    kept = DecayedTokens(PRIOR_GRAFT, NODE_DECAY)
    assert kept.mean() == PRIOR_GRAFT
    for _ in range(30):
        kept.observe(0)
    assert kept.mean() < 0.1

    tree = Draft([40, 50, 41, 77, 3], parents=(-1, 0, -1, 0, 3), sources=tuple("abcde"), pinned=2)
    assert tree.cut(2) == Draft([40, 50], sources=("a", "b")), "a cut without the graft"
    assert tree.cut(3) == Draft([40, 50, 41], parents=(-1, 0, -1), sources=("a", "b", "c")), \
        "every ranked node kept, the graft still dropped where it does not pay"
    assert tree.cut(3, pinned=True) is tree and tree.cut(9, pinned=True) is tree
    kept_too = tree.cut(1, pinned=True)
    assert kept_too.token_ids == [40, 77, 3] and kept_too.tree is None and kept_too.pinned == 2
    kept_too = tree.cut(2, pinned=True)
    assert kept_too.token_ids == [40, 50, 77, 3] and kept_too.parents == (-1, 0, 0, 2) and kept_too.pinned == 2
    assert Draft([40, 50, 41, 77, 3], parents=(-1, 0, -1, 0, 3), pinned=2, graft_match=3).cut(2).graft_match == 0, \
        "a cut without the graft has no graft's match"
    policy = ranked_policy("intel")
    assert policy.nodes == 0 and policy.keeps_graft(5, 1), "no cut chosen: the whole draft is verified"


def test_pinned_nodes_with_no_ranked_tree_are_verified_where_they_beat_a_plain_step() -> None:
    """Recycling's commonest tokens, where the pending token's row is empty, are a tree of no rank (every node
    pinned, a match of none): they are priced against a plain step, by what such rounds kept lately, and a round of
    them tells the policy nothing of the ranked tree's nodes."""
    cheap, dear = [1.0, 1.0, 1.01, 1.02, 1.03, 1.04], [1.0, 1.3, 1.5, 1.6, 1.7, 1.8]
    assert graft_pays(None, cheap, 0.0, 5, 0.1) and not graft_pays(None, dear, 0.0, 5, 0.1)
    assert graft_pays(None, dear, 0.0, 5, 0.9) and not graft_pays(None, cheap, 0.0, 6, 5.0), "unpriced: no"
    assert not graft_pays(None, [1.0, 1.0, 1.0], 0.2, 2, 0.1), "a round's drafting time counts against it"
    sizes = RankedSizes()
    sizes.size(dear, 2)
    assert sizes.graft(0).mean() == PRIOR_COMMONEST < PRIOR_GRAFT
    assert not sizes.keeps_graft(5, 0, alone=True), "untried, at the prior (prose's few tokens): not at 1.8 steps"
    sizes.size([1.0, 1.02, 1.04, 1.06, 1.08, 1.1], 2)
    assert sizes.keeps_graft(5, 0, alone=True), "and tried where its width costs less than that"
    sizes.graft(0).observe(0)
    assert not sizes.keeps_graft(5, 0, alone=True), "dropped after a round that kept nothing, at 1.1 steps"
    sizes.size(cheap, 2)
    assert sizes.keeps_graft(5, 0, alone=True), "not at 1.04"
    sizes.graft(0).observe(1)
    assert sizes.keeps_graft(5, 0, alone=True) and sizes.graft(1).mean() == PRIOR_GRAFT

    policy = ranked_policy("intel")
    policy.nodes = 3
    commonest = Draft([5, 9, 7], parents=(-1, -1, -1), pinned=3)
    for _ in range(40):
        policy.observe_graft(0, 0)
    assert policy_cut(policy, commonest).token_ids == [] and verified_part(policy, lambda: commonest).token_ids == []
    assert policy_cut(None, commonest) is commonest, "no policy: drafted whole"
    policy.sizes.grafts.clear()  # back at the prior, on the device's cheap widths
    policy.sizes.size([1.0, 1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07, 1.08, 1.09], BUDGET)
    assert verified_part(policy, lambda: commonest) is commonest
    seen = list(policy.sizes.chances.seen)
    v = Verified(kept=[9], n=1, extra=4, kind="target", verdicts=(), figures=None, nodes=[1], depth=1, fed=[5, 9, 7],
                 raw=torch.zeros(4, V))
    kept_of_whole(policy, commonest, v, 3)
    assert policy.sizes.chances.seen == seen, "no ranked node was drafted: none was seen"
    assert policy.sizes.graft(0).mean() > 0.5, "what the back-off kept: one token past no ranked node"

    policy.sizes.grafts.clear()
    judge_unverified(policy, commonest, [6, 5])
    assert policy.sizes.graft(0).mean() < PRIOR_COMMONEST, "cut, then the plain step's token was none of them"
    judge_unverified(policy, commonest, [9])
    judge_unverified(policy, commonest, [])  # no step ran: nothing to judge by
    judged = policy.sizes.graft(0).mean()
    assert judged > PRIOR_COMMONEST, "it was one of them: they would have kept it"
    judge_unverified(policy, Draft([5, 9], parents=(-1, 0), pinned=2, graft_match=1), [5, 9])
    judge_unverified(policy, Draft([5, 9], parents=(-1, -1), pinned=1), [5])
    judge_unverified(None, commonest, [5])
    assert policy.sizes.graft(0).mean() == judged and policy.sizes.graft(1).mean() == PRIOR_GRAFT, \
        "a copy's graft, a ranked tree, no policy: not judged so"


def test_grafts_after_short_matches_do_not_talk_a_long_matchs_graft_out_of_paying() -> None:
    """What grafted copies kept is kept by the length of the match they were copied after: prose's one-token matches
    that keep nothing leave a three-token match's copy (a code edit's unchanged line) at its prior."""
    sizes = RankedSizes()
    sizes.size([1.0, 1.1, 1.15, 1.2, 1.25, 1.3, 1.32, 1.34, 1.36, 1.4, 1.45, 1.5], 2)
    for _ in range(30):
        sizes.graft(1).observe(0)
    assert sizes.graft(1).mean() < 0.1 and sizes.graft(3).mean() == PRIOR_GRAFT
    assert not sizes.keeps_graft(8, 1), "after one-token matches that kept nothing, a graft does not pay its width"
    assert sizes.keeps_graft(8, 3), "a longer match's copy is judged by its own kind"
    policy = AdaptiveDraftLength(10, tree_budget=BUDGET, ranked=True)
    policy.observe_graft(0, 1)
    assert policy.sizes.graft(1).mean() < PRIOR_GRAFT and policy.sizes.graft(2).mean() == PRIOR_GRAFT
