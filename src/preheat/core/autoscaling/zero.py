"""Step 5: scale-to-zero (only with ``min: 0``) and the wake signal.

Idle = the source is fresh and saw no request over the window and none in flight (a
request the router refused was seen). After ``scale_to_zero_delay_s`` of continuous
idleness the lower bound drops from 1 to 0. At zero, any request seen (arrived, held or
refused by the router) wakes the pool.
"""

from __future__ import annotations

from preheat.core.autoscaling.types import Signals


def _arrived(signals: Signals) -> float:
    d = signals.demand
    return 0.0 if d is None else max(d.arrival_rate, d.refused_rate)


def is_idle(signals: Signals) -> bool:
    return (
        _arrived(signals) <= 0.0
        and (signals.requests or 0.0) <= 0.0
        and (signals.in_flight or 0.0) <= 0.0
        and (signals.requests is not None or signals.in_flight is not None)
    )


def has_demand(signals: Signals) -> bool:
    return (
        (signals.requests or 0.0) > 0.0
        or (signals.in_flight or 0.0) > 0.0
        or _arrived(signals) > 0.0
    )


def idle_since(previous: float | None, now: float, signals: Signals) -> float | None:
    if not is_idle(signals):
        return None
    return previous if previous is not None else now


def lower_bound(min_replicas: int, idle_from: float | None, now: float, delay_s: float) -> int:
    """The lowest active count allowed now: ``min``, or 1 with ``min: 0`` until idle for
    the delay."""
    if min_replicas > 0:
        return min_replicas
    if idle_from is not None and now - idle_from >= delay_s:
        return 0
    return 1
