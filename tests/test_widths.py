"""Verification widths: which width a forward runs at, and that padding one changes no output."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decode_tui.core.drafting.model_drafter import ModelDrafter
from decode_tui.core.drafting.prompt_lookup import PromptLookup
from decode_tui.core.execution.widths import GAIN, MAX_WIDTH, TRIES, WidthCosts, width_costs
from decode_tui.core.record.events import Finished

from .conftest import tiny_model
from .test_speculative import ARCHS, V, greedy, repetitive_prompt, run


def timed(costs: dict[int, float]) -> WidthCosts:
    widths = WidthCosts()
    for w, seconds in costs.items():
        widths.seconds[w].extend([seconds] * TRIES)
    return widths


def test_each_candidate_is_timed_before_any_is_chosen() -> None:
    widths = WidthCosts()
    asked = []
    for _ in range(TRIES * (MAX_WIDTH - 2)):
        w = widths.width_for(3, room=100)
        asked.append(w)
        widths.observe(w, {3: 1.0, 5: 0.5}.get(w, 2.0))
    assert sorted(set(asked)) == list(range(3, MAX_WIDTH + 1))
    assert all(asked.count(w) == TRIES for w in range(3, MAX_WIDTH + 1))
    assert widths.width_for(3, room=100) == 5  # the cheapest at or above 3
    assert widths.width_for(6, room=100) == 6  # nothing wider is cheaper than 6's own 2.0 ... all cost 2.0
    assert widths.width_for(5, room=4) == 5, "never narrower than the width asked for"


def test_a_width_timed_on_a_busy_machine_is_timed_again_later() -> None:
    """A width timed while the machine was busy priced it out for the rest of the process (issue 65: pld at 0.76x
    greedy with 6 tokens a forward under load). Its times are taken again after STALE forwards."""
    from decode_tui.core.execution.widths import STALE

    widths = WidthCosts()
    for _ in range(TRIES * (MAX_WIDTH - 2)):  # every candidate timed once, 5 while something else ran
        w = widths.width_for(3, room=100)
        widths.observe(w, {3: 1.0, 5: 3.0}.get(w, 2.0))
    assert widths.width_for(3, room=100) == 3, "5 looked dear"
    steps = 0
    while (w := widths.width_for(3, room=100)) == 3:
        widths.observe(3, 1.0)
        steps += 1
        assert steps <= STALE, "timed again within STALE forwards"
    assert w == 4 and steps >= STALE - TRIES * (MAX_WIDTH - 2), "stale: timed again, narrowest first"
    for _ in range(TRIES * (MAX_WIDTH - 2)):  # now quiet: 5 is what it is, half of 3
        w = widths.width_for(3, room=100)
        widths.observe(w, {3: 1.0, 5: 0.5}.get(w, 2.0))
    assert widths.width_for(3, room=100) == 5


def test_a_width_is_padded_only_where_it_saves_enough() -> None:
    # Measured on 2 cores (ms): the forward over 1 .. 8 positions after 60 tokens.
    cpu = timed({2: 99, 3: 123, 4: 90, 5: 87, 6: 90, 7: 109, 8: 84})
    assert [cpu.width_for(w, room=100) for w in range(1, MAX_WIDTH + 1)] == [1, 8, 8, 4, 5, 6, 8, 8]
    assert cpu.width_for(3, room=6) == 5, "the room left caps the pad"
    assert cpu.width_for(3, room=2) == 3, "a width that barely fits runs as it is"
    assert cpu.width_for(12, room=100) == 12, "wider than MAX_WIDTH runs as it is"
    flat = timed({w: 10.0 for w in range(2, MAX_WIDTH + 1)})
    assert [flat.width_for(w, room=100) for w in range(2, MAX_WIDTH + 1)] == list(range(2, MAX_WIDTH + 1))


def test_a_width_is_priced_as_it_would_run_padded() -> None:
    """What a ranked tree's sizes cost before the run times them (the adaptive policy's guess): each width at the
    median of the width it would run at; nothing where a width it may pad to is untimed, or past MAX_WIDTH."""
    cpu = timed({2: 99, 3: 123, 4: 90, 5: 87, 6: 90, 7: 109, 8: 84})
    assert [cpu.price(w) for w in range(2, MAX_WIDTH + 1)] == [84, 84, 90, 87, 90, 84, 84]
    assert cpu.price(1) is None and cpu.price(MAX_WIDTH + 1) is None
    partly = timed({2: 99, 3: 123})
    assert partly.price(2) is None, "4 .. 8 untimed: where it would run is not known"


def test_a_width_past_the_padded_ones_is_priced_as_the_tree_budgets_forwards_grow() -> None:
    """Past MAX_WIDTH a width is MAX_WIDTH's price grown as the forwards the tree budget timed grow from MAX_WIDTH
    to it, on the line between the two timed around it: no step where the padded widths end."""
    cpu = timed({w: 84.0 for w in range(2, MAX_WIDTH + 1)})
    cpu.time_wide({1: 10.0, 5: 11.0, 9: 12.0, 17: 14.0, 33: 20.0})  # in one-position forwards: 1, 1.1, 1.2, 1.4, 2
    at_8 = 1.0 + 0.1 + 0.1 * 3 / 4  # between 5 and 9
    assert cpu.price(9) == pytest.approx(84 * 1.2 / at_8)
    assert cpu.price(13) == pytest.approx(84 * 1.3 / at_8), "halfway between 9 and 17"
    assert cpu.price(33) == pytest.approx(84 * 2.0 / at_8)
    assert cpu.price(34) is None, "past the widest timed"
    prices = [cpu.price(w) or 0.0 for w in range(MAX_WIDTH, 34)]
    assert prices == sorted(prices) and all(prices), "priced up to the widest timed, never cheaper as it widens"
    noisy = timed({w: 84.0 for w in range(2, MAX_WIDTH + 1)})
    noisy.time_wide({1: 10.0, 5: 13.0, 9: 12.0})
    assert noisy.price(9) == 84.0, "a wider forward is never priced under a narrower one"


@given(st.lists(st.floats(0.01, 1.0), min_size=MAX_WIDTH - 1, max_size=MAX_WIDTH - 1),
       st.integers(1, MAX_WIDTH + 2), st.integers(0, 2 * MAX_WIDTH))
def test_the_width_chosen_fits_and_never_costs_more(seconds: list[float], width: int, room_past: int) -> None:
    widths = timed(dict(zip(range(2, MAX_WIDTH + 1), seconds, strict=True)))
    room = width + room_past
    chosen = widths.width_for(width, room)
    assert width <= chosen <= max(width, room)
    if 2 <= width <= MAX_WIDTH and chosen != width:
        assert seconds[chosen - 2] <= GAIN * seconds[width - 2]


def cheapest_at(model: Any, cheapest: int) -> list[int]:
    """``model``'s widths timed as if ``cheapest`` cost nothing and every other width a second; the widths its
    verifications then run at, as they run."""
    widths = width_costs(model)
    for w in widths.seconds:
        widths.seconds[w].extend([1.0 if w != cheapest else 1e-9] * TRIES)
    ran: list[int] = []
    observe = widths.observe

    def recorded(width: int, seconds: float) -> None:
        ran.append(width)
        observe(width, seconds)

    widths.observe = recorded  # type: ignore[method-assign]
    return ran


@pytest.mark.parametrize("cheapest", [4, MAX_WIDTH])
@pytest.mark.parametrize("arch", ARCHS)
def test_padded_verifications_give_plain_greedy_tokens(byte_bpe: Any, arch: str, cheapest: int) -> None:
    """Every verification padded to ``cheapest`` positions (where it fits: the prompt and answer fill the model's
    context to the last position, past which a pad would read a position gpt2 has no embedding for)."""
    prompt = repetitive_prompt(3, 9)
    max_new = 23
    model = tiny_model(arch, vocab_size=V, seed=7, max_positions=len(prompt) + max_new)
    ran = cheapest_at(model, cheapest)
    expected = greedy(model, byte_bpe, prompt, max_new).token_ids
    for drafter in (PromptLookup(3, 4, frozenset({V - 1})), ModelDrafter(model, V, confidence_threshold=0.0)):
        ran.clear()
        result = run(model, byte_bpe, drafter, prompt, max_new, k=2)[-1]
        assert isinstance(result, Finished)
        assert result.token_ids == expected
        assert all(w <= cheapest for w in ran), ran
    # The model drafting for itself drafts every round: padded but where the run neared the model's last position.
    assert ran.count(cheapest) >= 5, ran


@pytest.mark.parametrize("cheapest", [5, MAX_WIDTH])
@pytest.mark.parametrize("arch", ARCHS)
def test_padded_tree_verifications_give_plain_greedy_tokens(byte_bpe: Any, arch: str, cheapest: int) -> None:
    """A tree's verification is padded as a chain's is (a suffix tree of 2 nodes ran at 3 positions, which cost a
    2-core CPU what 5 do and more): rows of padding see the cache and themselves, and nothing reads them, so a
    recycled tree of any size gives plain greedy's tokens, and every tree that fits runs at ``cheapest``."""
    from decode_tui.core.drafting.recycling import RecycledMatrix, RecyclingDrafter

    prompt = repetitive_prompt(5, 9)
    max_new = 23
    model = tiny_model(arch, vocab_size=V, seed=9, max_positions=len(prompt) + max_new + MAX_WIDTH)
    ran = cheapest_at(model, cheapest)
    expected = greedy(model, byte_bpe, prompt, max_new).token_ids
    drafter = RecyclingDrafter(RecycledMatrix(V, 4), 3, cheapest - 1, frozenset({V - 1}))
    for _ in range(2):  # cold, then warm: trees of every size up to the budget
        result = run(model, byte_bpe, drafter, prompt, max_new, k=3)[-1]
        assert isinstance(result, Finished) and result.token_ids == expected
    assert ran and all(w == cheapest for w in ran), ran
