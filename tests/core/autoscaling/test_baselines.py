"""The HPA, KEDA and KPA baselines: table tests of their formulas and properties (monotone
in load, within [min, max], stabilization, panic never scales down)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preheat.core.autoscaling import (
    Cause,
    Context,
    Decision,
    Direction,
    PolicyState,
    ReplicaCounts,
    Signals,
    SignalValue,
)
from preheat.core.autoscaling.baselines import (
    BASELINES,
    Hpa,
    HpaBehavior,
    Keda,
    Kpa,
    Scheduled,
    hpa_desired,
    kpa_desired,
)
from preheat.core.pool import (
    AutoscalingConfig,
    PanicConfig,
    ReplicasConfig,
    ScaleRule,
    Signal,
)

NO_OBJECTIVES = AutoscalingConfig(
    objectives=(),
    window_s=60.0,
    scale_up=ScaleRule(0.0, 0.0, 4),
    scale_down=ScaleRule(300.0, 0.0, 1),
    tolerance=0.1,
    panic=PanicConfig(False, 2.0, 10.0),
)


def sig(now: float, in_flight: float, queue: float = 0.0, *, stale: bool = False) -> Signals:
    return Signals(
        values=(SignalValue(Signal.QUEUE_DEPTH, 0.0, queue, now),),
        observed_at=now,
        stale=stale,
        requests=in_flight,
        in_flight=in_flight,
    )


def ctx(
    now: float,
    signals: Signals,
    desired: int,
    *,
    min_: int = 1,
    max_: int = 100,
    warm_standby: int = 0,
    standby: int = 0,
    state: PolicyState | None = None,
) -> Context:
    return Context(
        now=now,
        autoscaling=NO_OBJECTIVES,
        replicas=ReplicasConfig(min_, max_, warm_standby, desired),
        counts=ReplicaCounts(active=desired, standby=standby),
        signals=signals,
        state=state or PolicyState(),
    )


@dataclass
class Driver:
    policy: Hpa | Keda | Kpa
    desired: int
    min_: int = 1
    max_: int = 100
    state: PolicyState = field(default_factory=PolicyState)

    def tick(self, now: float, in_flight: float, queue: float = 0.0) -> Decision:
        c = ctx(
            now,
            sig(now, in_flight, queue),
            self.desired,
            min_=self.min_,
            max_=self.max_,
            state=self.state,
        )
        d, self.state = self.policy(c)
        self.desired = d.active
        return d


# --- the formulas, from the upstream docs --------------------------------------------


def test_hpa_formula_and_tolerance() -> None:
    # kubernetes.io: 50 replicas at 90% vs a 75% target -> ceil(50 * 90/75) = 60
    assert hpa_desired(50, 90 / 75, 0.1, 50) == 60
    assert hpa_desired(50, 1.08, 0.1, 50) == 50  # within 10%: no change
    assert hpa_desired(4, 0.5, 0.1, 4) == 2


def test_hpa_scales_on_average_utilization() -> None:
    hpa = Hpa(target_utilization=0.5, slots_per_replica=10)
    d, state = hpa(ctx(0.0, sig(0.0, in_flight=40.0), 4))  # 100% vs 50% -> 8
    assert (d.active, d.direction, d.cause) == (8, Direction.UP, Cause.SCALE_UP)
    assert d.reason.startswith("hpa: utilization 100% vs target 50%")
    # the first sync stores the current size too (upstream's recordInitialRecommendation)
    assert state.history == ((0.0, 4), (0.0, 8))


def test_hpa_scale_up_rate_limit() -> None:
    hpa = Hpa(target_utilization=0.5, slots_per_replica=10)
    d, _ = hpa(ctx(0.0, sig(0.0, in_flight=500.0), 2))  # wants 100; max(2*2, 2+4) = 6
    assert d.active == 6
    d, _ = hpa(ctx(0.0, sig(0.0, in_flight=5000.0), 20))  # max(40, 24) = 40
    assert d.active == 40


def test_hpa_syncs_every_period_and_holds_between() -> None:
    d = Driver(Hpa(target_utilization=0.5, slots_per_replica=10), desired=4)
    assert d.tick(0.0, 20.0).active == 4  # exactly at target
    between = d.tick(5.0, 80.0)
    assert (between.active, between.direction) == (4, Direction.HOLD)
    assert "between syncs" in between.reason
    assert d.tick(15.0, 80.0).active == 8  # wants 16; max(2 * 4, 4 + 4) per period


def test_hpa_down_stabilization_keeps_the_highest_recommendation_for_300s() -> None:
    d = Driver(Hpa(target_utilization=0.5, slots_per_replica=10), desired=8)
    assert d.tick(0.0, 80.0).active == 16
    for t in range(15, 300, 15):
        dec = d.tick(float(t), 5.0)
        assert dec.active == 16, t
    assert dec.cause is Cause.STABILIZING
    assert d.tick(315.0, 5.0).active == 1  # Percent 100 down: straight to what it needs


def test_a_new_hpa_holds_its_starting_size_for_the_scale_down_window() -> None:
    # upstream's first reconcile stores the current size as a recommendation, so a new HPA
    # (or one whose controller restarted) does not scale down for one window
    d = Driver(Hpa(target_utilization=0.5, slots_per_replica=10), desired=6)
    first = d.tick(0.0, 5.0)  # needs 1
    assert (first.active, first.cause, first.recommendation) == (6, Cause.STABILIZING, 1)
    assert "needs 1, stabilizing (down)" in first.reason
    for t in range(15, 300, 15):
        assert d.tick(float(t), 5.0).active == 6, t
    # the stored size counts while strictly younger than the window (After(cutoff))
    down = d.tick(300.0, 5.0)
    assert (down.active, down.direction) == (1, Direction.DOWN)


def test_the_starting_size_does_not_hold_a_scale_up_with_a_zero_second_up_window() -> None:
    up = Driver(Hpa(target_utilization=0.5, slots_per_replica=10), desired=2).tick(0.0, 40.0)
    assert (up.active, up.direction) == (6, Direction.UP)  # max(2 * 2, 2 + 4)
    # with an up window it does, upstream too: the lowest recent recommendation is 2
    slow = Hpa(
        target_utilization=0.5,
        slots_per_replica=10,
        behavior=HpaBehavior(up_stabilization_s=60.0),
    )
    d = Driver(slow, desired=2)
    assert d.tick(0.0, 40.0).active == 2
    assert d.tick(45.0, 40.0).active == 2
    assert d.tick(60.0, 40.0).active == 6


def test_a_new_keda_scaled_object_holds_its_starting_size_for_the_window() -> None:
    d = Driver(Keda(threshold=4.0), desired=3)
    for t in range(0, 300, 30):
        assert d.tick(float(t), 2.0, queue=0.0).active == 3, t
    assert d.tick(300.0, 2.0, queue=0.0).active == 1


def test_keda_scales_to_zero_itself_from_any_size_after_the_cooldown() -> None:
    # the cooldown is shorter than the HPA's window, which would still hold 4
    d = Driver(Keda(threshold=4.0, cooldown_period_s=60.0), desired=4, min_=0)
    assert d.tick(0.0, 2.0).active == 4  # active: something in flight
    assert d.tick(30.0, 0.0).active == 4  # inactive from here
    assert d.tick(60.0, 0.0).active == 4
    zero = d.tick(90.0, 0.0)
    assert (zero.active, zero.cause) == (0, Cause.SCALE_TO_ZERO)
    assert "trigger inactive for 60 s (cooldownPeriod 60 s)" in zero.reason


def test_a_keda_trigger_never_active_waits_the_initial_cooldown_not_the_cooldown() -> None:
    # upstream: LastActiveTime nil -> creation + initialCooldownPeriod (default 0)
    first = Driver(Keda(threshold=4.0), desired=2, min_=0).tick(0.0, 0.0)
    assert (first.active, first.cause) == (0, Cause.SCALE_TO_ZERO)
    assert "(initialCooldownPeriod 0 s)" in first.reason
    d = Driver(Keda(threshold=4.0, initial_cooldown_period_s=120.0), desired=2, min_=0)
    assert d.tick(0.0, 0.0).active == 2
    assert d.tick(90.0, 0.0).active == 2
    assert d.tick(120.0, 0.0).active == 0
    # once active, the cooldown counts from when it went inactive
    d = Driver(Keda(threshold=4.0, initial_cooldown_period_s=120.0), desired=2, min_=0)
    d.tick(0.0, 0.0)
    d.tick(30.0, 1.0, queue=1.0)
    assert d.tick(150.0, 0.0).active >= 1  # inactive since 150: the 300 s cooldown
    assert d.tick(420.0, 0.0).active >= 1  # (the HPA may take it to 1 meanwhile)
    assert d.tick(450.0, 0.0).active == 0


def test_keda_queue_threshold() -> None:
    keda = Keda(threshold=4.0)
    d, _ = keda(ctx(0.0, sig(0.0, in_flight=50.0, queue=30.0), 2))
    assert (d.active, d.direction) == (6, Direction.UP)  # max(2*2, 2+4) of ceil(30/4)=8
    d, _ = keda(ctx(0.0, sig(0.0, in_flight=50.0, queue=30.0), 7))
    assert (d.active, d.cause) == (7, Cause.WITHIN_TOLERANCE)  # 30 / (4 * 7) = 1.07
    d, _ = keda(ctx(0.0, sig(0.0, in_flight=50.0, queue=30.0), 6))
    assert d.active == 8
    d, _ = keda(ctx(0.0, sig(0.0, in_flight=50.0, queue=29.0), 8))  # 29/32 within 10%
    assert (d.active, d.cause) == (8, Cause.WITHIN_TOLERANCE)


def test_keda_goes_to_zero_only_after_the_cooldown_period() -> None:
    d = Driver(Keda(threshold=4.0, cooldown_period_s=300.0), desired=1, min_=0)
    assert d.tick(0.0, 1.0).active == 1  # active at first
    assert d.tick(30.0, 0.0).active == 1  # inactive from here
    assert d.tick(300.0, 0.0).active == 1
    assert d.tick(330.0, 0.0).active == 0
    wake = d.tick(360.0, 1.0, queue=1.0)
    assert (wake.active, wake.wake) == (1, True)


def test_kpa_stable_and_panic_windows() -> None:
    assert kpa_desired(((0.0, 10),), 0.0, 60.0, 6.0, 7.0) == (2, 2, 10.0, 10.0)
    hist = ((1.0, 0), (50.0, 0), (57.0, 70), (59.0, 70))
    stable, panic, _, _ = kpa_desired(hist, 60.0, 60.0, 6.0, 7.0)
    assert (stable, panic) == (5, 10)  # mean 35 -> 5; mean 70 -> 10


def test_kpa_panics_on_a_burst_and_never_scales_down_in_panic() -> None:
    d = Driver(Kpa(target_concurrency=10.0, target_utilization=1.0), desired=2)
    for t in range(0, 60, 2):
        assert d.tick(float(t), 20.0).active == 2  # 10 per pod: steady
    burst = d.tick(60.0, 200.0)  # panic window mean >= 2x ready
    assert burst.panic
    assert burst.cause is Cause.PANIC
    assert burst.active > 2
    peak = burst.active
    for t in range(62, 120, 2):
        dec = d.tick(float(t), 20.0)
        assert dec.active >= peak, t  # no scale-down while panicking
        peak = dec.active
    for t in range(120, 240, 2):
        dec = d.tick(float(t), 20.0)
    assert not dec.panic
    assert dec.active == 2  # back to stable: 20 concurrent / 10 per pod


def test_stale_signals_hold_for_every_baseline() -> None:
    for name, policy in BASELINES.items():
        c = ctx(100.0, sig(10.0, in_flight=500.0, queue=500.0, stale=True), 3)
        d, state = policy(c)
        assert (d.active, d.cause) == (3, Cause.STALE), name
        assert state == c.state


def test_warm_standby_is_promoted_first() -> None:
    hpa = Hpa(target_utilization=0.5, slots_per_replica=10)
    c = ctx(0.0, sig(0.0, in_flight=40.0), 4, warm_standby=2, standby=2)
    d, _ = hpa(c)
    assert (d.active, d.standby, d.plan.promote, d.plan.start) == (8, 2, 2, 4)


# --- properties -------------------------------------------------------------------------

POLICIES = st.sampled_from(
    [
        Hpa(slots_per_replica=8),
        Hpa(target_utilization=0.9, behavior=HpaBehavior(down_stabilization_s=60.0)),
        Keda(threshold=2.0),
        Keda(threshold=8.0, polling_interval_s=15.0),
        Kpa(target_concurrency=8.0),
        Kpa(panic_threshold=1.5),
    ]
)


@settings(max_examples=200)
@given(
    policy=POLICIES,
    desired=st.integers(1, 40),
    lo=st.integers(1, 5),
    span=st.integers(0, 60),
    load=st.floats(0.0, 2000.0),
    more=st.floats(0.0, 2000.0),
)
def test_monotone_in_load_and_within_bounds(
    policy: Hpa | Keda | Kpa, desired: int, lo: int, span: int, load: float, more: float
) -> None:
    hi = lo + span
    desired = max(lo, min(hi, desired))
    a, _ = policy(ctx(0.0, sig(0.0, load, load / 2), desired, min_=lo, max_=hi))
    b, _ = policy(ctx(0.0, sig(0.0, load + more, (load + more) / 2), desired, min_=lo, max_=hi))
    assert lo <= a.active <= hi
    assert lo <= b.active <= hi
    assert b.active >= a.active


tick = st.tuples(st.floats(1.0, 40.0), st.floats(0.0, 1000.0))


@settings(max_examples=150)
@given(
    policy=st.sampled_from([Hpa(), Keda(), Hpa(behavior=HpaBehavior(down_stabilization_s=120.0))]),
    curve=st.lists(tick, min_size=1, max_size=60),
)
def test_hpa_behavior_never_scales_down_within_the_window_of_a_higher_recommendation(
    policy: Hpa | Keda, curve: list[tuple[float, float]]
) -> None:
    d = Driver(policy, desired=3, max_=60)
    now = 0.0
    recs: list[tuple[float, int]] = []
    for dt, load in curve:
        now += dt
        before = d.desired
        dec = d.tick(now, load, load / 2)
        if dec.recommendation is None:
            continue
        if not recs:
            recs.append((now, before))  # the first sync stores the starting size
        if dec.direction is Direction.DOWN:
            window = policy.behavior.down_stabilization_s
            recent = [r for t, r in recs if t > now - window]
            assert dec.active == max([dec.recommendation, *recent]) or dec.active == d.min_
            assert dec.active < before
        recs.append((now, dec.recommendation))


@settings(max_examples=150)
@given(curve=st.lists(tick, min_size=1, max_size=80))
def test_kpa_never_scales_down_while_panicking(curve: list[tuple[float, float]]) -> None:
    d = Driver(Kpa(target_concurrency=8.0), desired=2, max_=500)
    now = 0.0
    for dt, load in curve:
        now += min(dt, 4.0)
        before = d.desired
        dec = d.tick(now, load)
        if dec.panic:
            assert dec.active >= before
        assert 1 <= dec.active <= 500


# --- Scheduled: a size per hour of the day -----------------------------------------------


def _sched_ctx(now: float, desired: int) -> Context:
    return Context(
        now=now,
        autoscaling=NO_OBJECTIVES,
        replicas=ReplicasConfig(1, 10, 0, desired),
        counts=ReplicaCounts(desired, 0, 0, 0),
        signals=Signals(),
    )


def test_scheduled_takes_the_hours_size_in_early_by_the_lead_and_out_late() -> None:
    sch = Scheduled((2, 6, 3), slot_s=100.0, lead_s=20.0)
    # slot 0 (2), the lead reaches slot 1 (6) from t=80
    d, _ = sch(_sched_ctx(10.0, 2))
    assert (d.active, d.direction) == (2, Direction.HOLD)
    up, _ = sch(_sched_ctx(85.0, 2))
    assert (up.active, up.cause) == (6, Cause.SCALE_UP)
    assert "scheduled: slot 0 wants 6" in up.reason
    # slot 1 until 200; from 180 the next slot (3) is looked at, max(6, 3) = 6
    assert sch(_sched_ctx(185.0, 6))[0].active == 6
    down, _ = sch(_sched_ctx(205.0, 6))
    assert (down.active, down.cause) == (3, Cause.SCALE_DOWN)
    # the day repeats, and the bounds apply
    assert sch(_sched_ctx(310.0, 3))[0].active == 2
    assert Scheduled((50,), slot_s=100.0)(_sched_ctx(0.0, 3))[0].active == 10


def test_scheduled_refuses_an_empty_schedule() -> None:
    with pytest.raises(ValueError, match="sizes"):
        Scheduled(())
