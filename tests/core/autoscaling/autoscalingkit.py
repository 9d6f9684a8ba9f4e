"""Helpers for autoscaling policy tests: configs, signal snapshots, a tick driver."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from preheat.core.autoscaling import (
    Context,
    Decision,
    Demand,
    Mix,
    PolicyState,
    PolicyTuning,
    ReplicaCounts,
    Signals,
    SignalValue,
    decide,
)
from preheat.core.pool import (
    AutoscalingConfig,
    Objective,
    PanicConfig,
    ReplicasConfig,
    ScaleRule,
    Signal,
)

TTFT95 = Objective(Signal.TTFT, 95.0, 400.0)
#: the Azure conv trace's request mix (prompt and output means), for the capacity estimate
AZURE_MIX = Mix(requests=100, prompt_tokens=1155, cached_tokens=0, output_tokens=211)


def config(
    *,
    objectives: tuple[Objective, ...] = (TTFT95,),
    up: tuple[float, float, int] = (0.0, 15.0, 4),  # stabilization, cooldown, max step
    down: tuple[float, float, int] = (300.0, 120.0, 1),
    tolerance: float = 0.1,
    panic: tuple[bool, float, float] = (False, 2.0, 10.0),
    window_s: float = 60.0,
) -> AutoscalingConfig:
    return AutoscalingConfig(
        objectives=objectives,
        window_s=window_s,
        scale_up=ScaleRule(*up),
        scale_down=ScaleRule(*down),
        tolerance=tolerance,
        panic=PanicConfig(*panic),
    )


def signals(
    now: float,
    ttft: float | None = 400.0,
    *,
    queue: float | None = None,
    kv: float | None = None,
    concurrency: float | None = None,
    short: float | None = None,
    requests: float = 100.0,
    in_flight: float = 1.0,
    stale: bool = False,
    observed_at: float | None = None,
) -> Signals:
    at = now if observed_at is None else observed_at
    vals = [SignalValue(Signal.TTFT, 95.0, ttft, at, short_value=short, samples=requests)]
    if queue is not None:
        vals.append(SignalValue(Signal.QUEUE_DEPTH, 0.0, queue, at))
    if kv is not None:
        vals.append(SignalValue(Signal.KV_CACHE_USAGE, 0.0, kv, at))
    if concurrency is not None:
        vals.append(SignalValue(Signal.CONCURRENCY, 0.0, concurrency, at))
    return Signals(
        values=tuple(vals),
        observed_at=at,
        stale=stale,
        requests=requests,
        in_flight=in_flight,
        error="connection refused" if stale else "",
    )


def ctx(
    now: float,
    sig: Signals,
    *,
    desired: int = 3,
    active: int | None = None,
    standby: int = 0,
    warming: int = 0,
    min_: int = 1,
    max_: int = 10,
    warm_standby: int = 0,
    cfg: AutoscalingConfig | None = None,
    state: PolicyState | None = None,
    tuning: PolicyTuning | None = None,
) -> Context:
    return Context(
        now=now,
        autoscaling=cfg if cfg is not None else config(),
        replicas=ReplicasConfig(min_, max_, warm_standby, desired),
        counts=ReplicaCounts(active if active is not None else desired, standby, warming, 0),
        signals=sig,
        state=state if state is not None else PolicyState(),
        tuning=tuning if tuning is not None else PolicyTuning(),
    )


@dataclass
class Driver:
    """Runs ticks: every decision is applied at once (pods become active immediately
    unless ``warm_delay`` ticks), the state carried over."""

    cfg: AutoscalingConfig = field(default_factory=config)
    desired: int = 3
    min_: int = 1
    max_: int = 10
    warm_standby: int = 0
    tuning: PolicyTuning = field(default_factory=PolicyTuning)
    state: PolicyState = field(default_factory=PolicyState)
    decisions: list[tuple[float, Decision]] = field(default_factory=list)

    def tick(self, now: float, sig: Signals, **counts: Any) -> Decision:
        c = ctx(
            now,
            sig,
            desired=self.desired,
            min_=self.min_,
            max_=self.max_,
            warm_standby=self.warm_standby,
            cfg=self.cfg,
            state=self.state,
            tuning=self.tuning,
            **counts,
        )
        before = c
        decision, self.state = decide(c)
        assert c == before  # inputs are never mutated (frozen anyway)
        self.desired = decision.active
        self.decisions.append((now, decision))
        return decision

    def run(self, ticks: Sequence[tuple[float, float | None]]) -> list[Decision]:
        return [self.tick(t, signals(t, v)) for t, v in ticks]


def with_state(c: Context, **kw: Any) -> Context:
    return replace(c, state=replace(c.state, **kw))


def at_rate(now: float, rate: float, mix: Mix = AZURE_MIX) -> Signals:
    """A snapshot that meets its TTFT target (100 ms) with the routers' figures: ``rate``
    req/s arriving over a 30-s window, of ``mix`` (what the capacity estimate and the
    forecast read)."""
    return replace(
        signals(now, 100.0),
        demand=Demand(arrival_rate=rate, refused_rate=0.0, window_s=30.0),
        mix=mix,
    )
