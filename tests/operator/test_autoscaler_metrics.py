"""The autoscaler's metrics (operator/metrics.py): the arrival-rate forecast and its error."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from preheat.core.autoscaling.forecast import Outlook
from preheat.operator.metrics import AutoscalerMetrics


def test_the_forecast_and_its_error_are_exported_per_pool() -> None:
    registry = CollectorRegistry()
    metrics = AutoscalerMetrics(registry)
    seen: dict[str, tuple[float | None, float]] = {}
    kw = {"desired": 2, "current": 2, "cause": "steady", "stale": False, "signals": seen}
    metrics.observe("ns", "p", **kw, forecast=Outlook(12.5, 60.0, None))
    text = generate_latest(registry).decode()
    assert 'preheat_autoscaler_forecast_arrival_rate{namespace="ns",pool="p"} 12.5' in text
    assert "preheat_autoscaler_forecast_error_ratio{" not in text  # none due yet
    metrics.observe("ns", "p", **kw, forecast=Outlook(14.0, 60.0, 0.25))
    text = generate_latest(registry).decode()
    assert 'preheat_autoscaler_forecast_error_ratio{namespace="ns",pool="p"} 0.25' in text
    metrics.forget_pool("ns", "p")
    assert "forecast_arrival_rate{" not in generate_latest(registry).decode()
