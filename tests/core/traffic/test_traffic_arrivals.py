"""The arrivals' burst counter and the index of dispersion it gives (pure)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preheat.core.traffic.arrivals import ArrivalBins, dispersion


def _measure(times: list[float], end: float) -> float | None:
    bins = ArrivalBins()
    for t in times:
        bins.observe(t)
    return dispersion(bins.flush(end), float(len(times)))


def _poisson(rng: random.Random, rate: float, seconds: float) -> list[float]:
    out, t = [], 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= seconds:
            return out
        out.append(t)


def test_a_lone_burst_counts_its_rise_and_its_fall() -> None:
    """Five arrivals in one second and nothing after: the bin rises by 5 and falls by 5,
    and the fall is counted when the counters are read, without another arrival."""
    bins = ArrivalBins()
    for _ in range(5):
        bins.observe(10.2)
    assert bins.flush(10.9) == 0.0  # the bin is still open
    assert bins.flush(11.0) == 25.0  # closed: the rise from nothing
    assert bins.flush(30.0) == 50.0  # and the fall to the empty bins after it
    assert dispersion(50.0, 5.0) == 5.0  # one batch of 5: E[X^2] / E[X]


def test_steady_arrivals_one_per_bin_have_no_burst() -> None:
    bins = ArrivalBins()
    for k in range(100):
        bins.observe(k + 0.5)
    assert bins.flush(99.9) == 1.0  # only the first bin's rise from nothing
    assert dispersion(bins.flush(99.9), 100.0) == pytest.approx(0.005)


def test_no_arrivals_says_nothing() -> None:
    assert dispersion(0.0, 0.0) is None
    assert ArrivalBins().flush(100.0) == 0.0
    with pytest.raises(ValueError, match="bin_s"):
        ArrivalBins(0.0)


@settings(max_examples=25)
@given(st.floats(0.5, 200.0), st.integers(0, 10_000))
def test_poisson_arrivals_have_a_dispersion_near_one_at_any_rate(rate: float, seed: int) -> None:
    """Over 2,000 one-second bins the estimate's standard error is about sqrt(3 / 2000)."""
    times = _poisson(random.Random(seed), rate, 2000.0)
    got = _measure(times, 2000.0)
    assert got is not None
    assert 0.8 < got < 1.2


@settings(max_examples=20)
@given(st.floats(1.5, 8.0), st.floats(0.2, 5.0), st.integers(0, 10_000))
def test_geometric_batches_have_a_dispersion_of_twice_their_mean_less_one(
    mean: float, batches_per_s: float, seed: int
) -> None:
    """Batches of geometric size (mean ``m``) at one instant: ``D = E[X^2] / E[X] = 2m - 1``."""
    rng = random.Random(seed)
    times: list[float] = []
    for t in _poisson(rng, batches_per_s, 3000.0):
        n = 1
        while rng.random() > 1.0 / mean:
            n += 1
        times.extend([t] * n)
    got = _measure(times, 3000.0)
    assert got is not None
    assert got == pytest.approx(2.0 * mean - 1.0, rel=0.25)


def test_a_rate_that_climbs_through_the_window_is_not_counted_as_bursts() -> None:
    """From 5 to 100 req/s over 600 s: a plain variance of the counts would say about 13
    (the climb), the differences of consecutive bins about 1."""
    rng = random.Random(7)
    times, t = [], 0.0
    while t < 600.0:
        t += rng.expovariate(5.0 + 95.0 * t / 600.0)
        times.append(t)
    counts = [0] * 600
    for x in times:
        if x < 600.0:
            counts[int(x)] += 1
    mean = sum(counts) / len(counts)
    variance = sum((c - mean) ** 2 for c in counts) / (len(counts) - 1)
    assert variance / mean > 5.0
    got = _measure([x for x in times if x < 600.0], 600.0)
    assert got is not None
    assert 0.8 < got < 1.25
