"""Where the autoscaling policy's signals come from.

A :class:`MetricSource` answers one :class:`SignalQuery` (the pool's objectives and
windows) with a :class:`~preheat.core.autoscaling.Signals` snapshot: per objective the
windowed percentile (ms), the pool's waiting requests or KV-cache usage, when it was
observed and whether it is stale. Implementations: :class:`~.scrape.DirectScrapeSource`
(the workers' /metrics, for ``preheat up``) and
:class:`~.prometheus.PrometheusSource` (PromQL).
A source never raises for a failed read: it answers stale, with the error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from preheat.core.autoscaling import Demand, Mix, SignalQuery, Signals, SignalValue
from preheat.core.pool import Signal

__all__ = [
    "Demand",
    "MetricSource",
    "SignalQuery",
    "SignalValue",
    "Signals",
    "snapshot",
    "wake_signals",
    "wakes",
]


class MetricSource(Protocol):
    async def read(self, query: SignalQuery) -> Signals:
        """The pool's signals now (stale, with the error, when they cannot be read)."""
        ...

    async def close(self) -> None: ...


def snapshot(
    values: Sequence[SignalValue],
    *,
    observed_at: float | None,
    stale: bool,
    requests: float | None,
    in_flight: float | None,
    problems: Sequence[str],
    demand: Demand | None,
    mix: Mix | None,
) -> Signals:
    """A source's answer from what it read over the window: the requests the routers
    refused arrived too, so ``requests`` is at least the routers' arrivals (scale-to-zero
    reads it), and ``problems`` are the reason text's error."""
    if demand is not None:
        requests = max(requests or 0.0, demand.arrival_rate * demand.window_s)
    return Signals(
        values=tuple(values),
        observed_at=observed_at,
        stale=stale,
        requests=requests,
        in_flight=in_flight,
        error="; ".join(problems),
        demand=demand,
        mix=mix,
    )


def wakes(held: float | None, demand: Demand | None) -> bool:
    """Whether a pool with no worker has demand: requests held, or arrived (and refused)."""
    arrived = 0.0 if demand is None else max(demand.arrival_rate, demand.refused_rate)
    return (held or 0.0) > 0 or arrived > 0


def wake_signals(
    query: SignalQuery, now: float, held: float, demand: Demand | None = None
) -> Signals:
    """No worker (a pool at zero) but the routers hold ``held`` requests (or refused some
    over the window): a fresh snapshot with no latency yet, whose in-flight count (and
    concurrency) is what is held, which wakes the pool."""
    arrived = 0.0 if demand is None else demand.arrival_rate * demand.window_s
    return Signals(
        values=tuple(
            SignalValue(
                o.signal, o.percentile, held if o.signal is Signal.CONCURRENCY else None, now
            )
            for o in query.objectives
        ),
        observed_at=now,
        stale=False,
        requests=max(held, arrived),
        in_flight=held,
        demand=demand,
    )
