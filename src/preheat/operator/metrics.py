"""The operator's Prometheus metrics, in a registry built by ``main`` (no globals)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from preheat.core import metric_names as m
from preheat.core.autoscaling.forecast import Outlook
from preheat.process.poolmetrics import PoolGauges


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.pool = PoolGauges(self.registry)  # preheat_pool_*: shared with preheat up
        self.replicas, self.desired = self.pool.replicas, self.pool.desired
        self.degraded = self.pool.degraded
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
        self.pool.set_pool(namespace, pool, counts, desired, degraded)

    def forget_pool(self, namespace: str, pool: str) -> None:
        self.pool.forget_pool(namespace, pool)


class AutoscalerMetrics:
    """``preheat_autoscaler_*``: the autoscaler's decisions, in the operator's registry."""

    def __init__(self, registry: CollectorRegistry):
        pool = (m.LABEL_NAMESPACE, m.LABEL_POOL)
        self.desired = Gauge(
            m.AUTOSCALER_DESIRED_REPLICAS,
            "Active replicas the autoscaler's last decision asks for.",
            pool,
            registry=registry,
        )
        self.current = Gauge(
            m.AUTOSCALER_CURRENT_REPLICAS,
            "Active (ready, serving) replicas the autoscaler saw at its last evaluation.",
            pool,
            registry=registry,
        )
        self.decisions = Counter(
            m.AUTOSCALER_DECISIONS,
            "Autoscaler evaluations by the cause of their decision.",
            (*pool, m.LABEL_CAUSE),
            registry=registry,
        )
        self.signal = Gauge(
            m.AUTOSCALER_SIGNAL,
            "Observed value of an objective's signal (ms, waiting requests, or a fraction).",
            (*pool, m.LABEL_SIGNAL),
            registry=registry,
        )
        self.target = Gauge(
            m.AUTOSCALER_SIGNAL_TARGET,
            "An objective's target (ms, waiting requests per replica, or a fraction).",
            (*pool, m.LABEL_SIGNAL),
            registry=registry,
        )
        self.stale = Gauge(
            m.AUTOSCALER_STALE,
            "1 while the autoscaler holds a pool because its metrics are missing or stale.",
            pool,
            registry=registry,
        )
        self.forecast = Gauge(
            m.AUTOSCALER_FORECAST_RATE,
            "The arrival rate (req/s) the autoscaler's forecast expects its horizon ahead "
            "(acting only with autoscaling.predictive on).",
            pool,
            registry=registry,
        )
        self.forecast_error = Gauge(
            m.AUTOSCALER_FORECAST_ERROR,
            "|forecast - observed| / observed arrival rate of the forecast's latest "
            "prediction whose time has come.",
            pool,
            registry=registry,
        )
        self.forecast_shortfall = Gauge(
            m.AUTOSCALER_FORECAST_SHORTFALL,
            "autoscaling.predictive.headroom: that percentile of how far the arrival rate a "
            "horizon later ran above the forecast, as a share of the observed (the pool is "
            "sized for forecast / (1 - this)).",
            pool,
            registry=registry,
        )
        self._signals: dict[tuple[str, str], set[str]] = {}
        self._causes: dict[tuple[str, str], set[str]] = {}

    def observe(
        self,
        namespace: str,
        pool: str,
        *,
        desired: int,
        current: int,
        cause: str,
        stale: bool,
        signals: Mapping[str, tuple[float | None, float]],
        forecast: Outlook | None = None,
    ) -> None:
        """One evaluation: ``signals`` maps a signal label to (observed or None, target);
        ``forecast``: the decision's arrival-rate forecast (None: none made, the series
        keep their last values)."""
        key = (namespace, pool)
        if forecast is not None:
            self.forecast.labels(namespace, pool).set(forecast.rate)
            if forecast.error is not None:
                self.forecast_error.labels(namespace, pool).set(forecast.error)
            if forecast.headroom is not None:
                self.forecast_shortfall.labels(namespace, pool).set(forecast.headroom[1])
            else:
                with contextlib.suppress(KeyError):
                    self.forecast_shortfall.remove(namespace, pool)
        self.desired.labels(namespace, pool).set(desired)
        self.current.labels(namespace, pool).set(current)
        self.decisions.labels(namespace, pool, cause).inc()
        self._causes.setdefault(key, set()).add(cause)
        self.stale.labels(namespace, pool).set(1 if stale else 0)
        for name, (value, target) in signals.items():
            self._signals.setdefault(key, set()).add(name)
            self.target.labels(namespace, pool, name).set(target)
            if value is None:
                with contextlib.suppress(KeyError):
                    self.signal.remove(namespace, pool, name)
            else:
                self.signal.labels(namespace, pool, name).set(value)

    def forget_pool(self, namespace: str, pool: str) -> None:
        key = (namespace, pool)
        gauges = (
            self.desired,
            self.current,
            self.stale,
            self.forecast,
            self.forecast_error,
            self.forecast_shortfall,
        )
        for gauge in gauges:
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, pool)
        for name in self._signals.pop(key, set()):
            for series in (self.signal, self.target):
                with contextlib.suppress(KeyError):
                    series.remove(namespace, pool, name)
        for cause in self._causes.pop(key, set()):
            with contextlib.suppress(KeyError):
                self.decisions.remove(namespace, pool, cause)
