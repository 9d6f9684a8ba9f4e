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

A status that cannot be read (an older operator's, an edited one) is ignored: the policy
then starts as a fresh one does (it holds one window after start-up).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from preheat.core.autoscaling import Direction
from preheat.core.autoscaling.memory import Memory

FIELD = "policyHistory"

__all__ = ["FIELD", "from_status", "to_status"]


def _stamp(t: float) -> str:
    when = datetime.datetime.fromtimestamp(t, datetime.UTC)
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
    return out


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
        return Memory(
            since=_seconds(doc.get("since")),
            history=tuple(sorted(history)),
            last_scale_at=None if last_at is None else _seconds(last_at),
            last_direction=direction if last_at is not None else Direction.HOLD,
        )
    except (KeyError, TypeError, ValueError):
        return None
