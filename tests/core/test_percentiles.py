import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preheat.core.percentiles import (
    bucket_deltas,
    histogram_quantile,
    sample_quantile,
)

INF = math.inf


@pytest.mark.parametrize(
    ("q", "buckets", "expected"),
    [
        # 100 observations, all in (0.1, 0.2]: the median interpolates to the middle.
        (0.5, [(0.1, 0), (0.2, 100), (INF, 100)], 0.15),
        # rank in the first bucket interpolates from 0.
        (0.5, [(0.1, 100), (0.2, 100), (INF, 100)], 0.05),
        # rank in +Inf returns the highest finite bound.
        (0.99, [(0.1, 10), (0.2, 20), (INF, 100)], 0.2),
        # p95 of 20 in (0, 1] and 80 in (1, 2]: rank 95 -> 1 + 75/80.
        (0.95, [(1.0, 20), (2.0, 100), (INF, 100)], 1.9375),
        (0.0, [(1.0, 20), (2.0, 100), (INF, 100)], 0.0),
        (1.0, [(1.0, 20), (2.0, 100), (INF, 100)], 2.0),
    ],
)
def test_histogram_quantile_table(q: float, buckets: list[tuple[float, float]], expected: float):
    assert histogram_quantile(q, buckets) == pytest.approx(expected)


def test_histogram_quantile_empty_is_none():
    assert histogram_quantile(0.5, []) is None
    assert histogram_quantile(0.5, [(1.0, 0), (INF, 0)]) is None


def test_histogram_quantile_rejects_bad_q():
    with pytest.raises(ValueError, match="within"):
        histogram_quantile(1.5, [(1.0, 1), (INF, 1)])


def test_bucket_deltas_window_and_reset():
    prev = [(0.1, 5), (0.2, 10), (INF, 10)]
    cur = [(0.1, 5), (0.2, 30), (INF, 40)]
    assert bucket_deltas(prev, cur) == [(0.1, 0), (0.2, 20), (INF, 30)]
    # counter reset: the current counts are the delta
    reset = [(0.1, 1), (0.2, 1), (INF, 2)]
    assert bucket_deltas(cur, reset) == reset


def test_sample_quantile_table():
    assert sample_quantile(0.5, [3, 1, 2]) == 2
    assert sample_quantile(0.0, [3, 1, 2]) == 1
    assert sample_quantile(1.0, [3, 1, 2]) == 3
    assert sample_quantile(0.25, [0, 10]) == pytest.approx(2.5)
    with pytest.raises(ValueError, match="no samples"):
        sample_quantile(0.5, [])


@given(st.lists(st.floats(min_value=0.0, max_value=10.0), min_size=1, max_size=200))
def test_histogram_quantile_lies_in_the_bucket_of_the_ranked_sample(samples: list[float]):
    bounds = [0.5 * i for i in range(1, 21)] + [INF]
    buckets = [(b, float(sum(1 for s in samples if s <= b))) for b in bounds]
    ordered = sorted(samples)
    for q in (0.5, 0.95, 0.99):
        est = histogram_quantile(q, buckets)
        assert est is not None
        # Prometheus' rank q*n falls in the bucket holding the ceil(q*n)-th sample
        ranked = ordered[max(math.ceil(q * len(ordered)) - 1, 0)]
        upper = next(b for b in bounds if ranked <= b)
        lower = upper - 0.5 if upper > 0.5 else 0.0
        assert lower - 1e-9 <= est <= upper + 1e-9
