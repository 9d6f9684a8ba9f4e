"""Percentiles: from histogram buckets (live signals) and from samples (benchmarks).

Live latency signals are Prometheus histograms; a percentile over a window comes from the
*delta* of the cumulative bucket counts between the window's ends, interpolated linearly
inside the bucket as Prometheus' ``histogram_quantile`` does. Never from averages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

Buckets = Sequence[tuple[float, float]]
"""Cumulative histogram: ``(upper_bound, count_le_bound)`` sorted by bound, last bound +Inf."""


def bucket_deltas(prev: Buckets, cur: Buckets) -> list[tuple[float, float]]:
    """Cumulative counts observed between two scrapes of the same histogram.

    A counter reset (any count going down) makes ``cur`` itself the delta, as Prometheus'
    ``rate`` treats resets.
    """
    prev_by_le: Mapping[float, float] = dict(prev)
    if any(count < prev_by_le.get(le, 0.0) for le, count in cur):
        return [(le, count) for le, count in cur]
    return [(le, count - prev_by_le.get(le, 0.0)) for le, count in cur]


def histogram_quantile(q: float, buckets: Buckets) -> float | None:
    """The ``q``-quantile (0 <= q <= 1) of a cumulative histogram; None when it is empty.

    Same rules as Prometheus: linear interpolation inside the bucket that holds the rank;
    the lowest bucket interpolates from 0 (or from its bound when that is <= 0); a rank in
    the +Inf bucket returns the highest finite bound.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    if not buckets:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for i, (le, count) in enumerate(buckets):
        if count >= rank:
            if math.isinf(le):
                return buckets[i - 1][0] if i > 0 else None
            if i == 0 and le <= 0:
                return le
            lower = prev_le if i > 0 else 0.0
            in_bucket = count - prev_count
            if in_bucket <= 0:
                return le
            return lower + (le - lower) * (rank - prev_count) / in_bucket
        prev_le, prev_count = le, count
    return buckets[-1][0]


def bucket_floor(value: float, bounds: Sequence[float]) -> float | None:
    """The lower edge of the histogram bucket a percentile ``value`` was read in (bounds:
    the buckets' finite upper bounds, any order): the true percentile lies above it, and
    interpolation put it somewhere in ``(floor, next bound]``. 0 in the lowest bucket;
    None when ``bounds`` is empty or ``value`` lies past the highest bound (the +Inf
    bucket: ``histogram_quantile`` returns the highest bound there)."""
    finite = sorted(b for b in bounds if math.isfinite(b))
    if not finite or value > finite[-1]:
        return None
    below = [b for b in finite if b < value]
    return below[-1] if below else 0.0


def sample_quantile(q: float, samples: Sequence[float]) -> float:
    """The ``q``-quantile of raw samples (linear interpolation between closest ranks).

    For benchmarks, which keep every sample; live signals use :func:`histogram_quantile`.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def weighted_sample_quantile(q: float, runs: Sequence[tuple[float, float]]) -> float:
    """:func:`sample_quantile` of the samples that ``runs`` stand for, without expanding them.

    ``runs`` are ``(value, count)`` pairs (a run-length encoding: ``count`` whole samples of
    ``value``, in any order); the answer equals ``sample_quantile(q, expanded)``.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    ordered = sorted((v, int(c)) for v, c in runs if c >= 1)
    total = sum(c for _, c in ordered)
    if total == 0:
        raise ValueError("no samples")
    pos = q * (total - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, total - 1)
    lo_value = hi_value = ordered[-1][0]
    seen = 0
    found_lo = False
    for value, count in ordered:
        seen += count
        if not found_lo and lo < seen:
            lo_value, found_lo = value, True
        if hi < seen:
            hi_value = value
            break
    return lo_value + (hi_value - lo_value) * (pos - lo)
