"""Attainment against GPU-hours: the curves a policy comparison reads, pure.

A point is one simulated run: a policy at one setting of its knob, the share of requests
within the SLO (``attainment``, 0..1) and the GPU-hours the pool held. Up-left is better.

- :func:`front`: the points no other point beats on both axes (the Pareto front), cheapest
  first;
- :func:`cheapest_at`: the cheapest point that reaches an attainment (a policy's cost at
  that attainment; None: no setting reaches it);
- :func:`hindsight_fixed`: the reference an SRE would have picked knowing the whole trace:
  the cheapest fixed pool that reaches the attainment, else the fixed pool that attains
  most;
- :func:`unrun_fixed_below`: the fixed size just under the hindsight-best one when that
  size was not run (the reference is then only the best *of the sizes run*: a sweep in
  steps of two can make it a pod too large, and every ratio to it too flattering);
- :func:`next_fixed_probe`: the fixed size to run next to find the cheapest one reaching the
  attainment (bisection between the largest size run that misses it and the reference);
- :func:`uncovered`: the points of a baseline that ours does not reach at no more cost
  (empty: our curve is at or left of theirs at every attainment they reach).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "Point",
    "cheapest_at",
    "front",
    "hindsight_fixed",
    "next_fixed_probe",
    "uncovered",
    "unrun_fixed_below",
]


@dataclass(frozen=True)
class Point:
    policy: str  # "preheat", "hpa", "keda", "kpa", "fixed", "scheduled", ...
    setting: str  # the knob's value as shown ("48/pod", "4 pods")
    attainment: float  # share of all requests within the SLO, 0..1
    gpu_hours: float
    knob: float | None = None  # the knob's value (a fixed pool: its size); None: unknown

    def __post_init__(self) -> None:
        if not 0.0 <= self.attainment <= 1.0:
            raise ValueError(f"attainment must be within [0, 1], got {self.attainment}")
        if self.gpu_hours < 0:
            raise ValueError(f"gpu_hours must be >= 0, got {self.gpu_hours}")


def _beats(a: Point, b: Point) -> bool:
    """a is at least as good on both axes and better on one."""
    return (
        a.attainment >= b.attainment
        and a.gpu_hours <= b.gpu_hours
        and (a.attainment > b.attainment or a.gpu_hours < b.gpu_hours)
    )


def front(points: Iterable[Point]) -> list[Point]:
    """The points no other point beats, cheapest first (equal points: the first kept)."""
    pts = list(points)
    out: list[Point] = []
    for i, p in enumerate(pts):
        if any(_beats(q, p) for q in pts):
            continue
        if any(q.attainment == p.attainment and q.gpu_hours == p.gpu_hours for q in pts[:i]):
            continue
        out.append(p)
    return sorted(out, key=lambda p: (p.gpu_hours, -p.attainment))


def cheapest_at(points: Iterable[Point], attainment: float) -> Point | None:
    """The cheapest point with at least ``attainment`` (ties: the higher attainment)."""
    ok = [p for p in points if p.attainment >= attainment]
    if not ok:
        return None
    return min(ok, key=lambda p: (p.gpu_hours, -p.attainment))


def hindsight_fixed(points: Iterable[Point], attainment: float) -> Point | None:
    """Among the ``fixed`` points: the cheapest reaching ``attainment``, else the one that
    attains most (ties: the cheaper). None: no fixed point."""
    fixed = [p for p in points if p.policy == "fixed"]
    if not fixed:
        return None
    best = cheapest_at(fixed, attainment)
    if best is not None:
        return best
    return max(fixed, key=lambda p: (p.attainment, -p.gpu_hours))


def unrun_fixed_below(points: Iterable[Point], attainment: float) -> int | None:
    """The pool size one under the hindsight-best fixed pool when no fixed point of that
    size was run and the best one reaches ``attainment`` (so the smaller pool might too, for
    less); None when the reference is known to be the cheapest size (the size under it was
    run, it is one pod, it does not reach the attainment, or its size is unknown)."""
    pts = list(points)
    ref = hindsight_fixed(pts, attainment)
    if ref is None or ref.knob is None or ref.attainment < attainment:
        return None
    below = int(ref.knob) - 1
    if below < 1:
        return None
    if any(p.policy == "fixed" and p.knob is not None and int(p.knob) == below for p in pts):
        return None
    return below


def next_fixed_probe(points: Iterable[Point], attainment: float) -> int | None:
    """The fixed pool size to simulate next so that the hindsight-best fixed pool is the
    cheapest size reaching ``attainment``, not only the cheapest of the sizes swept: the
    middle of the gap between the largest size run that misses it (0 if none) and the
    reference. None when there is no gap (the size under the reference was run and misses,
    or the reference is one pod), no fixed size reaches the attainment, or a size is unknown.
    Assumes a larger pool attains no less (bisection: about log2(gap) runs)."""
    pts = list(points)
    ref = hindsight_fixed(pts, attainment)
    if ref is None or ref.knob is None or ref.attainment < attainment:
        return None
    hi = int(ref.knob)
    misses = [
        int(p.knob)
        for p in pts
        if p.policy == "fixed"
        and p.knob is not None
        and p.attainment < attainment
        and int(p.knob) < hi
    ]
    lo = max(misses, default=0)
    if hi - lo <= 1:
        return None
    return (lo + hi) // 2


def uncovered(ours: Sequence[Point], theirs: Iterable[Point]) -> list[Point]:
    """``theirs`` points that no point of ``ours`` matches: for each, ours has no point with
    at least its attainment on at most its GPU-hours."""
    return [
        p
        for p in theirs
        if not any(q.attainment >= p.attainment and q.gpu_hours <= p.gpu_hours for q in ours)
    ]
