"""Step 2b: refused demand is demand.

The objectives are computed from what the workers served. When the pool's routers turn
part of the traffic away (admission: the predicted TTFT cannot meet the deadline; no
endpoint in time), the served load understates the demand: with ``A`` requests per second
arriving and ``R`` refused over the window, the pods that served it (``n``) served
``A - R`` of ``A``, so the replicas it needs for all of it are ``ceil(n * A / (A - R))``.
A pool refusing half its traffic asks for twice what it has, even with its latency under
target: admission is what keeps that latency down. The objectives still ask for what the
served load needs; the policy takes the larger.

``n`` is the time-weighted mean of the pods serving over the window (from the policy's
state, :func:`record` and :func:`served_by`), not the pods serving now: after a scale-up the
window still holds the refusals of the smaller pool, and counting them against the larger
one would overshoot (a pool refusing half its traffic on 2 pods, grown to 4, would ask for 8
once the new pods were warm, before the window had seen them serve).

Like an objective, the factor ``A / (A - R)`` has a tolerance band. Within it, refusals
grow nothing; they keep the pool from shrinking only when no capacity estimate was made. The
estimate sizes the routers' arrival rate, refused requests included, so it already counts
them; a hold on top of it pinned a pool at its peak size for as long as any request was
refused (the ServeGen day at 10x: 22 pods held for 1,000 s against an estimate of 10-16,
while the routers refused well under 1% of the requests, each such evaluation re-arming the
scale-down window). Everything refused
(``A - R = 0``) asks for the pool's maximum; the max step then limits how fast it gets
there. Nothing serving (a pool at zero, or every pod still warming): no constraint here;
the wake signal and the warming credit cover it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from preheat.core.autoscaling.types import Demand

__all__ = ["DemandView", "describe", "record", "served_by", "view"]


@dataclass(frozen=True)
class DemandView:
    demand: Demand
    factor: float  # A / (A - R); inf: everything refused
    replicas: int | None  # what it asks for; None: no constraint
    within_tolerance: bool


def _ceil(x: float) -> int:
    return math.ceil(round(x, 9))


def record(
    history: tuple[tuple[float, int], ...], now: float, serving: int, horizon_s: float
) -> tuple[tuple[float, int], ...]:
    """``history`` with ``(now, serving)`` added, trimmed to ``horizon_s`` (the newest sample
    before it is kept: it says what served from the horizon's start)."""
    start = now - horizon_s
    kept = [(t, n) for t, n in history if t >= start]
    older = [(t, n) for t, n in history if t < start]
    if older:
        kept.insert(0, older[-1])
    kept.append((now, serving))
    return tuple(kept)


def served_by(history: tuple[tuple[float, int], ...], now: float, window_s: float) -> float:
    """The time-weighted mean of the pods serving over ``[now - window_s, now]`` (each sample
    holds until the next, the newest until ``now``; the part of the window before the first
    sample is not counted).
    The newest sample when the history spans no time."""
    if not history:
        return 0.0
    start = now - window_s
    total = span = 0.0
    ends = [t for t, _ in history[1:]] + [now]
    for (t, n), t_next in zip(history, ends, strict=True):
        a, b = max(t, start), min(t_next, now)
        if b > a:
            total += n * (b - a)
            span += b - a
    return total / span if span > 0 else float(history[-1][1])


def view(
    demand: Demand | None,
    base: float,
    current: int,
    highest: int,
    tolerance: float,
    *,
    sized: bool = False,
) -> DemandView | None:
    """What refusals ask for (None: nothing was refused, or no router counters).

    ``base``: the pods that served the window (:func:`served_by`); ``current``: the active
    count the pool converges to; ``highest``: ``replicas.max``; ``sized``: the capacity
    estimate sized the window's arrival rate (refusals within tolerance then ask for
    nothing: the estimate counts them).
    """
    if demand is None or demand.refused_rate <= 0:
        return None
    f = demand.refused_fraction
    factor = math.inf if f >= 1.0 else 1.0 / (1.0 - f)
    within = factor - 1.0 <= tolerance
    replicas: int | None
    if within:
        replicas = None if sized else current
    elif base <= 0:
        replicas = None
    elif math.isinf(factor):
        replicas = max(highest, _ceil(base))
    else:
        replicas = _ceil(base * factor)
    return DemandView(demand, factor, replicas, within)


def _rate(x: float) -> str:
    return f"{x:.1f}" if x >= 1 else f"{x:.2g}"


def describe(v: DemandView) -> str:
    """``router refused 48% of 12.0 req/s over 60 s (rejected 40%, unavailable 8%)``."""
    d = v.demand
    head = (
        f"router refused {d.refused_fraction * 100:.0f}% of {_rate(d.arrival_rate)} req/s "
        f"over {d.window_s:.0f} s"
    )
    refused = [(reason, rate) for reason, rate in d.by_reason if rate > 0]
    if len(refused) == 1:
        head += f" ({refused[0][0]})"
    elif refused and d.arrival_rate > 0:
        shares = ", ".join(f"{r} {rate / d.arrival_rate * 100:.0f}%" for r, rate in refused)
        head += f" ({shares})"
    return head
