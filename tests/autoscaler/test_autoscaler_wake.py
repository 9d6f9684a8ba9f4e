"""Scale from zero through Prometheus: with no worker series, requests held at the router
(its queue-depth gauge) make a fresh answer that wakes the pool; without them the source is
stale and the policy holds at zero. Prometheus is a fake client here (canned answers)."""

from __future__ import annotations

import asyncio
from typing import Any

from preheat.autoscaler.prometheus import PrometheusSource, queries
from preheat.autoscaler.source import SignalQuery
from preheat.core.autoscaling import Context, Direction, ReplicaCounts, decide
from preheat.core.pool import (
    AutoscalingConfig,
    Objective,
    PanicConfig,
    ReplicasConfig,
    ScaleRule,
    Signal,
)

OBJECTIVES = (Objective(Signal.TTFT, 95.0, 400.0),)
AUTOSCALING = AutoscalingConfig(
    objectives=OBJECTIVES,
    window_s=60.0,
    scale_up=ScaleRule(stabilization_s=0.0, cooldown_s=15.0, max_step=4),
    scale_down=ScaleRule(stabilization_s=300.0, cooldown_s=120.0, max_step=1),
    tolerance=0.1,
    panic=PanicConfig(enabled=False, threshold=3.0, window_s=10.0),
)
QUERY = SignalQuery(OBJECTIVES, window_s=60.0)
ROUTERS = 'job="preheat-router",pool="llama"'
NOW = 1000.0  # the policy's clock, and the source's: one clock, whatever the uptime


class FakePrometheus:
    """Answers only the router's queue depth; every worker query is empty (zero replicas)."""

    def __init__(self, held: float) -> None:
        self.held = held
        self.asked: list[str] = []

    def custom_query(self, query: str, params: Any = None, timeout: Any = None) -> Any:
        self.asked.append(query)
        if query.startswith("sum(preheat_router_queue_depth"):
            return [{"metric": {}, "value": [0, str(self.held)]}]
        return []

    def close(self) -> None:
        pass


def _decide(held: float) -> tuple[Any, Any]:
    fake = FakePrometheus(held)
    source = PrometheusSource(
        "http://prometheus.invalid",
        client=fake,  # type: ignore[arg-type]
        router_selector=ROUTERS,
        clock=lambda: NOW,
    )
    signals = asyncio.run(source.read(QUERY))
    ctx = Context(
        now=NOW,
        autoscaling=AUTOSCALING,
        replicas=ReplicasConfig(min=0, max=4, warm_standby=0, desired=0),
        counts=ReplicaCounts(),
        signals=signals,
    )
    decision, _ = decide(ctx)
    return signals, decision


def test_router_queue_query_only_when_a_router_selector_is_given() -> None:
    assert queries(QUERY, 'job="w"').router_queue == ""
    assert (
        queries(QUERY, 'job="w"', router_selector=ROUTERS).router_queue
        == 'sum(preheat_router_queue_depth{job="preheat-router",pool="llama"})'
    )


def test_requests_held_at_the_router_wake_a_pool_at_zero() -> None:
    signals, decision = _decide(held=3)
    assert not signals.stale
    assert signals.observed_at == NOW
    assert signals.in_flight == 3
    assert decision.wake
    assert decision.direction is Direction.UP
    assert decision.active >= 1


def test_nothing_held_at_zero_is_stale_and_holds() -> None:
    signals, decision = _decide(held=0)
    assert signals.stale
    assert "no worker series match" in signals.error
    assert decision.direction is Direction.HOLD
    assert decision.active == 0
