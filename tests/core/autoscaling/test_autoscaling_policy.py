"""Table tests of the autoscaling policy over tick sequences with injected time."""

from __future__ import annotations

import pytest
from autoscalingkit import TTFT95, Driver, config, ctx, signals, with_state

from preheat.core.autoscaling import Cause, Direction, Plan, PolicyState, PolicyTuning, decide
from preheat.core.pool import Objective, Signal


def test_step_increase_scales_up_within_one_evaluation() -> None:
    d = Driver()
    first = d.tick(0.0, signals(0.0, 400.0))
    assert first.direction is Direction.HOLD
    up = d.tick(10.0, signals(10.0, 612.0))
    assert (up.active, up.direction, up.cause) == (5, Direction.UP, Cause.SCALE_UP)
    assert up.reason == "ttft p95 612 ms > 400 ms over 60 s; +2, new pods"
    assert up.recommendation == 5  # ceil(3 * 612 / 400)
    assert up.signals.values[0].value == 612.0


def test_within_tolerance_holds() -> None:
    dec, _ = decide(ctx(0.0, signals(0.0, 410.0)))
    assert (dec.active, dec.cause) == (3, Cause.WITHIN_TOLERANCE)
    assert dec.reason == "within tolerance: ttft p95 410 ms vs 400 ms ±10%"


def test_brief_spike_shorter_than_down_stabilization_does_not_scale_down_after() -> None:
    d = Driver(cfg=config(down=(300.0, 0.0, 1)))
    d.tick(0.0, signals(0.0, 400.0))
    spike = d.tick(10.0, signals(10.0, 800.0))
    assert spike.active == 6
    # The spike is over; latency is now low, but the window still holds the spike.
    for t in range(20, 310, 10):
        dec = d.tick(float(t), signals(float(t), 150.0))
        assert dec.active == 6, (t, dec.reason)
        assert dec.cause is Cause.STABILIZING
    # what it has seen (the spike) holds it, so the reason does not blame start-up
    assert dec.reason.endswith("holding 6: needs 3, stabilizing (down)")
    after = d.tick(320.0, signals(320.0, 150.0))
    assert (after.active, after.direction) == (5, Direction.DOWN)  # max step down 1
    assert after.reason == "ttft p95 150 ms < 400 ms over 60 s; -1, removed"


def test_a_fresh_policy_holds_the_current_size_for_the_down_window_it_did_not_see() -> None:
    # an operator restarted (no history) during a lull after a spike: 6 pods, latency low
    d = Driver(desired=6, cfg=config(down=(300.0, 0.0, 1)))
    for t in range(0, 300, 10):
        dec = d.tick(float(t), signals(float(t), 150.0))
        assert (dec.active, dec.cause) == (6, Cause.STABILIZING), (t, dec.reason)
    assert dec.reason.endswith(
        "holding 6: needs 3, stabilizing (down; the 300 s window began at start-up)"
    )
    after = d.tick(300.0, signals(300.0, 150.0))  # the whole window seen: it says 3
    assert (after.active, after.direction) == (5, Direction.DOWN)  # max step down 1
    # with no scale-down window there is nothing unseen to hold
    now = Driver(desired=6, cfg=config(down=(0.0, 0.0, 1)))
    assert now.tick(0.0, signals(0.0, 150.0)).direction is Direction.DOWN


def test_up_stabilization_ignores_a_blip() -> None:
    d = Driver(cfg=config(up=(30.0, 0.0, 4)))
    d.tick(0.0, signals(0.0, 400.0))
    blip = d.tick(10.0, signals(10.0, 700.0))
    assert (blip.active, blip.cause) == (3, Cause.STABILIZING)
    assert blip.reason.endswith("holding 3: needs 6, stabilizing (up)")
    d.tick(20.0, signals(20.0, 400.0))
    for t in (40.0, 50.0):
        d.tick(t, signals(t, 700.0))
    assert d.desired == 3  # the 400 at t=20 is still in the 30 s window at t=50
    assert d.tick(60.0, signals(60.0, 700.0)).active == 6


def test_cooldowns_after_any_scale_event() -> None:
    d = Driver(cfg=config(up=(0.0, 15.0, 4), down=(0.0, 120.0, 1)))
    assert d.tick(0.0, signals(0.0, 612.0)).active == 5
    held = d.tick(5.0, signals(5.0, 700.0))
    assert (held.active, held.cause) == (5, Cause.COOLDOWN)
    assert held.reason == (
        "ttft p95 700 ms > 400 ms over 60 s; holding 5: scale-up cooldown (10 s left)"
    )
    assert d.tick(15.0, signals(15.0, 700.0)).active == 9  # ceil(5 * 1.75)
    low = d.tick(30.0, signals(30.0, 100.0))
    assert (low.active, low.cause) == (9, Cause.COOLDOWN)
    assert low.reason.endswith("holding 9: scale-down cooldown (105 s left)")
    assert d.tick(134.0, signals(134.0, 100.0)).active == 9
    down = d.tick(135.0, signals(135.0, 100.0))
    assert (down.active, down.direction) == (8, Direction.DOWN)


def test_max_step_per_direction() -> None:
    d = Driver(cfg=config(up=(0.0, 0.0, 2), down=(0.0, 0.0, 3)))
    assert d.tick(0.0, signals(0.0, 4000.0)).active == 5  # wants 10, +2 at most
    assert d.tick(1.0, signals(1.0, 4000.0)).active == 7
    assert d.tick(2.0, signals(2.0, 40.0)).active == 4  # wants 1, -3 at most
    assert d.tick(3.0, signals(3.0, 40.0)).active == 1


def test_bounds() -> None:
    dec, _ = decide(ctx(0.0, signals(0.0, 4000.0), desired=9, max_=10))
    assert dec.active == 10
    at_max, _ = decide(ctx(0.0, signals(0.0, 4000.0), desired=10, max_=10))
    assert (at_max.active, at_max.cause) == (10, Cause.BOUNDS)
    assert at_max.reason.endswith("holding 10: at max")
    at_min, _ = decide(ctx(0.0, signals(0.0, 10.0), desired=2, min_=2, cfg=config(down=(0, 0, 1))))
    assert (at_min.active, at_min.cause) == (2, Cause.BOUNDS)
    assert at_min.reason.endswith("holding 2: at min")


def test_warming_pods_are_counted() -> None:
    # 3 serving, 2 more on their way: 612 ms needs 5, which is what is coming.
    c = ctx(0.0, signals(0.0, 612.0), desired=5, active=3, warming=2)
    dec, _ = decide(c)
    assert (dec.active, dec.cause) == (5, Cause.WARMING)
    assert dec.reason == (
        "ttft p95 612 ms > 400 ms over 60 s; needs 5, 5 on the way "
        "(3 serving, 2 warming or promoting): holding 5"
    )
    assert dec.plan == Plan()  # nothing more to start
    more, _ = decide(ctx(0.0, signals(0.0, 800.0), desired=5, active=3, warming=2))
    assert more.active == 6
    assert more.reason == "ttft p95 800 ms > 400 ms over 60 s; +1, new pods (2 warming counted)"
    assert more.plan.start == 1


def test_panic_scales_up_at_once_and_never_down_while_it_lasts() -> None:
    cfg = config(up=(60.0, 15.0, 4), down=(0.0, 0.0, 2), panic=(True, 2.0, 10.0))
    c = ctx(100.0, signals(100.0, 500.0, short=1000.0), cfg=cfg)
    c = with_state(c, last_scale_at=95.0)  # in the up cooldown, up-stabilization 60 s
    dec, state = decide(c)
    assert (dec.active, dec.cause, dec.panic) == (7, Cause.PANIC, True)  # ceil(3*2.5)=8, +4
    assert dec.reason == "panic: ttft p95 1000 ms >= 2x 400 ms; +4, new pods"
    assert state.panic_until == 110.0
    calm, state2 = decide(ctx(105.0, signals(105.0, 100.0), desired=7, cfg=cfg, state=state))
    assert (calm.active, calm.cause) == (7, Cause.PANIC)
    assert "panic mode (no scale-down until it ends)" in calm.reason
    after, _ = decide(ctx(111.0, signals(111.0, 100.0), desired=7, cfg=cfg, state=state2))
    assert (after.active, after.direction) == (5, Direction.DOWN)


def test_panic_still_respects_max() -> None:
    cfg = config(panic=(True, 2.0, 10.0))
    dec, _ = decide(ctx(0.0, signals(0.0, 4000.0), desired=8, max_=9, cfg=cfg))
    assert dec.active == 9


@pytest.mark.parametrize(
    ("sig", "reason"),
    [
        (
            signals(100.0, 100.0, stale=True, observed_at=55.0),
            "holding 3: no fresh metrics for 45 s (source stale: connection refused)",
        ),
        (
            signals(100.0, 100.0, observed_at=55.0),
            "holding 3: no fresh metrics for 45 s (source stale)",
        ),
        (
            signals(100.0, 100.0).__class__(),
            "holding 3: no metrics yet",
        ),
    ],
)
def test_no_scale_down_on_missing_or_stale_data(sig: object, reason: str) -> None:
    cfg = config(down=(0.0, 0.0, 1))
    dec, state = decide(ctx(100.0, sig, cfg=cfg))  # type: ignore[arg-type]
    assert (dec.active, dec.direction, dec.cause) == (3, Direction.HOLD, Cause.STALE)
    assert dec.reason == reason
    assert state.history == ()


def test_missing_objective_holds() -> None:
    cfg = config(objectives=(TTFT95, Objective(Signal.ITL, 99.0, 50.0)), down=(0, 0, 1))
    dec, _ = decide(ctx(0.0, signals(0.0, 100.0), cfg=cfg))
    assert (dec.active, dec.cause) == (3, Cause.STALE)
    assert dec.reason == "holding 3: itl p99 missing from the metric source"


def test_standby_promoted_before_new_pods() -> None:
    c = ctx(0.0, signals(0.0, 612.0), standby=2, warm_standby=2)
    dec, _ = decide(c)
    assert (dec.active, dec.standby) == (5, 2)
    assert dec.plan == Plan(promote=2, start=2)
    assert dec.reason == (
        "ttft p95 612 ms > 400 ms over 60 s; +2, standby promoted; 2 starting to refill standby"
    )
    partial, _ = decide(ctx(0.0, signals(0.0, 800.0), standby=1, warm_standby=1))
    assert partial.plan == Plan(promote=1, start=3)
    assert partial.reason.endswith("+3: 1 standby promoted, 2 new; 1 starting to refill standby")


def test_shrinking_demotes_when_standby_is_short_else_removes() -> None:
    cfg = config(down=(0.0, 0.0, 1))
    short, _ = decide(ctx(0.0, signals(0.0, 100.0), warm_standby=2, cfg=cfg))
    assert (short.active, short.standby, short.plan.demote) == (2, 2, 1)
    assert short.reason == "ttft p95 100 ms < 400 ms over 60 s; -1, demoted to standby"
    full, _ = decide(ctx(0.0, signals(0.0, 100.0), standby=2, warm_standby=2, cfg=cfg))
    assert full.plan == Plan(remove=1)
    assert full.reason.endswith("-1, removed")


def test_queue_depth_and_kv_objectives_take_the_max() -> None:
    objs = (
        TTFT95,
        Objective(Signal.QUEUE_DEPTH, 0.0, 2.0),
        Objective(Signal.KV_CACHE_USAGE, 0.0, 0.8),
    )
    cfg = config(objectives=objs, up=(0.0, 0.0, 10))
    dec, _ = decide(ctx(0.0, signals(0.0, 400.0, queue=12.0, kv=0.9), cfg=cfg))
    assert dec.active == 6  # queue 12 / 2 per replica; kv ceil(3 * 0.9/0.8) = 4
    assert dec.reason == "queueDepth 12 waiting > 2/replica; +3, new pods"
    kv, _ = decide(ctx(0.0, signals(0.0, 400.0, queue=0.0, kv=1.0), cfg=cfg))
    assert kv.active == 4
    assert kv.reason.startswith("kvCacheUsage 1.00 > 0.8")


def test_concurrency_leads_while_latency_is_still_within_its_objective() -> None:
    objs = (TTFT95, Objective(Signal.CONCURRENCY, 0.0, 64.0))
    cfg = config(objectives=objs, up=(0.0, 0.0, 10))
    # the latency window still reads fine, but 300 in flight on 3 pods is over 64 each
    dec, _ = decide(ctx(0.0, signals(0.0, 300.0, concurrency=300.0), cfg=cfg))
    assert dec.active == 5  # ceil(300 / 64)
    assert dec.reason == "concurrency 300 in flight > 64/replica; +2, new pods"
    # within tolerance (192 = 3 x 64): no change from it, and latency asks for fewer
    held, _ = decide(ctx(0.0, signals(0.0, 390.0, concurrency=200.0), cfg=cfg))
    assert held.active == 3
    # it asks for what the count needs, so a quiet pool is sized by latency, not by it
    # (a policy that has seen its whole scale-down window)
    seen = PolicyState(since=-300.0)
    quiet, _ = decide(ctx(0.0, signals(0.0, 100.0, concurrency=10.0), cfg=cfg, state=seen))
    assert quiet.active < 3


def test_scale_to_zero_after_the_idle_delay_and_wake() -> None:
    d = Driver(
        cfg=config(down=(60.0, 0.0, 1)),
        desired=1,
        min_=0,
        tuning=PolicyTuning(scale_to_zero_delay_s=120.0),
    )
    idle = {"requests": 0.0, "in_flight": 0.0}
    first = d.tick(0.0, signals(0.0, None, **idle))
    assert (first.active, first.cause) == (1, Cause.BOUNDS)
    assert first.reason == "no requests over 60 s; holding 1: at min"
    assert d.tick(119.0, signals(119.0, None, **idle)).active == 1
    zero = d.tick(120.0, signals(120.0, None, **idle))
    assert (zero.active, zero.standby, zero.cause) == (0, 0, Cause.SCALE_TO_ZERO)
    assert zero.reason == "idle for 120 s (no requests); scaling to zero; -1, removed"
    rest = d.tick(130.0, signals(130.0, None, **idle))
    assert (rest.active, rest.cause, rest.reason) == (0, Cause.IDLE, "at zero: no requests")
    wake = d.tick(140.0, signals(140.0, None, requests=0.0, in_flight=3.0))
    assert (wake.active, wake.wake, wake.cause) == (1, True, Cause.WAKE)
    assert wake.reason == "requests arrived at zero; waking; +1, new pods"


def test_a_request_resets_the_idle_clock() -> None:
    d = Driver(desired=1, min_=0, cfg=config(down=(0.0, 0.0, 1)))
    d.tuning = PolicyTuning(scale_to_zero_delay_s=100.0)
    d.tick(0.0, signals(0.0, None, requests=0.0, in_flight=0.0))
    d.tick(50.0, signals(50.0, 100.0, requests=1.0, in_flight=0.0))
    assert d.tick(120.0, signals(120.0, None, requests=0.0, in_flight=0.0)).active == 1
    assert d.tick(220.0, signals(220.0, None, requests=0.0, in_flight=0.0)).active == 0


def test_silence_is_not_idleness() -> None:
    d = Driver(desired=1, min_=0, tuning=PolicyTuning(scale_to_zero_delay_s=10.0))
    d.tick(0.0, signals(0.0, None, requests=0.0, in_flight=0.0))
    d.tick(5.0, signals(5.0, None, stale=True, observed_at=0.0))
    assert d.state.idle_since is None
    assert d.tick(11.0, signals(11.0, None, requests=0.0, in_flight=0.0)).active == 1


def test_autoscaling_off_follows_replicas_desired() -> None:
    dec, _ = decide(ctx(0.0, signals(0.0, 4000.0), cfg=config(objectives=())))
    assert (dec.active, dec.cause, dec.reason) == (
        3,
        Cause.NO_OBJECTIVES,
        "autoscaling off: 3 replicas",
    )
