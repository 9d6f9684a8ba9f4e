"""The autoscaler daemon in the real operator, against kmock, with a fake metric source.

The source is injected through the operator's options (``OperatorOptions.autoscaler``,
passed to the handlers in ``memo``): a factory returning :class:`FakeSource`, whose answer
the test sets.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kmockkit import (
    NAMESPACE,
    PODS,
    POOLS,
    OperatorProcess,
    PreheatKube,
    add_pods,
    condition,
    create_pool,
    events,
    eventually,
    get,
    kube_fixture,  # noqa: F401
    no_leaked_tasks_fixture,  # noqa: F401
    patch_pool,
    set_ready,
)

from preheat.autoscaler.source import SignalQuery
from preheat.core.autoscaling import Demand, Signals, SignalValue
from preheat.core.pool import Signal
from preheat.operator.options import AutoscalerOptions

NAME = "sim-auto"


class FakeSource:
    """Answers TTFT p95 = ``ttft_ms`` observed now, or stale when ``stale`` is set."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttft_ms = 100.0
        self.arrival_rate: float | None = None  # the routers' arrival rate (None: none)
        self.stale = False
        self.reads = 0
        self.closed = False
        self.clock = clock

    async def read(self, query: SignalQuery) -> Signals:
        self.reads += 1
        now = self.clock()
        if self.stale:
            return Signals(observed_at=None, stale=True, error="scrape failed: connection refused")
        values = tuple(
            SignalValue(o.signal, o.percentile, self.ttft_ms, now, samples=100.0)
            for o in query.objectives
            if o.signal is Signal.TTFT
        )
        demand = None if self.arrival_rate is None else Demand(self.arrival_rate, 0.0, 60.0)
        return Signals(values=values, observed_at=now, stale=False, requests=100.0,
                       in_flight=4.0, demand=demand)  # fmt: skip

    async def close(self) -> None:
        self.closed = True


@pytest.fixture(name="source")
def source_fixture() -> FakeSource:
    return FakeSource()


@pytest.fixture(name="operator")
async def operator_fixture(kube: PreheatKube, source: FakeSource) -> AsyncIterator[OperatorProcess]:
    options = AutoscalerOptions(interval_s=0.2, source_factory=lambda _target: source)
    op = OperatorProcess(autoscaler=options)
    try:
        await op.start()
        yield op
    finally:
        await op.stop()


def pool(**autoscaling_spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "preheat.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {
            "model": {"name": "sim-tiny"},
            "engine": {"kind": "sim"},
            "replicas": {"min": 1, "max": 4},
            "autoscaling": {
                "objectives": [{"signal": "ttft", "percentile": 95, "targetMs": 400}],
                **autoscaling_spec,
            },
        },
    }


def desired(kube: PreheatKube) -> Any:
    return (
        ((get(kube, POOLS, NAMESPACE, NAME) or {}).get("spec") or {})
        .get("replicas", {})
        .get("desired")
    )


def status(kube: PreheatKube) -> dict[str, Any]:
    return dict((get(kube, POOLS, NAMESPACE, NAME) or {}).get("status") or {})


def reasons(kube: PreheatKube) -> list[str]:
    return [e["reason"] for e in events(kube, NAMESPACE, NAME)]


async def test_high_ttft_scales_up_with_reason_event_and_condition(
    kube: PreheatKube, operator: OperatorProcess, source: FakeSource
) -> None:
    await create_pool(kube, pool())
    await add_pods(kube, NAMESPACE, NAME, 1, ready=True)
    # Under target: the pool holds at min, and says why.
    await eventually(lambda: condition(get(kube, POOLS, NAMESPACE, NAME), "Autoscaling"))
    assert desired(kube) is None
    cond = condition(get(kube, POOLS, NAMESPACE, NAME), "Autoscaling")
    assert cond["status"] == "True", cond
    assert "ttft_p95 100/400" in cond["message"], cond

    source.ttft_ms = 1200.0  # 3x the target: 1 -> 3 active
    await eventually(lambda: desired(kube) == 3)
    last = await eventually(lambda: status(kube).get("lastScale"))
    assert (last["from"], last["to"]) == (1, 3)
    assert "ttft p95 1200 ms > 400 ms" in last["reason"], last
    await eventually(lambda: "ScaledUp" in reasons(kube))
    scaled = [e for e in events(kube, NAMESPACE, NAME) if e["reason"] == "ScaledUp"]
    assert scaled[0]["type"] == "Normal"
    assert "1200 ms" in scaled[0]["message"]
    # The reconcile took it from there: the Deployment asks for 3 active pods.
    await eventually(lambda: status(kube).get("desiredReplicas") == 3)
    # The new pods are still to come (kmock has no controllers): warming credit, no
    # second scale-up for the same load, and the reconcile kept the autoscaler's condition.
    reads = source.reads
    await eventually(lambda: source.reads >= reads + 5)
    assert desired(kube) == 3
    assert reasons(kube).count("ScaledUp") == 1
    assert condition(get(kube, POOLS, NAMESPACE, NAME), "Autoscaling")
    assert condition(get(kube, POOLS, NAMESPACE, NAME), "Ready")


async def test_stale_metrics_hold_with_a_warning_and_a_condition(
    kube: PreheatKube, operator: OperatorProcess, source: FakeSource
) -> None:
    await create_pool(kube, pool())
    await add_pods(kube, NAMESPACE, NAME, 1, ready=True)
    source.stale = True
    cond = await eventually(
        lambda: (
            c
            if (c := condition(get(kube, POOLS, NAMESPACE, NAME), "Autoscaling")).get("reason")
            == "MetricsStale"
            else None
        )
    )
    assert cond["status"] == "False"
    assert "holding 1" in cond["message"], cond
    assert "connection refused" in cond["message"], cond
    await eventually(lambda: "MetricsStale" in reasons(kube))
    warning = [e for e in events(kube, NAMESPACE, NAME) if e["reason"] == "MetricsStale"]
    assert warning[0]["type"] == "Warning"
    reads = source.reads
    await eventually(lambda: source.reads >= reads + 5)
    assert desired(kube) is None  # held: never scaled on missing data
    assert reasons(kube).count("MetricsStale") == 1  # once, on entering the stale state

    source.stale = False
    await eventually(lambda: "MetricsAvailable" in reasons(kube))
    await eventually(
        lambda: condition(get(kube, POOLS, NAMESPACE, NAME), "Autoscaling").get("status") == "True"
    )


async def test_manual_scale_is_honoured_until_a_decision_changes_size(
    kube: PreheatKube, operator: OperatorProcess, source: FakeSource
) -> None:
    source.ttft_ms = 420.0  # within the 10% tolerance: the policy holds whatever it has
    await create_pool(kube, pool())
    await add_pods(kube, NAMESPACE, NAME, 1, ready=True)
    await eventually(lambda: condition(get(kube, POOLS, NAMESPACE, NAME), "Autoscaling"))
    # kubectl scale --replicas=2: the policy holds, so it stands.
    await patch_pool(kube, NAMESPACE, NAME, {"spec": {"replicas": {"desired": 2}}})
    reads = source.reads
    await eventually(lambda: source.reads >= reads + 5)
    assert desired(kube) == 2
    assert "ScaledDown" not in reasons(kube)
    source.ttft_ms = 1200.0  # a decision that changes size starts from the manual 2
    # From the manual 2 (1 pod serves: kmock has no controller to start the second).
    await eventually(lambda: (desired(kube) or 0) > 2)
    last = await eventually(lambda: status(kube).get("lastScale"))
    assert last["from"] == 2, last
    assert last["to"] == desired(kube), last


class JumpClock:
    """The real clocks plus an offset the test moves forward (time passing at once)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    def wall(self) -> float:
        return time.time() + self.offset


async def test_the_scale_down_window_survives_an_operator_restart(
    kube: PreheatKube, no_leaked_tasks: None
) -> None:
    """Spike, lull, restart. The new operator goes on from the window the pool's status
    kept: it scales down when the spike's recommendations leave the 100 s window, not 100 s
    after its own start (what it did when the history was only in memory). The arrival-rate
    forecast goes on too (its season needs a whole day of history), and so does the pool's
    measured cold start (the forecast's horizon) after the pod that measured it is gone."""
    clock = JumpClock()
    source = FakeSource(clock.monotonic)
    options = AutoscalerOptions(interval_s=0.2, source_factory=lambda _target: source,
                                clock=clock.monotonic, wall_clock=clock.wall)  # fmt: skip
    spec = pool(scaleDown={"stabilization": "100s", "cooldown": "0s"})
    await create_pool(kube, spec)
    [measured] = await add_pods(kube, NAMESPACE, NAME, 1, ready=True)
    await _ready_after(kube, measured, 240.0)  # created to Ready: a 240-s cold start
    source.arrival_rate = 12.0
    first = await OperatorProcess(autoscaler=options).start()
    try:
        source.ttft_ms = 800.0  # 2x the target: 1 -> 2
        await eventually(lambda: desired(kube) == 2)
        source.ttft_ms = 100.0  # the lull: the window holds 2
        await eventually(lambda: "stabilizing (down" in autoscaling_message(kube))
        clock.offset += 70.0  # 70 s into the window
        reads = source.reads
        await eventually(lambda: source.reads >= reads + 3)
        assert desired(kube) == 2
    finally:
        await first.stop()
    kept = status(kube)["policyHistory"]
    assert [r["replicas"] for r in kept["recommendations"]][-2:] == [2, 1], kept
    assert kept["lastScaleDirection"] == "up"
    learned = kept["forecast"]
    assert learned["level"] == pytest.approx(12.0)
    assert learned["periodSeconds"] == 86_400.0
    assert kept["coldStartSeconds"] == 240.0
    # the measurement gone: the pod's Ready condition now has no transition time, as a pod
    # whose start no one saw (what the restarted operator finds when the pods have left)
    await set_ready(kube, NAMESPACE, [measured])
    assert get(kube, PODS, NAMESPACE, measured)["status"]["conditions"] == [
        {"type": "Ready", "status": "True"}
    ]

    second = await OperatorProcess(autoscaler=options).start()
    try:
        reads = source.reads
        await eventually(lambda: source.reads >= reads + 3)
        assert desired(kube) == 2  # 20-odd s of the window left: still held
        # the forecast went on from the one kept (a fresh one would start its history now)
        assert status(kube)["policyHistory"]["forecast"]["since"] == learned["since"]
        assert status(kube)["policyHistory"]["forecast"]["time"] > learned["time"]
        assert status(kube)["policyHistory"]["coldStartSeconds"] == 240.0
        assert "window began at start-up" not in autoscaling_message(kube)
        clock.offset += 35.0  # the spike is out of the window; the new process is 35 s old
        await eventually(lambda: desired(kube) == 1)
        await eventually(lambda: status(kube)["lastScale"]["to"] == 1)
        assert status(kube)["lastScale"]["from"] == 2
        assert "stabilizing" not in status(kube)["lastScale"]["reason"]
    finally:
        await second.stop()


@pytest.mark.parametrize("age_s", [0.0, 400.0])
async def test_a_pool_without_policy_history_holds_its_size_at_start_up(
    kube: PreheatKube, no_leaked_tasks: None, age_s: float
) -> None:
    """No status.policyHistory: a new pool (created just now) and an older one (an
    operator that lost the history) alike hold their size for a scale-down window
    (proposal 0007, revised twice)."""
    clock = JumpClock()
    clock.offset = age_s  # the pool was created age_s before the operator's "now"
    source = FakeSource(clock.monotonic)
    options = AutoscalerOptions(interval_s=0.2, source_factory=lambda _target: source,
                                clock=clock.monotonic, wall_clock=clock.wall)  # fmt: skip
    spec = pool()
    spec["spec"]["replicas"]["desired"] = 3
    await create_pool(kube, spec)
    await add_pods(kube, NAMESPACE, NAME, 3, ready=True)
    op = await OperatorProcess(autoscaler=options).start()
    try:
        await eventually(lambda: "window began at start-up" in autoscaling_message(kube))
        reads = source.reads
        await eventually(lambda: source.reads >= reads + 3)
        assert desired(kube) == 3  # 100 ms vs 400 asks for fewer: held
        clock.offset += 301.0  # a whole window later: 3 -> 2 (max step 1)
        await eventually(lambda: desired(kube) == 2)
    finally:
        await op.stop()


async def _ready_after(kube: PreheatKube, pod: str, seconds: float) -> None:
    """Marks ``pod`` Ready ``seconds`` after its creation (its measured cold start)."""
    created = get(kube, PODS, NAMESPACE, pod)["metadata"]["creationTimestamp"]
    at = datetime.datetime.fromisoformat(created.replace("Z", "+00:00"))
    since = (at + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    await set_ready(kube, NAMESPACE, [pod], since=since)


def autoscaling_message(kube: PreheatKube) -> str:
    return str(condition(get(kube, POOLS, NAMESPACE, NAME), "Autoscaling").get("message", ""))


def test_prometheus_options_from_the_environment_fill_the_pool_in() -> None:
    from preheat.autoscaler.prometheus import PrometheusSource
    from preheat.operator.options import PoolTarget

    options = AutoscalerOptions.from_env(
        {
            "PREHEAT_PROMETHEUS_URL": "http://prometheus:9090",
            "PREHEAT_PROMETHEUS_ROUTER_SELECTOR": 'job="preheat-router",pool="{pool}"',
        }
    )
    source = options.source_for(PoolTarget("serving", "llama", lambda: ()))
    assert isinstance(source, PrometheusSource)
    assert source.selector == 'namespace="serving",service="llama-workers"'
    assert source.router_selector == 'job="preheat-router",pool="llama"'
    assert AutoscalerOptions.from_env({}).prometheus_router_selector == ""


def test_the_wall_clock_offset_is_kept_through_read_jitter_and_follows_a_step() -> None:
    """Each evaluation read the policy's clock and the wall clock one after the other, so
    their difference was off by the gap between the reads, and every remembered time moved
    by it: a forecast's ``since`` came back 2 ms off after a restart (the fresh-clock CI run
    of 2026-12-02). One offset is kept per process; a step past a second is taken up."""
    from prometheus_client import CollectorRegistry

    from preheat.operator.autoscaling import WALL_STEP_S, Autoscaler
    from preheat.operator.metrics import AutoscalerMetrics

    walls = iter([1_000.0, 1_010.002, 1_020.0015, 1_030.0 + 2 * WALL_STEP_S])
    auto = Autoscaler(
        AutoscalerOptions(wall_clock=lambda: next(walls)), AutoscalerMetrics(CollectorRegistry())
    )
    assert auto._wall(30.0) == 1_000.0
    assert auto._wall(40.0) == 1_010.0  # read 2 ms late: the kept offset, not the gap
    assert auto._wall(50.0) == 1_020.0
    assert auto._wall(60.0) == 1_030.0 + 2 * WALL_STEP_S  # the wall clock stepped: taken up
