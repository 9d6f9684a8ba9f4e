"""How the autoscaler's signals read to a person: ``ttft_p95 612/400, queueDepth 3/4``,
with what the routers refused when they refused any (``refused 48% of 12.0 req/s``) and how
bursty the arrivals were when past Poisson noise (``arrivals in bursts of 3.0 (dispersion
5.7)``, the batches the capacity estimate sizes for).

Shared by the operator (the ``Autoscaling`` condition, its metrics' ``signal`` label) and
``preheat up`` (the live view, the run's events). Pure.
"""

from __future__ import annotations

from preheat.core.autoscaling import Signals
from preheat.core.autoscaling.capacity import bursts_said
from preheat.core.pool import AutoscalingConfig, Objective

__all__ = ["describe_signals", "signal_label", "signals_seen"]


def signal_label(objective: Objective) -> str:
    """``ttft_p95``, ``queueDepth``: the ``signal`` label of the autoscaler's metrics."""
    s = objective.signal
    return f"{s.value}_p{objective.percentile:g}" if s.is_latency else s.value


def signals_seen(
    config: AutoscalingConfig, signals: Signals
) -> dict[str, tuple[float | None, float]]:
    """``{label: (observed or None, target)}`` per objective."""
    out: dict[str, tuple[float | None, float]] = {}
    for obj in config.objectives:
        sv = signals.find(obj)
        value = None if sv is None or sv.stale else sv.value
        out[signal_label(obj)] = (value, obj.target)
    return out


def _shown(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2f}"


def describe_signals(config: AutoscalingConfig, signals: Signals) -> str:
    """``ttft_p95 612/400, queueDepth 3/4`` (observed/target; ``-``: none), then
    ``, refused 48% of 12.0 req/s`` when the routers refused requests over the window, and
    ``, arrivals in bursts of 3.0 (dispersion 5.7)`` when they came burstier than Poisson
    noise (:func:`~preheat.core.autoscaling.capacity.bursts_said`)."""
    seen = signals_seen(config, signals)
    text = ", ".join(f"{k} {_shown(v)}/{t:g}" for k, (v, t) in seen.items())
    d = signals.demand
    if d is not None and d.refused_rate > 0:
        text += f", refused {d.refused_fraction * 100:.0f}% of {d.arrival_rate:.1f} req/s"
    bursts = "" if d is None else bursts_said(d.arrival_dispersion, d.window_s)
    if bursts:
        text += f", arrivals in {bursts}"
    return text
