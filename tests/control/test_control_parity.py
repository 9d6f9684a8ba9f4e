"""The three drivers of ``core.control.step`` agree: the same pool, pods and signals, seen
through the operator's, ``preheat up``'s and the simulator's adapters, give the same
decision, the same role plan and the same replica target (the operator's Deployment
``replicas``). The operator sees no per-pod load or cache, so the table holds them at zero.

See docs/proposals/0010-pool-at-zero.md for the row at zero with ``warmStandby: 1``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, replace
from typing import Any

import pytest

from preheat.api.pool import to_config
from preheat.core.autoscaling import Decision, PolicyTuning, Signals, SignalValue
from preheat.core.control import ControlState, RolePlan, step
from preheat.core.manifests import LABEL_ROLE, BuildOptions, Owner, build_deployment
from preheat.core.pool import PoolConfig, Signal
from preheat.local import workers as local_workers
from preheat.operator.observe import observation, role_plan
from preheat.simulate.options import SimOptions
from preheat.simulate.world import _Pod, _World

NOW = 1000.0
T0 = 1_700_000_000  # creation times, whole seconds (a creationTimestamp has no fraction)


@dataclass(frozen=True)
class Pod:
    name: str
    state: str  # active | standby | warming | draining
    created: int  # seconds after T0


@dataclass(frozen=True)
class Row:
    replicas: dict[str, int]  # the spec's replicas (desired: the target it converges to)
    pods: tuple[Pod, ...]
    ttft_ms: float | None = None  # an evaluation with this TTFT p95 (None: roles only)
    decided: int | None = None  # the loop's last decision (a kubectl scale differs from it)


def spec(replicas: dict[str, int]) -> dict[str, Any]:
    return {
        "model": {"name": "m"},
        "engine": {"kind": "sim"},
        "replicas": replicas,
        "autoscaling": {
            "objectives": [{"signal": "ttft", "percentile": 95, "targetMs": 500}],
            "scaleUp": {"cooldown": "0s", "maxStep": 4},
        },
    }


def signals(ttft_ms: float | None) -> Signals | None:
    if ttft_ms is None:
        return None
    v = SignalValue(Signal.TTFT, 95.0, ttft_ms, NOW, samples=100.0)
    return Signals(values=(v,), observed_at=NOW, stale=False, requests=100.0, in_flight=4.0)


# --- the three adapters -----------------------------------------------------------------


def operator_pod(p: Pod) -> dict[str, Any]:
    stamp = datetime.datetime.fromtimestamp(T0 + p.created, datetime.UTC)
    role = {"warming": "standby"}.get(p.state, p.state)  # the template's label
    ready = p.state in ("active", "standby")
    return {
        "metadata": {
            "name": p.name,
            "namespace": "ns",
            "labels": {LABEL_ROLE: role},
            "creationTimestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def via_operator(config: PoolConfig, row: Row) -> tuple[Decision | None, RolePlan, int]:
    pods = [operator_pod(p) for p in row.pods]
    obs = observation(config, pods, now=NOW, signals=signals(row.ttft_ms))
    decision, plan, _ = step(obs, ControlState(decided=row.decided), tuning=PolicyTuning())
    if decision is None:
        assert plan == role_plan(config, pods)  # what the reconcile carries out
    target = plan.active
    deployment = build_deployment(config, Owner("p", "uid"), BuildOptions(), active=target)
    return decision, plan, int(deployment["spec"]["replicas"])


def via_local(config: PoolConfig, row: Row) -> tuple[Decision | None, RolePlan, int]:
    state = {"warming": local_workers.WARMING, "draining": local_workers.DRAINING}
    workers = [
        local_workers.WorkerView(
            p.name, state.get(p.state, p.state), started_at=float(T0 + p.created)
        )
        for p in row.pods
    ]
    desired = config.replicas.desired
    obs = local_workers.observe(NOW, config, desired, workers, signals(row.ttft_ms))
    decision, plan, _ = step(obs, ControlState(decided=row.decided), tuning=PolicyTuning())
    actions = local_workers.actions(workers, plan)
    running = sum(1 for w in workers if w.bucket != "draining") - len(actions.drain)
    return decision, plan, running + actions.start


def via_simulator(config: PoolConfig, row: Row) -> tuple[Decision | None, RolePlan, int]:
    world = _World(config, [], SimOptions())
    for i, p in enumerate(row.pods):
        state = {"warming": "starting"}.get(p.state, p.state)
        pod = _Pod(p.name, i, "zone-a", "region", float(T0 + p.created), state=state)
        pod.warm = p.state in ("active", "standby")
        world.pods[p.name] = pod
        world.pod_order.append(pod)
    world.now, world.desired = NOW, config.replicas.desired
    obs = world.observe(signals(row.ttft_ms))
    decision, plan, _ = step(obs, ControlState(decided=row.decided), tuning=PolicyTuning())
    live = [p for p in world.pod_order if p.state not in ("draining", "stopped")]
    return decision, plan, len(live) - len(plan.victims) + plan.new_pods


# --- the table --------------------------------------------------------------------------

ROWS = {
    "scale up from 1 with a standby": Row(
        {"min": 1, "max": 4, "warmStandby": 1, "desired": 1},
        (Pod("w-1", "active", 1), Pod("w-2", "standby", 2)),
        ttft_ms=1500.0,
    ),
    "roles after a scale-up to 3, one pod still warming": Row(
        {"min": 1, "max": 4, "warmStandby": 1, "desired": 3},
        (Pod("w-1", "active", 1), Pod("w-2", "standby", 2), Pod("w-3", "warming", 3)),
    ),
    "scale down with a draining victim": Row(
        {"min": 1, "max": 4, "warmStandby": 1, "desired": 1},
        (
            Pod("w-1", "active", 1),
            Pod("w-2", "active", 2),
            Pod("w-3", "active", 3),
            Pod("w-4", "draining", 4),
        ),
    ),
    "zero with warmStandby: 1": Row(
        {"min": 0, "max": 4, "warmStandby": 1, "desired": 0},
        (Pod("w-1", "standby", 1),),
    ),
    "zero with warmStandby: 1, idle evaluation": Row(
        {"min": 0, "max": 4, "warmStandby": 1, "desired": 0},
        (Pod("w-1", "standby", 1),),
        ttft_ms=None,
    ),
    "desired set by kubectl scale": Row(
        {"min": 1, "max": 4, "warmStandby": 1, "desired": 3},
        (Pod("w-1", "active", 1), Pod("w-2", "standby", 2)),
        ttft_ms=500.0,
        decided=1,
    ),
}

EXPECTED: dict[str, tuple[int | None, int, int, tuple[str, ...], int]] = {
    # row -> (decided active, plan active, plan standby, victims, replicas)
    "scale up from 1 with a standby": (3, 3, 1, (), 4),
    "roles after a scale-up to 3, one pod still warming": (None, 3, 1, (), 4),
    "scale down with a draining victim": (None, 1, 1, ("w-3",), 2),
    "zero with warmStandby: 1": (None, 0, 0, ("w-1",), 0),
    "zero with warmStandby: 1, idle evaluation": (None, 0, 0, ("w-1",), 0),
    "desired set by kubectl scale": (3, 3, 1, (), 4),
}


@pytest.mark.parametrize("name", list(ROWS))
def test_the_three_drivers_agree(name: str) -> None:
    row = ROWS[name]
    config = to_config(spec(row.replicas), name="p", namespace="ns")
    results = {
        "operator": via_operator(config, row),
        "preheat up": via_local(config, row),
        "simulator": via_simulator(config, row),
    }
    decision, plan, replicas = results["operator"]
    for driver, got in results.items():
        assert got == (decision, plan, replicas), f"{driver} differs from the operator"
    want_decided, want_active, want_standby, want_victims, want_replicas = EXPECTED[name]
    assert (decision.active if decision else None) == want_decided
    assert (plan.active, plan.standby, plan.victims, replicas) == (
        want_active,
        want_standby,
        want_victims,
        want_replicas,
    )
    assert plan.replicas == replicas


def test_scale_up_promotes_the_standby_and_starts_behind_it() -> None:
    row = ROWS["scale up from 1 with a standby"]
    config = to_config(spec(row.replicas), name="p", namespace="ns")
    _, plan, _ = via_operator(config, row)
    assert ("w-2", "active") in plan.changes
    assert plan.new_pods == 2


def test_scale_down_demotes_the_older_and_drains_the_newer() -> None:
    row = ROWS["scale down with a draining victim"]
    config = to_config(spec(row.replicas), name="p", namespace="ns")
    _, plan, _ = via_simulator(config, row)
    assert plan.changes == (("w-2", "standby"),)
    assert "w-4" not in dict(plan.roles)  # already leaving: neither counted nor kept


def test_the_operator_reconciles_a_pool_at_zero_to_no_pod() -> None:
    """The operator used to keep ``warmStandby`` pods at zero (the simulator and ``preheat
    up`` did not): a standby GPU for a pool that serves nothing."""
    config = to_config(spec({"min": 0, "max": 4, "warmStandby": 1}), name="p", namespace="ns")
    assert config.replicas.desired == 0
    deployment = build_deployment(config, Owner("p", "uid"), BuildOptions())
    assert deployment["spec"]["replicas"] == 0
    awake = replace(config, replicas=replace(config.replicas, desired=1))
    assert build_deployment(awake, Owner("p", "uid"), BuildOptions())["spec"]["replicas"] == 2
