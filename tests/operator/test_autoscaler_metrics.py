"""The autoscaler's metrics (operator/metrics.py): the arrival-rate forecast, its error and
the shortfall its headroom reads."""

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


def test_the_shortfall_read_is_exported_while_the_headroom_reads_one() -> None:
    registry = CollectorRegistry()
    metrics = AutoscalerMetrics(registry)
    seen: dict[str, tuple[float | None, float]] = {}
    kw = {"desired": 2, "current": 2, "cause": "steady", "stale": False, "signals": seen}
    name = "preheat_autoscaler_forecast_shortfall_ratio"
    metrics.observe("ns", "p", **kw, forecast=Outlook(12.5, 60.0, 0.1))
    assert f"{name}{{" not in generate_latest(registry).decode()  # no headroom set
    metrics.observe("ns", "p", **kw, forecast=Outlook(12.5, 60.0, 0.1, headroom=(90.0, 0.25)))
    assert f'{name}{{namespace="ns",pool="p"}} 0.25' in generate_latest(registry).decode()
    metrics.observe("ns", "p", **kw, forecast=Outlook(12.5, 60.0, 0.1))  # headroom unset again
    assert f"{name}{{" not in generate_latest(registry).decode()
    metrics.observe("ns", "p", **kw, forecast=Outlook(12.5, 60.0, 0.1, headroom=(90.0, 0.25)))
    metrics.forget_pool("ns", "p")
    assert f"{name}{{" not in generate_latest(registry).decode()
