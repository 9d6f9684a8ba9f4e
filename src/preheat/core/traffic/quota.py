"""Tenant quotas: token buckets, pure (``now`` comes in).

A bucket holds up to ``depth`` tokens and refills at ``rate`` per second. A request takes
``cost`` (1 for the request bucket; prompt + max output tokens for the token bucket); when
the bucket holds less it is refused, and ``retry_after_s`` says when it will hold enough.
The token bucket is reconciled when the request ends (:func:`refund`: the unused part of
its max output comes back).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Bucket:
    level: float  # tokens held at ``at``
    at: float  # the time ``level`` was computed


@dataclass(frozen=True, slots=True)
class Take:
    ok: bool
    bucket: Bucket  # the new state (unchanged level when refused, refilled to ``now``)
    retry_after_s: float  # 0 when ok; else when ``cost`` will be available
    remaining: float  # tokens left after the take (or now, when refused)
    reset_s: float  # time until the bucket is full again


def full(depth: float, now: float) -> Bucket:
    return Bucket(level=depth, at=now)


def refill(b: Bucket, rate: float, depth: float, now: float) -> Bucket:
    dt = max(0.0, now - b.at)
    return Bucket(level=min(depth, b.level + dt * rate), at=max(now, b.at))


def take(b: Bucket, rate: float, depth: float, cost: float, now: float) -> Take:
    """Take ``cost`` from the bucket at ``now``. A ``cost`` above ``depth`` can never be
    taken: refused with the retry-after of a full bucket (the caller says why)."""
    cur = refill(b, rate, depth, now)
    if cur.level + 1e-9 >= cost:
        nb = Bucket(level=cur.level - cost, at=cur.at)
        return Take(True, nb, 0.0, nb.level, _reset(nb.level, rate, depth))
    missing = min(cost, depth) - cur.level
    wait = math.inf if rate <= 0 else max(0.0, missing / rate)
    return Take(False, cur, wait, cur.level, _reset(cur.level, rate, depth))


def refund(b: Bucket, rate: float, depth: float, amount: float, now: float) -> Bucket:
    """Gives back ``amount`` (reconciling an estimate with the actual use), up to ``depth``."""
    cur = refill(b, rate, depth, now)
    return Bucket(level=min(depth, cur.level + max(0.0, amount)), at=cur.at)


def _reset(level: float, rate: float, depth: float) -> float:
    return 0.0 if rate <= 0 else max(0.0, (depth - level) / rate)
