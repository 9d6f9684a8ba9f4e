"""Step 1: per objective, how many active replicas it needs (HPA's scale factor).

Latency and KV-cache usage: ``ceil(serving * observed / target)``, ``serving`` being the
active replicas that produced the observation; for latency the factor is bounded,
``min(observed / target, max_factor)`` (``PolicyTuning.max_latency_factor``, 3): a backlog
makes the observed percentile many times its target, and the pods that ratio asks for
arrive after the backlog has cleared (the pods already coming clear it; the policy counts
them, see :mod:`~.policy`). Queue depth and concurrency:
``ceil(count / target)`` (the target is per replica). Within the tolerance band
(``|observed/target - 1| <= tolerance``) an objective asks for no change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from preheat.core.autoscaling.types import SignalValue
from preheat.core.pool import Objective, Signal


@dataclass(frozen=True)
class ObjectiveView:
    objective: Objective
    value: float | None  # None: no traffic in the window (no constraint)
    ratio: float | None  # value / target
    replicas: int | None  # what it asks for; None: no constraint
    within_tolerance: bool


def _ceil(x: float) -> int:
    return math.ceil(round(x, 9))  # 3.0000000001 from float noise is 3, not 4


def describe(objective: Objective, value: float | None) -> str:
    """``ttft p95 612 ms``, ``queueDepth 12 waiting``, ``concurrency 96 in flight``,
    ``kvCacheUsage 0.91``."""
    s = objective.signal
    if s.is_latency:
        shown = "no requests" if value is None else f"{value:.0f} ms"
        return f"{s.value} p{objective.percentile:g} {shown}"
    if s is Signal.QUEUE_DEPTH:
        return f"queueDepth {'?' if value is None else f'{value:g}'} waiting"
    if s is Signal.CONCURRENCY:
        return f"concurrency {'?' if value is None else f'{value:g}'} in flight"
    return f"kvCacheUsage {'?' if value is None else f'{value:.2f}'}"


def describe_target(objective: Objective) -> str:
    s = objective.signal
    if s.is_latency:
        return f"{objective.target:g} ms"
    if s.is_per_replica:
        return f"{objective.target:g}/replica"
    return f"{objective.target:g}"


def ratio_of(objective: Objective, value: float | None, serving: int) -> float | None:
    """observed / target (queue depth, concurrency: per serving replica; at zero serving,
    any request is infinitely over target)."""
    if value is None or objective.target <= 0:
        return None
    if objective.signal.is_per_replica:
        if serving <= 0:
            return math.inf if value > 0 else 0.0
        return value / serving / objective.target
    return value / objective.target


def needed(
    objective: Objective, value: float | None, serving: int, max_factor: float = math.inf
) -> int | None:
    """Replicas the objective needs, ignoring tolerance; None: no constraint. A latency
    objective asks for at most ``max_factor`` times ``serving``."""
    if value is None or objective.target <= 0:
        return None
    if objective.signal.is_per_replica:
        return _ceil(value / objective.target)
    if serving <= 0:
        return None  # nothing serving: the latency cannot say how many
    factor = value / objective.target
    if objective.signal.is_latency:
        factor = min(factor, max_factor)
    return _ceil(serving * factor)


def view(
    objective: Objective,
    sv: SignalValue,
    serving: int,
    current: int,
    tolerance: float,
    max_factor: float = math.inf,
) -> ObjectiveView:
    ratio = ratio_of(objective, sv.value, serving)
    within = ratio is not None and not math.isinf(ratio) and abs(ratio - 1.0) <= tolerance
    replicas = current if within else needed(objective, sv.value, serving, max_factor)
    return ObjectiveView(objective, sv.value, ratio, replicas, within)


def combine(views: list[ObjectiveView]) -> tuple[int | None, ObjectiveView | None]:
    """The max over objectives and the objective that set it (None: none constrains)."""
    best: ObjectiveView | None = None
    for v in views:
        if v.replicas is None:
            continue
        if best is None or best.replicas is None or v.replicas > best.replicas:
            best = v
    return (best.replicas if best is not None else None), best
