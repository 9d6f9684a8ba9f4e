"""Step 2d (``autoscaling.predictive``): a forecast of the arrival rate, pure.

Holt-Winters, additive, on the pool's own history of arrival rates (one observation per
evaluation, at irregular times): a level, a trend per second and one seasonal offset per
slot of the day (``slots`` of ``period_s / slots``). With ``dt`` seconds since the last
observation ``y`` and ``s`` the offset of the slot ``t`` falls in:

    level'  = alpha * (y - s) + (1 - alpha) * (level + trend * dt)
    trend'  = beta * (level' - level) / dt + (1 - beta) * trend
    s'      = gamma * (y - level') + (1 - gamma) * s

and the forecast ``h`` seconds ahead is ``level + trend * h + s(t + h)``, never below 0.
The seasonal offsets are used only once the history covers a whole period (before, a day
is not yet known, and an offset learned from part of it would be a guess). The forecast's
last prediction for the time of each observation is kept, so its error can be said.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["Forecast", "HoltWinters", "observe", "predict"]


@dataclass(frozen=True)
class HoltWinters:
    alpha: float = 0.5  # level
    beta: float = 0.2  # trend
    gamma: float = 0.1  # season
    period_s: float = 86_400.0  # a day
    slots: int = 24  # one seasonal offset per hour

    def __post_init__(self) -> None:
        for name in ("alpha", "beta", "gamma"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {v}")
        if not self.period_s > 0 or self.slots < 1:
            raise ValueError("period_s must be > 0 and slots >= 1")

    def slot(self, t: float) -> int:
        return int((t % self.period_s) / self.period_s * self.slots) % self.slots


@dataclass(frozen=True)
class Forecast:
    """The smoothed state after the observations so far."""

    t: float  # time of the last observation
    level: float
    trend: float  # per second
    season: tuple[float, ...]
    since: float  # time of the first observation
    # the forecast made at the last observation for the horizon it was asked for:
    # (for time, value); None before the first prediction
    predicted: tuple[float, float] | None = None
    error: float | None = None  # |forecast - observed| / observed at the last observation


def observe(f: Forecast | None, t: float, y: float, hw: HoltWinters = HoltWinters()) -> Forecast:
    """The state after observing rate ``y`` at time ``t`` (an observation at or before the
    last one only replaces the level)."""
    y = max(0.0, y)
    if f is None:
        return Forecast(t, y, 0.0, (0.0,) * hw.slots, t)
    error = f.error
    if f.predicted is not None and abs(f.predicted[0] - t) <= 1e-6 and y > 0:
        error = abs(f.predicted[1] - y) / y
    dt = t - f.t
    if dt <= 0:
        return replace(f, level=y, error=error)
    k = hw.slot(t)
    s = f.season[k] if seasonal(f, hw) else 0.0
    level = hw.alpha * (y - s) + (1 - hw.alpha) * (f.level + f.trend * dt)
    trend = hw.beta * (level - f.level) / dt + (1 - hw.beta) * f.trend
    season = list(f.season)
    season[k] = hw.gamma * (y - level) + (1 - hw.gamma) * f.season[k]
    return Forecast(t, level, trend, tuple(season), f.since, f.predicted, error)


def seasonal(f: Forecast, hw: HoltWinters) -> bool:
    """Whether the offsets are used: the history covers a whole period."""
    return f.t - f.since >= hw.period_s


def predict(f: Forecast, horizon_s: float, hw: HoltWinters = HoltWinters()) -> float:
    """The rate ``horizon_s`` after the last observation (>= 0)."""
    at = f.t + horizon_s
    s = f.season[hw.slot(at)] if seasonal(f, hw) else 0.0
    return max(0.0, f.level + f.trend * horizon_s + s)
