"""A pool's size as its control plane sees it: ``preheat_pool_replicas{namespace, pool,
state}``, ``preheat_pool_desired_replicas`` and ``preheat_pool_degraded``. One definition
for the two control planes, the operator (its ``/metrics``) and ``preheat up`` (its control
``/metrics``, listed in the run's Prometheus targets), so the dashboard's replicas panel
reads the same series from either."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Gauge

from preheat.core import metric_names as m

STATES = ("active", "standby", "warming", "draining")


class PoolGauges:
    def __init__(self, registry: CollectorRegistry) -> None:
        pool = (m.LABEL_NAMESPACE, m.LABEL_POOL)
        self.replicas = Gauge(
            m.POOL_REPLICAS,
            "Worker pods of a pool by lifecycle state.",
            (*pool, m.LABEL_STATE),
            registry=registry,
        )
        self.desired = Gauge(
            m.POOL_DESIRED_REPLICAS, "Active replicas a pool aims at.", pool, registry=registry
        )
        self.degraded = Gauge(
            m.POOL_DEGRADED, "1 when the pool is Degraded.", pool, registry=registry
        )

    def set_pool(
        self, namespace: str, pool: str, counts: Mapping[str, int], desired: int, degraded: bool
    ) -> None:
        for state, value in counts.items():
            self.replicas.labels(namespace, pool, state).set(value)
        self.desired.labels(namespace, pool).set(desired)
        self.degraded.labels(namespace, pool).set(1 if degraded else 0)

    def forget_pool(self, namespace: str, pool: str) -> None:
        for state in STATES:
            with contextlib.suppress(KeyError):
                self.replicas.remove(namespace, pool, state)
        for gauge in (self.desired, self.degraded):
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, pool)


__all__ = ["STATES", "PoolGauges"]
