"""``status.policyHistory``: what the autoscaling policy must remember across an operator
restart (:mod:`preheat.core.autoscaling.memory`), as the pool's status carries it.

Times are RFC 3339 (UTC, milliseconds), so they mean the same to the next process, on
whatever node it starts::

    policyHistory:
      since: "2026-11-24T23:00:00.000Z"        # the policy's first evaluation of the pool
      recommendations:                         # oldest first, consecutive repeats dropped
        - {time: "2026-11-24T23:04:45.000Z", replicas: 6}
        - {time: "2026-11-24T23:05:00.000Z", replicas: 3}
      lastScaleTime: "2026-11-24T23:04:45.000Z"   # the cooldowns run from it
      lastScaleDirection: up
      forecast:                                # the arrival-rate forecast (Holt-Winters)
        time: "2026-11-24T23:05:00.000Z"       # its last observation
        since: "2026-11-23T08:00:00.000Z"      # its first (the season is used after a period)
        seasonStart: "2026-11-23T07:58:12.000Z"  # a period's start: season[0] is the slot after it
        periodSeconds: 86400                   # autoscaling.predictive.period it learned
        level: 41.5                            # req/s
        trend: 0.002                           # req/s per second
        base: 48.0                             # req/s, the mean over about a period
        season: [-12.1, -14.0, ...]            # req/s above base, one per hour of the period
        weekSince: "2026-11-16T08:00:00.000Z"  # predictive.weekly: the weekly season's first
        week: [1.5, -0.4, ...]                 # req/s the weekday adds, per hour of 7 periods
        error: 0.12                            # its last checked prediction, off by 12%
        shortfalls: [0.0, 3.2, ...]            # how far the rate ran above (or under) the
                                               # checked predictions: decayed counts per
                                               # bucket (a list of another length, as
                                               # before 2026-12-01's signed buckets, is
                                               # dropped and counted again)
      coldStartSeconds: 55.7                   # the pool's last measured cold start: the
                                               # predictive horizon (the pods that measured
                                               # it may have left by the restart)

A status that cannot be read (an older operator's, an edited one) is ignored: the policy
then starts as a fresh one does (it holds one window after start-up). A forecast that
cannot be read is dropped alone (the forecast starts again; the window is kept), and so is
a cold start that is not a positive number of seconds.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from typing import Any

from preheat.core.autoscaling import Direction
from preheat.core.autoscaling.forecast import SHORTFALL_EDGES, Forecast
from preheat.core.autoscaling.memory import Memory

FIELD = "policyHistory"

__all__ = ["FIELD", "from_status", "to_status"]


def _stamp(t: float) -> str:
    """RFC 3339 to the nearest millisecond (rounded, not truncated: a time read back from a
    stamp and moved between clocks is a hair off its millisecond, and truncating it would
    move it a millisecond earlier at every restart)."""
    when = datetime.datetime.fromtimestamp(round(t, 3), datetime.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _seconds(stamp: Any) -> float:
    if not isinstance(stamp, str):
        raise ValueError(f"not an RFC 3339 time: {stamp!r}")
    when = datetime.datetime.fromisoformat(stamp)
    if when.tzinfo is None:
        raise ValueError(f"no time zone: {stamp!r}")
    return when.timestamp()


def to_status(memory: Memory) -> dict[str, Any]:
    """The ``status.policyHistory`` object for ``memory``."""
    out: dict[str, Any] = {
        "since": _stamp(memory.since),
        "recommendations": [{"time": _stamp(t), "replicas": r} for t, r in memory.history],
    }
    if memory.last_scale_at is not None and memory.last_direction is not Direction.HOLD:
        out["lastScaleTime"] = _stamp(memory.last_scale_at)
        out["lastScaleDirection"] = memory.last_direction.value
    f = memory.forecast
    if f is not None:
        fc: dict[str, Any] = {
            "time": _stamp(f.t),
            "since": _stamp(f.since),
            "seasonStart": _stamp(f.epoch),
            "periodSeconds": memory.forecast_period_s,
            "level": f.level,
            "trend": f.trend,
            "base": f.base,
            "season": list(f.season),
        }
        if f.week_since is not None:
            fc["weekSince"] = _stamp(f.week_since)
            fc["week"] = list(f.week)
        if f.error is not None:
            fc["error"] = f.error
        if f.shortfalls:
            fc["shortfalls"] = list(f.shortfalls)
        out["forecast"] = fc
    if memory.cold_start_s is not None:
        out["coldStartSeconds"] = round(memory.cold_start_s, 3)
    return out


def _number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"not a number: {v!r}")
    return float(v)


def _forecast(doc: Any) -> tuple[Forecast | None, float]:
    """(the forecast a ``policyHistory.forecast`` holds, its period); (None, 0) when none."""
    if doc is None:
        return None, 0.0
    if not isinstance(doc, Mapping):
        raise ValueError("forecast: not a mapping")
    season = doc.get("season")
    if not isinstance(season, list):
        raise ValueError("forecast.season: not a list")
    error = doc.get("error")
    week = doc.get("week")
    if not isinstance(week, list | None):
        raise ValueError("forecast.week: not a list")
    week_since = doc.get("weekSince")
    shortfalls = doc.get("shortfalls")
    if not isinstance(shortfalls, list | None):
        raise ValueError("forecast.shortfalls: not a list")
    counts = tuple(_number(v) for v in shortfalls or ())
    if len(counts) != len(SHORTFALL_EDGES) or any(c < 0 for c in counts):
        counts = ()  # another shape (another operator's buckets): counted again
    f = Forecast(
        t=_seconds(doc.get("time")),
        level=_number(doc.get("level")),
        trend=_number(doc.get("trend")),
        season=tuple(_number(v) for v in season),
        since=_seconds(doc.get("since")),
        error=None if error is None else _number(error),
        epoch=_seconds(doc.get("seasonStart")),
        base=_number(doc.get("base")),
        week=tuple(_number(v) for v in week or ()),
        week_since=None if week_since is None else _seconds(week_since),
        shortfalls=counts,
    )
    return f, _number(doc.get("periodSeconds"))


def _cold_start(v: Any) -> float | None:
    """A ``coldStartSeconds`` (None: absent, or not a positive number: dropped alone)."""
    try:
        seconds = _number(v)
    except ValueError:
        return None
    return seconds if seconds > 0 else None


def from_status(status: Mapping[str, Any] | None) -> Memory | None:
    """The memory a pool's status holds; None when it holds none or one not readable."""
    doc = (status or {}).get(FIELD)
    if not isinstance(doc, Mapping):
        return None
    try:
        history = tuple(
            (_seconds(e["time"]), int(e["replicas"])) for e in doc.get("recommendations") or []
        )
        last_at = doc.get("lastScaleTime")
        direction = Direction(doc.get("lastScaleDirection") or "hold")
        try:
            forecast, period = _forecast(doc.get("forecast"))
        except (KeyError, TypeError, ValueError):  # the window is still worth keeping
            forecast, period = None, 0.0
        return Memory(
            since=_seconds(doc.get("since")),
            history=tuple(sorted(history)),
            last_scale_at=None if last_at is None else _seconds(last_at),
            last_direction=direction if last_at is not None else Direction.HOLD,
            forecast=forecast,
            forecast_period_s=period,
            cold_start_s=_cold_start(doc.get("coldStartSeconds")),
        )
    except (KeyError, TypeError, ValueError):
        return None
