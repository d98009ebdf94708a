"""The paint pacer: paints spaced so the UI thread's CPU share stays within its budget, between two rates."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decode_tui.tui.pacing import PaintPacer


class FakeCpu:
    """A thread CPU clock the test advances by hand."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def run_paints(pacer: PaintPacer, cpu: FakeCpu, cost_per_s: float, per_paint: float, paints: int) -> list[float]:
    """Paint whenever the pacer says so; each paint costs ``per_paint`` CPU seconds, and the UI burns
    ``cost_per_s`` of CPU per wall second in between (drain ticks). Returns the wall times of the paints."""
    now, at = 0.0, list[float]()
    tick = 1 / 30
    while len(at) < paints:
        if pacer.due(now):
            pacer.painted(now)
            at.append(now)
            cpu.t += per_paint
        now += tick
        cpu.t += cost_per_s * tick
    return at


def test_cheap_paints_go_at_the_top_rate() -> None:
    cpu = FakeCpu()
    pacer = PaintPacer(max_hz=8, min_hz=2, budget=0.02, cpu_clock=cpu)
    at = run_paints(pacer, cpu, cost_per_s=0.001, per_paint=0.0005, paints=40)
    gaps = [b - a for a, b in itertools.pairwise(at[20:])]
    # 4 ms per paint would be 0.5 % of a core at 8 Hz: no reason to slow down (the 30 Hz ticks round 1/8 s up).
    assert all(gap <= 1 / 8 + 1 / 30 + 1e-9 for gap in gaps)
    assert pacer.hz == pytest.approx(8)


def test_costly_paints_are_spaced_to_keep_the_cpu_share_at_the_budget() -> None:
    cpu = FakeCpu()
    pacer = PaintPacer(max_hz=8, min_hz=1, budget=0.02, cpu_clock=cpu)
    run_paints(pacer, cpu, cost_per_s=0.0, per_paint=0.010, paints=60)
    # 10 ms a paint at 2 % of a core: one paint every 0.5 s.
    assert pacer.interval == pytest.approx(0.5, rel=0.1)
    start_cpu = cpu.t
    at = run_paints(pacer, cpu, cost_per_s=0.0, per_paint=0.010, paints=30)
    share = (cpu.t - start_cpu) / (at[-1] - at[0] + pacer.interval)
    assert share == pytest.approx(0.02, rel=0.15)


def test_paints_never_slow_below_the_bottom_rate() -> None:
    cpu = FakeCpu()
    pacer = PaintPacer(max_hz=8, min_hz=2, budget=0.02, cpu_clock=cpu)
    run_paints(pacer, cpu, cost_per_s=0.05, per_paint=0.050, paints=40)  # hopeless: ticks alone exceed it
    assert pacer.hz == pytest.approx(2, rel=0.01)


def test_one_slow_paint_does_not_stall_the_next_second() -> None:
    cpu = FakeCpu()
    pacer = PaintPacer(max_hz=8, min_hz=1, budget=0.02, cpu_clock=cpu)
    run_paints(pacer, cpu, cost_per_s=0.0, per_paint=0.001, paints=20)
    pacer.painted(100.0)
    cpu.t += 0.5  # a garbage collection during one paint
    pacer.painted(100.125)
    assert pacer.interval < 0.5  # smoothed: not the full second that one paint alone would ask for


def test_the_first_paint_is_due_at_once() -> None:
    pacer = PaintPacer(cpu_clock=FakeCpu())
    assert pacer.due(0.0)
    pacer.painted(0.0)
    assert not pacer.due(0.01)
    assert pacer.due(1 / 8)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"min_hz": 0}, "min_hz"), ({"min_hz": 10, "max_hz": 8}, "max_hz"), ({"budget": 0}, "budget"),
    ({"budget": 1.5}, "share of one core"),
])
def test_bad_settings_say_what_is_wrong(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PaintPacer(**kwargs)  # type: ignore[arg-type]


@given(costs=st.lists(st.floats(min_value=0, max_value=2.0), min_size=1, max_size=50),
       gaps=st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=1, max_size=50))
def test_the_interval_stays_between_the_two_rates(costs: list[float], gaps: list[float]) -> None:
    cpu = FakeCpu()
    pacer = PaintPacer(max_hz=8, min_hz=2, budget=0.02, cpu_clock=cpu)
    now = 0.0
    for cost, gap in zip(costs, gaps, strict=False):
        pacer.painted(now)
        cpu.t += cost
        now += gap
        assert 1 / 8 - 1e-12 <= pacer.interval <= 1 / 2 + 1e-12
