"""The local pool's adapter to the control loop: ``core.control.step`` on local workers (pure)."""

from __future__ import annotations

import pytest

from preheat.api.poolfile import parse_pool
from preheat.core.autoscaling import (
    Cause,
    Direction,
    PolicyTuning,
    Signals,
    SignalValue,
)
from preheat.core.control import ControlState, assign_roles, step
from preheat.core.pool import Signal
from preheat.local import workers as local_workers
from preheat.local.workers import WorkerView


def w(name: str, state: str, *, leaving: bool = False, in_flight: int = 0, t: float = 0.0):
    return WorkerView(name=name, state=state, leaving=leaving, in_flight=in_flight, started_at=t)


CASES = [
    # (workers, active, standby) -> (promote, demote, drain, start)
    pytest.param([], 1, 1, ((), (), (), 2), id="empty pool starts active+standby"),
    pytest.param(
        [w("w-1", "starting"), w("w-2", "loading")], 1, 1, ((), (), (), 0), id="cold: wait"
    ),
    pytest.param(
        [w("w-1", "standby", t=1), w("w-2", "standby", t=2)],
        1,
        1,
        (("w-1",), (), (), 0),
        id="warm standbys: one promoted",
    ),
    pytest.param(
        [w("w-1", "active"), w("w-2", "standby")],
        3,
        1,
        (("w-2",), (), (), 2),
        id="scale up: standby promoted first, two started behind it",
    ),
    pytest.param(
        [w("w-1", "active", t=1), w("w-2", "active", t=2), w("w-3", "standby", t=3)],
        1,
        1,
        ((), ("w-2",), ("w-3",), 0),
        id="scale down: the cheapest removed, an active demoted",
    ),
    pytest.param(
        [
            w("w-1", "active", in_flight=2, t=1),
            w("w-2", "active", in_flight=1, t=2),
            w("w-3", "active", in_flight=3, t=3),
        ],
        1,
        0,
        ((), ("w-2", "w-3"), (), 0),
        id="busy workers are not drained (demoted instead, retried later)",
    ),
    pytest.param(
        [w("w-1", "active"), w("w-2", "standby", leaving=True), w("w-3", "draining")],
        1,
        1,
        ((), (), (), 1),
        id="leaving workers do not count",
    ),
    pytest.param(
        [w("w-1", "active"), w("w-2", "warming")],
        2,
        0,
        ((), (), (), 0),
        id="a warming worker fills the slot: nothing promoted or started",
    ),
]


@pytest.mark.parametrize(("workers", "active", "standby", "want"), CASES)
def test_actions(workers, active, standby, want):
    got = local_workers.actions(workers, assign_roles([x.pod() for x in workers], active, standby))
    assert (got.promote, got.demote, got.drain, got.start) == want


def test_counts_by_bucket():
    views = [
        w("a", "active"),
        w("b", "standby"),
        w("c", "starting"),
        w("d", "unreachable"),
        w("e", "active", leaving=True),
        w("f", "draining"),
    ]
    c = local_workers.counts(views)
    assert (c.active, c.standby, c.warming, c.draining) == (1, 1, 2, 2)
    assert c.cold_start_s is None  # no worker seen going warm


def test_the_measured_cold_start_is_the_median_of_the_workers_seen_going_warm():
    views = [
        local_workers.WorkerView("a", "active", ready_after=20.0),
        local_workers.WorkerView("b", "standby", ready_after=12.0),
        local_workers.WorkerView("c", "active", ready_after=90.0),  # one slow start
        local_workers.WorkerView("d", "active"),  # warm before the runtime saw it start
        local_workers.WorkerView("e", "starting"),
    ]
    assert views[0].pod().ready_after == 20.0
    assert local_workers.counts(views).cold_start_s == 20.0


POOL = {
    "apiVersion": "preheat.dev/v1alpha1",
    "kind": "InferencePool",
    "metadata": {"name": "t"},
    "spec": {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": {"min": 1, "max": 4, "warmStandby": 1},
        "autoscaling": {
            "objectives": [{"signal": "ttft", "percentile": 95, "targetMs": 500}],
            "window": "10s",
            "scaleUp": {"cooldown": "0s", "maxStep": 2},
            "scaleDown": {"stabilization": "0s", "cooldown": "0s"},
        },
    },
}


def _signals(value: float | None, now: float, *, stale: bool = False) -> Signals:
    v = SignalValue(Signal.TTFT, 95.0, value, now, stale=stale, samples=10)
    return Signals(values=(v,), observed_at=now, stale=stale, requests=10)


def _decide(value: float | None, desired: int, *, stale: bool = False):
    config = parse_pool(POOL, "t.yaml").config
    now = 100.0
    workers = [w("w-1", "active"), w("w-2", "standby")][: desired + 1]
    obs = local_workers.observe(now, config, desired, workers, _signals(value, now, stale=stale))
    decision, _, state = step(obs, ControlState(), tuning=PolicyTuning())
    assert decision is not None
    return decision, state.policy


def test_autoscale_over_target_scales_up_with_a_reason():
    decision, state = _decide(1500.0, 1)
    assert decision.direction is Direction.UP
    assert decision.active == 3  # 3x over target, capped by maxStep 2
    assert "ttft p95" in decision.reason
    assert state.last_scale_at == 100.0


def test_autoscale_under_target_scales_down():
    decision, _ = _decide(100.0, 3)
    assert decision.direction is Direction.DOWN
    assert decision.active < 3


def test_autoscale_stale_metrics_hold():
    decision, _ = _decide(1500.0, 1, stale=True)
    assert decision.cause is Cause.STALE
    assert decision.active == 1


def test_scale_down_takes_the_worker_whose_sessions_and_cache_cost_least() -> None:
    """What the workers' Status says (sessions, cached blocks) reaches the victim choice
    (operator issue, item 4: every warm worker used to cost the same)."""
    from preheat.core.control.roles import choose_victims

    older_busy = WorkerView(
        "w-0", local_workers.ACTIVE, sessions=3, cached_blocks=40, started_at=1.0
    )
    newer_idle = WorkerView(
        "w-1", local_workers.ACTIVE, sessions=0, cached_blocks=2, started_at=2.0
    )
    newer_cached = WorkerView(
        "w-2", local_workers.ACTIVE, sessions=0, cached_blocks=90, started_at=3.0
    )
    views = [older_busy.pod(), newer_idle.pod(), newer_cached.pod()]
    assert choose_victims(views, 1) == ("w-1",)
    assert choose_victims(views, 2) == ("w-1", "w-2")
