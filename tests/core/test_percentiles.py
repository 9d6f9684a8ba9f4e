import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preheat.core.percentiles import (
    bucket_deltas,
    bucket_floor,
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


def test_the_bucket_floor_is_the_lower_edge_of_the_bucket_a_percentile_lies_in() -> None:
    ttft = (0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0)  # part of vLLM's TTFT buckets
    assert bucket_floor(0.48, ttft) == 0.25  # in (0.25, 0.5]
    assert bucket_floor(0.5, ttft) == 0.25  # an upper bound belongs to its bucket
    assert bucket_floor(0.51, ttft) == 0.5
    assert bucket_floor(2.3, reversed(ttft)) == 1.0  # any order
    assert bucket_floor(0.05, ttft) == 0.0  # the lowest bucket starts at 0
    assert bucket_floor(6.0, ttft) is None  # past the highest bound: the +Inf bucket
    assert bucket_floor(0.3, ()) is None
    assert bucket_floor(0.3, (float("inf"),)) is None


@given(st.lists(st.floats(0.001, 100.0), min_size=1, max_size=20), st.floats(0.0, 100.0))
def test_a_percentile_read_off_a_histogram_lies_over_its_bucket_floor(
    bounds: list[float], q: float
) -> None:
    """Whatever the counts, histogram_quantile's value is over the floor of its bucket and
    at most that bucket's upper bound."""
    edges = sorted(set(bounds))
    buckets = [(le, float(i + 1)) for i, le in enumerate(edges)] + [(math.inf, len(edges))]
    value = histogram_quantile(q / 100.0, buckets)
    assert value is not None
    floor = bucket_floor(value, edges)
    assert floor is not None
    upper = min(e for e in edges if e > floor)
    assert floor <= value <= upper
