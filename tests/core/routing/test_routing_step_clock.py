"""The queue term's wait for the engine step in progress, from the step boundaries the
router sees in the tokens it streams (``StepClock``): the phase where it is known and
fresh, half a step on average where it is not (cost: ``routingkit.LinearCost``)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from routingkit import COST, NOW, make_ctx, make_endpoint, make_request, picked

from preheat.core.routing.baselines import SchedulerState
from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.plugins.queue import (
    clock_trusted,
    phase_residual_ms,
    queue_wait_ms,
    step_residual_ms,
)
from preheat.core.routing.scheduler import schedule
from preheat.core.routing.types import StepClock

CFG = SchedulerConfig()
TYPICAL = 1024.0


def clock(
    ago_ms: float, step_ms: float = 8.0, lag_ms: float = 0.0, error_ms: float | None = 0.0
) -> StepClock:
    """A step clock whose last token arrived ``ago_ms`` before NOW."""
    return StepClock(NOW - ago_ms / 1000.0, step_ms, lag_ms, error_ms)


@pytest.mark.parametrize(
    ("c", "expected"),
    [
        # the token came 1 ms ago: 7 ms of the 8 ms step are left
        (clock(1.0), 7.0),
        # just now: a whole step
        (clock(0.0), 8.0),
        # the request lands 2 ms later than it is sent (lag): 5 ms left
        (clock(1.0, lag_ms=2.0), 5.0),
        # the lag carries it into the next step: 11 ms into an 8 ms step is 3 ms into the next
        (clock(3.0, lag_ms=8.0), 5.0),
        # 1.5 steps ago (the token of the step that ended in between was not seen yet)
        (clock(12.0), 4.0),
        # older than two steps: the phase is not known
        (clock(16.5), None),
        # from the future (another clock) or without a step: not known
        (clock(-1.0), None),
        (clock(1.0, step_ms=0.0), None),
    ],
)
def test_the_phase_says_how_much_of_the_step_is_left(c: StepClock, expected: float | None) -> None:
    r = phase_residual_ms(c, NOW)
    if expected is None:
        assert r is None
    else:
        assert r == pytest.approx(expected)


@given(
    ago=st.floats(0.0, 30.0),
    step=st.floats(0.5, 50.0),
    lag=st.floats(0.0, 100.0),
)
def test_the_wait_is_never_more_than_a_step(ago: float, step: float, lag: float) -> None:
    r = phase_residual_ms(clock(ago, step, lag), NOW)
    if ago <= 2 * step:
        assert r is not None
        assert 0.0 < r <= step + 1e-9
    else:
        assert r is None


@pytest.mark.parametrize(
    ("error_ms", "trusted"),
    [
        (0.0, True),  # exact (the simulator)
        (8.0 / 6, True),  # a sixth of the step: the bound
        (1.5, False),  # more: no better than half a step on average
        (2.6, False),  # a guess misses by a third of the step
        (None, False),  # not measured yet (a live router's first requests)
    ],
)
def test_a_clock_is_used_only_while_its_predictions_hold(
    error_ms: float | None, trusted: bool
) -> None:
    c = clock(1.0, error_ms=error_ms)
    assert clock_trusted(c) is trusted  # what the router's step_clock_trusted gauge says
    assert (phase_residual_ms(c, NOW) is not None) is trusted
    # the router still predicts with it, to measure its error
    assert phase_residual_ms(c, NOW, untrusted=True) == pytest.approx(7.0)
    busy = make_endpoint("w-0", decoding=2)
    expected = 7.0 if trusted else step_residual_ms(busy, CFG, TYPICAL)
    assert step_residual_ms(busy, CFG, TYPICAL, c, NOW) == pytest.approx(expected)


def test_the_clock_replaces_the_average_only_where_it_is_known_and_fresh() -> None:
    busy = make_endpoint("w-0", decoding=2)
    average = step_residual_ms(busy, CFG, TYPICAL)
    assert average > 0
    # fresh: the phase; stale, none, or turned off: the average
    assert step_residual_ms(busy, CFG, TYPICAL, clock(1.0), NOW) == pytest.approx(7.0)
    assert step_residual_ms(busy, CFG, TYPICAL, clock(40.0), NOW) == pytest.approx(average)
    assert step_residual_ms(busy, CFG, TYPICAL, None, NOW) == pytest.approx(average)
    off = dataclasses.replace(CFG, step_clock=False)
    assert step_residual_ms(busy, off, TYPICAL, clock(1.0), NOW) == pytest.approx(average)
    # an idle engine starts the prefill at once, whatever its last tokens said
    assert step_residual_ms(make_endpoint("w-1"), CFG, TYPICAL, clock(1.0), NOW) == 0.0
    # with a prefill of ours ahead, the step is inside the typical prefill: no residual
    ahead = make_endpoint("w-2", decoding=2, in_flight=1)
    assert queue_wait_ms(ahead, COST, CFG, clock=clock(1.0), now=NOW) == pytest.approx(
        queue_wait_ms(ahead, COST, CFG)
    )


def test_of_two_equally_busy_workers_the_one_ending_its_step_first_is_picked() -> None:
    eps = [make_endpoint("w-0", decoding=1), make_endpoint("w-1", decoding=1)]
    # w-1's step ends in 1 ms, w-0's in 6: w-1, for every request (not taking turns)
    clocks = {"w-0": clock(2.0), "w-1": clock(7.0)}
    state = SchedulerState()
    seen: Counter[str] = Counter()
    for i in range(4):
        ctx = make_ctx(eps, make_request(request_id=f"r-{i}"), step_clocks=clocks)
        d, state = schedule(ctx, CFG, COST, state)
        seen[picked(d) or ""] += 1
        assert d.predicted_ttft_ms == pytest.approx(1.0 + 102.4 + 0.05 * 0 + 1.0)  # rtt 1
    assert seen == {"w-1": 4}
    # the other way round, w-0
    swapped = {"w-0": clock(7.0), "w-1": clock(2.0)}
    d, _ = schedule(make_ctx(eps, step_clocks=swapped), CFG, COST, SchedulerState())
    assert picked(d) == "w-0"
    # without clocks (or with the clock off) they are equal and take turns
    off = dataclasses.replace(CFG, step_clock=False)
    for config, given_clocks in ((CFG, {}), (off, clocks)):
        state, seen = SchedulerState(), Counter()
        for i in range(4):
            ctx = make_ctx(eps, make_request(request_id=f"r-{i}"), step_clocks=given_clocks)
            d, state = schedule(ctx, config, COST, state)
            seen[picked(d) or ""] += 1
        assert seen == {"w-0": 2, "w-1": 2}
