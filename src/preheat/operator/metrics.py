"""The operator's Prometheus metrics, in a registry built by ``main`` (no globals)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from preheat.core import metric_names as m


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        pool = (m.LABEL_NAMESPACE, m.LABEL_POOL)
        self.replicas = Gauge(
            m.POOL_REPLICAS,
            "Worker pods of a pool by lifecycle state.",
            (*pool, m.LABEL_STATE),
            registry=self.registry,
        )
        self.desired = Gauge(
            m.POOL_DESIRED_REPLICAS,
            "Active replicas a pool aims at.",
            pool,
            registry=self.registry,
        )
        self.degraded = Gauge(
            m.POOL_DEGRADED, "1 when the pool is Degraded.", pool, registry=self.registry
        )
        self.reconciles = Counter(
            m.OPERATOR_RECONCILES,
            "Reconciles of a pool by outcome.",
            (m.LABEL_OUTCOME,),
            registry=self.registry,
        )
        self.actions = Counter(
            m.OPERATOR_ACTIONS,
            "Writes to the API server by action.",
            (m.LABEL_ACTION,),
            registry=self.registry,
        )

    def set_pool(
        self, namespace: str, pool: str, counts: Mapping[str, int], desired: int, degraded: bool
    ) -> None:
        for state, value in counts.items():
            self.replicas.labels(namespace, pool, state).set(value)
        self.desired.labels(namespace, pool).set(desired)
        self.degraded.labels(namespace, pool).set(1 if degraded else 0)

    def forget_pool(self, namespace: str, pool: str) -> None:
        for state in ("active", "standby", "warming", "draining"):
            with contextlib.suppress(KeyError):
                self.replicas.remove(namespace, pool, state)
        for gauge in (self.desired, self.degraded):
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, pool)
