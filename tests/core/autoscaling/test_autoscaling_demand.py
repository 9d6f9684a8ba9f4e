"""Refused demand is demand: table tests of the policy with the routers' arrival and
refusal rates (issue 12, item B)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from autoscalingkit import AZURE_MIX, Driver, config, ctx, signals

from preheat.core.autoscaling import Cause, Demand, Direction, decide, zero
from preheat.core.autoscaling import demand as demand_step
from preheat.core.autoscaling.capacity import replicas_for
from preheat.core.autoscaling.cost import ServiceCost
from preheat.core.pool import Objective, Signal


def refusing(
    now: float,
    arrivals: float,
    refused: float,
    *,
    ttft: float | None = 200.0,
    reasons: tuple[tuple[str, float], ...] | None = None,
    requests: float = 100.0,
):
    by_reason = reasons if reasons is not None else (("rejected", refused),)
    d = Demand(arrival_rate=arrivals, refused_rate=refused, window_s=60.0, by_reason=by_reason)
    return replace(signals(now, ttft, requests=requests), demand=d)


def test_a_pool_refusing_half_its_traffic_scales_up_with_latency_under_target() -> None:
    # 2 pods, TTFT p95 200 ms against 400 ms (the objective alone asks for 1), but the
    # router turned away 6 of 12 req/s: the pool served half the demand.
    dec, _ = decide(ctx(0.0, refusing(0.0, 12.0, 6.0), desired=2))
    assert (dec.direction, dec.cause, dec.active) == (Direction.UP, Cause.SCALE_UP, 4)
    assert dec.recommendation == 4  # ceil(2 * 12 / (12 - 6))
    assert dec.reason.startswith(
        "router refused 50% of 12.0 req/s over 60 s (rejected): needs 4 to serve all of it; "
        "ttft p95 200 ms < 400 ms over 60 s; "
    )


def test_without_refusals_the_decision_is_unchanged() -> None:
    for sig in (signals(0.0, 200.0), signals(0.0, 612.0), signals(0.0, 410.0)):
        plain, plain_state = decide(ctx(0.0, sig))
        counted = replace(sig, demand=Demand(arrival_rate=9.0, refused_rate=0.0, window_s=60.0))
        with_demand, with_state = decide(ctx(0.0, counted))
        assert (with_demand.active, with_demand.cause, with_demand.reason) == (
            plain.active,
            plain.cause,
            plain.reason,
        )
        assert with_demand.recommendation == plain.recommendation
        # the arrival rate feeds the forecast (kept with predictive off), nothing else
        assert replace(with_state, serving=(), forecast=None) == plain_state
        assert "refused" not in with_demand.reason


def test_the_larger_of_the_objectives_and_the_refused_demand_wins() -> None:
    # latency over target asks for ceil(3 * 600 / 400) = 5; a quarter refused by 3 pods
    # asks for ceil(3 * 4/3) = 4: the objective sets it, the reason names both
    dec, _ = decide(ctx(0.0, refusing(0.0, 8.0, 2.0, ttft=600.0), desired=3))
    assert (dec.recommendation, dec.active) == (5, 5)
    assert dec.reason.startswith(
        "ttft p95 600 ms > 400 ms over 60 s; router refused 25% of 8.0 req/s over 60 s (rejected)"
    )
    # half refused: ceil(3 * 2) = 6 > 5
    dec, _ = decide(ctx(0.0, refusing(0.0, 8.0, 4.0, ttft=600.0), desired=3))
    assert dec.recommendation == 6
    assert dec.reason.startswith("router refused 50% of 8.0 req/s over 60 s (rejected): needs 6")


def test_refusals_of_a_smaller_pool_do_not_grow_it_again_once_it_has_grown() -> None:
    # 2 pods refuse half of 12 req/s: 4 wanted; the 2 new pods warm for 30 s, then serve.
    # The 60 s window still holds refusals of the 2-pod pool: they are counted against the
    # pods that served the window (time-weighted), not the 4 serving now.
    d = Driver(desired=2, cfg=config(up=(0.0, 15.0, 4)))
    up = d.tick(0.0, refusing(0.0, 12.0, 6.0), active=2)
    assert (up.direction, up.active) == (Direction.UP, 4)
    for t in (10.0, 20.0, 30.0):  # warming: 2 serving, still refusing half
        dec = d.tick(t, refusing(t, 12.0, 6.0), active=2, warming=2)
        assert (dec.active, dec.cause) == (4, Cause.WARMING), dec.reason
    # warm at 40 s: 4 serving, the window (20..80 s) mostly refusals of 2 pods
    for t, refused in ((40.0, 4.5), (50.0, 3.0), (60.0, 2.0), (70.0, 1.0), (80.0, 0.0)):
        dec = d.tick(t, refusing(t, 12.0, refused), active=4)
        assert dec.active == 4, (t, dec.reason)
    # counted against the 4 serving now, 4.5 of 12 refused would have asked for 7
    naive = demand_step.view(Demand(12.0, 4.5, 60.0), 4, 4, 10, 0.1)
    assert naive is not None
    assert naive.replicas == 7


def test_served_by_is_the_time_weighted_pods_over_the_window() -> None:
    log = demand_step.record((), 0.0, 2, 60.0)
    log = demand_step.record(log, 30.0, 2, 60.0)
    log = demand_step.record(log, 45.0, 4, 60.0)
    assert demand_step.served_by(log, 60.0, 60.0) == pytest.approx((2 * 45 + 4 * 15) / 60)
    assert demand_step.served_by(log, 60.0, 10.0) == pytest.approx(4.0)
    assert demand_step.served_by(((5.0, 3),), 5.0, 60.0) == 3.0  # spans no time: the newest
    assert demand_step.served_by((), 5.0, 60.0) == 0.0
    later = demand_step.record(log, 200.0, 4, 60.0)  # trimmed, the sample before kept
    assert later == ((45.0, 4), (200.0, 4))


def test_the_scale_up_is_bounded_by_max_step_and_max() -> None:
    # 90% refused: ceil(2 * 10) = 20, but max step 4 -> 6
    dec, _ = decide(ctx(0.0, refusing(0.0, 10.0, 9.0), desired=2, max_=16))
    assert (dec.recommendation, dec.active) == (20, 6)
    # max 3 -> 3
    dec, _ = decide(ctx(0.0, refusing(0.0, 10.0, 9.0), desired=2, max_=3))
    assert dec.active == 3


def test_everything_refused_asks_for_the_maximum_step_by_step() -> None:
    # nothing served in the window: no latency at all; the router refused all 5 req/s
    sig = refusing(0.0, 5.0, 5.0, ttft=None, requests=0.0)
    dec, _ = decide(ctx(0.0, sig, desired=2, max_=10))
    assert (dec.direction, dec.recommendation, dec.active) == (Direction.UP, 10, 6)
    assert dec.reason.startswith(
        "router refused 100% of 5.0 req/s over 60 s (rejected): needs 10 to serve all of it; +4"
    )


def test_refusals_within_tolerance_hold_the_size_and_say_so() -> None:
    # 5% refused: factor 1.05, within the 10% band: no growth, but no shrinking either
    sig = refusing(0.0, 20.0, 1.0, ttft=150.0)
    dec, _ = decide(ctx(0.0, sig, desired=4))
    assert dec.active == 4
    assert dec.direction is Direction.HOLD
    assert "router refused 5% of 20.0 req/s over 60 s (rejected) (within tolerance ±10%)" in (
        dec.reason
    )
    plain, _ = decide(ctx(0.0, signals(0.0, 150.0), desired=4, cfg=config(down=(0.0, 0.0, 1))))
    held, _ = decide(ctx(0.0, sig, desired=4, cfg=config(down=(0.0, 0.0, 1))))
    assert plain.direction is Direction.DOWN
    assert held.direction is Direction.HOLD


def test_refusals_within_tolerance_leave_the_size_to_the_capacity_estimate() -> None:
    """The estimate sizes the routers' arrival rate, refused requests included: a few
    refusals within tolerance do not also hold the pool at its size (on the ServeGen day at
    10x they held 22 pods for 1,000 s against an estimate of 10-16, each evaluation with a
    refusal re-arming the scale-down window)."""
    rate = 90.0
    model = replicas_for(rate, ServiceCost(), AZURE_MIX, 250.0, 95.0, highest=32)
    assert model is not None
    assert model < 20
    cfg = config(objectives=(Objective(Signal.TTFT, 95.0, 250.0),), down=(0.0, 0.0, 32))
    mixed = replace(refusing(0.0, rate, 0.5, ttft=200.0), mix=AZURE_MIX)
    dec, _ = decide(ctx(0.0, mixed, desired=28, max_=32, cfg=cfg))
    assert (dec.direction, dec.active, dec.recommendation) == (Direction.DOWN, model, model)
    assert "(within tolerance ±10%: the capacity estimate counts it)" in dec.reason
    # beyond tolerance the refusals still ask for what serves all of the demand
    beyond = replace(refusing(0.0, rate, 45.0, ttft=200.0), mix=AZURE_MIX)
    dec, _ = decide(ctx(0.0, beyond, desired=28, max_=32, cfg=cfg))
    assert dec.recommendation is not None
    assert dec.recommendation > 28
    assert dec.direction is Direction.UP


def test_the_reason_names_each_refusal_reason_with_its_share() -> None:
    sig = refusing(0.0, 10.0, 6.0, reasons=(("rejected", 4.0), ("unavailable", 2.0)))
    dec, _ = decide(ctx(0.0, sig, desired=2))
    assert dec.reason.startswith(
        "router refused 60% of 10.0 req/s over 60 s (rejected 40%, unavailable 20%): needs 5"
    )


def test_refusals_while_pods_warm_count_the_pods_on_their_way() -> None:
    # 1 serving, 1 warming (desired 2): the serving pod refuses half -> needs 2: on the way
    dec, _ = decide(ctx(0.0, refusing(0.0, 12.0, 6.0), desired=2, active=1, warming=1))
    assert (dec.direction, dec.cause) == (Direction.HOLD, Cause.WARMING)


def test_refused_requests_at_zero_wake_the_pool_and_keep_it_from_idling() -> None:
    at_zero = replace(
        signals(0.0, None, requests=0.0, in_flight=0.0),
        demand=Demand(arrival_rate=0.5, refused_rate=0.5, window_s=60.0),
    )
    dec, _ = decide(ctx(0.0, at_zero, desired=0, min_=0))
    assert (dec.cause, dec.active) == (Cause.WAKE, 1)
    # refused traffic is traffic: a pool whose every request was refused is not idle
    assert not zero.is_idle(at_zero)
    assert zero.is_idle(replace(at_zero, demand=None))


def test_demand_view_table() -> None:
    def v(a: float, r: float, base: int = 2, current: int = 2, highest: int = 10):
        return demand_step.view(Demand(a, r, 60.0), base, current, highest, 0.1)

    assert v(10.0, 0.0) is None
    assert demand_step.view(None, 2, 2, 10, 0.1) is None
    half = v(10.0, 5.0)
    assert half is not None
    assert (half.factor, half.replicas) == (2.0, 4)
    small = v(10.0, 0.5)
    assert small is not None
    assert small.within_tolerance
    assert small.replicas == 2
    everything = v(4.0, 4.0)
    assert everything is not None
    assert math.isinf(everything.factor)
    assert everything.replicas == 10
    none_serving = v(4.0, 2.0, base=0, current=1)
    assert none_serving is not None
    assert none_serving.replicas is None
    over = v(4.0, 5.0)  # R read a moment after A: clamped to everything refused
    assert over is not None
    assert math.isinf(over.factor)


@pytest.mark.parametrize(
    ("arrivals", "refused", "desired", "want"),
    [(12.0, 6.0, 1, 2), (12.0, 6.0, 3, 6), (12.0, 3.0, 3, 4), (12.0, 9.0, 1, 4)],
)
def test_refused_fraction_table(arrivals: float, refused: float, desired: int, want: int) -> None:
    dec, _ = decide(ctx(0.0, refusing(0.0, arrivals, refused), desired=desired))
    assert dec.recommendation == want
