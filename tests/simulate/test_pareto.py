"""The comparison's curves: Pareto front, cost at an attainment, hindsight-best fixed pool,
and "ours at or left of theirs" (pure functions, table and property tests)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from preheat.simulate.pareto import (
    Point,
    cheapest_at,
    front,
    hindsight_fixed,
    next_fixed_probe,
    uncovered,
    unrun_fixed_below,
)


def P(policy: str, att: float, gpu_h: float, setting: str = "") -> Point:
    return Point(policy, setting or f"{policy}@{gpu_h}", att, gpu_h)


def test_front_keeps_only_points_nothing_beats_cheapest_first() -> None:
    a = P("hpa", 0.90, 1.0)
    b = P("hpa", 0.95, 2.0)
    c = P("kpa", 0.94, 2.5)  # beaten by b (more GPU-h, less attainment)
    d = P("fixed", 0.99, 3.0)
    e = P("fixed", 0.99, 3.5)  # beaten by d (same attainment, more GPU-h)
    assert front([c, e, d, b, a]) == [a, b, d]


def test_front_keeps_one_of_equal_points() -> None:
    a, b = P("hpa", 0.9, 1.0, "x"), P("kpa", 0.9, 1.0, "y")
    assert front([a, b]) == [a]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (0.99, "f4"),  # the cheapest reaching 99%
        (0.995, "f6"),
        (0.999, "f6"),  # none reaches it: the one that attains most
    ],
)
def test_hindsight_fixed_is_the_cheapest_fixed_pool_reaching_the_target(
    target: float, expected: str
) -> None:
    pts = [
        P("fixed", 0.95, 2.0, "f2"),
        P("fixed", 0.991, 4.0, "f4"),
        P("fixed", 0.996, 6.0, "f6"),
        P("fixed", 0.996, 8.0, "f8"),
        P("preheat", 1.0, 1.0, "cheap but not fixed"),
    ]
    ref = hindsight_fixed(pts, target)
    assert ref is not None
    assert ref.setting == expected


def test_hindsight_fixed_without_fixed_points_is_none() -> None:
    assert hindsight_fixed([P("hpa", 1.0, 1.0)], 0.99) is None


def F(pods: int, att: float) -> Point:
    """A fixed pool of ``pods`` over one hour."""
    return Point("fixed", f"{pods} pods", att, float(pods), float(pods))


@pytest.mark.parametrize(
    ("pool", "expected"),
    [
        # swept in steps of two: 16 is the best of the sizes run, 15 was never tried
        ((F(14, 0.981), F(16, 0.9966), F(18, 0.9986)), 15),
        # 15 was run and misses: 16 is the cheapest size that reaches 99%
        ((F(14, 0.981), F(15, 0.985), F(16, 0.9966)), None),
        # the best is one pod: nothing smaller
        ((F(1, 0.999), F(2, 1.0)), None),
        # none reaches 99%: the reference is the one that attains most, not a cost
        ((F(4, 0.95), F(6, 0.97)), None),
        # a size unknown (points read from elsewhere): no claim
        ((Point("fixed", "16 pods", 0.995, 16.0),), None),
    ],
)
def test_unrun_fixed_below_names_the_size_under_the_reference_that_was_not_tried(
    pool: tuple[Point, ...], expected: int | None
) -> None:
    assert unrun_fixed_below([P("preheat", 0.999, 9.0), *pool], 0.99) == expected


@pytest.mark.parametrize(
    ("pool", "expected"),
    [
        ((F(14, 0.981), F(16, 0.9966), F(18, 0.9986)), 15),  # the gap 14..16
        ((F(12, 0.95), F(16, 0.9966)), 14),  # bisect 12..16
        ((F(12, 0.95), F(14, 0.98), F(16, 0.9966)), 15),  # then 14..16
        ((F(14, 0.981), F(15, 0.985), F(16, 0.9966)), None),  # 15 misses: 16 is exact
        ((F(4, 0.995),), 2),  # nothing misses: bisect 0..4
        ((F(1, 0.999), F(2, 1.0)), None),  # one pod: nothing smaller
        ((F(4, 0.95), F(6, 0.97)), None),  # none reaches the target
        ((Point("fixed", "16 pods", 0.995, 16.0),), None),  # size unknown
    ],
)
def test_next_fixed_probe_bisects_the_gap_under_the_hindsight_best(
    pool: tuple[Point, ...], expected: int | None
) -> None:
    assert next_fixed_probe([P("preheat", 0.999, 9.0), *pool], 0.99) == expected


def test_cheapest_at_reads_a_policy_cost_at_an_attainment() -> None:
    pts = [P("hpa", 0.97, 1.0), P("hpa", 0.992, 3.0), P("hpa", 0.999, 2.5)]
    best = cheapest_at(pts, 0.99)
    assert best is not None
    assert best.gpu_hours == 2.5
    assert cheapest_at(pts, 0.9995) is None


def test_uncovered_lists_the_baseline_points_ours_does_not_match() -> None:
    ours = [P("preheat", 0.95, 1.0), P("preheat", 0.99, 2.0)]
    theirs = [P("hpa", 0.94, 1.0), P("hpa", 0.99, 1.5), P("hpa", 0.999, 5.0)]
    assert [p.gpu_hours for p in uncovered(ours, theirs)] == [1.5, 5.0]
    assert uncovered(ours, theirs[:1]) == []


def test_point_rejects_an_attainment_outside_0_1() -> None:
    with pytest.raises(ValueError, match="attainment"):
        Point("hpa", "x", 1.5, 1.0)
    with pytest.raises(ValueError, match="gpu_hours"):
        Point("hpa", "x", 0.5, -1.0)


points = st.lists(
    st.builds(
        P,
        st.sampled_from(["preheat", "hpa", "fixed"]),
        st.floats(0, 1),
        st.floats(0, 100),
    ),
    min_size=1,
    max_size=12,
)


@given(points)
def test_front_points_are_not_beaten_and_every_point_is_matched_by_the_front(
    pts: list[Point],
) -> None:
    f = front(pts)
    assert f
    for p in f:
        assert not any(
            q.attainment >= p.attainment
            and q.gpu_hours <= p.gpu_hours
            and (q.attainment > p.attainment or q.gpu_hours < p.gpu_hours)
            for q in pts
        )
    # the front covers every point: nothing is left of it
    assert uncovered(f, pts) == []
    # sorted by cost, and along it attainment rises
    assert [p.gpu_hours for p in f] == sorted(p.gpu_hours for p in f)
    assert [p.attainment for p in f] == sorted(p.attainment for p in f)


@given(points, st.floats(0, 1))
def test_cheapest_at_is_on_the_front_and_reaches_the_attainment(
    pts: list[Point], target: float
) -> None:
    best = cheapest_at(pts, target)
    if best is None:
        assert all(p.attainment < target for p in pts)
        return
    assert best.attainment >= target
    assert all(p.gpu_hours >= best.gpu_hours for p in pts if p.attainment >= target)
    cover = cheapest_at(front(pts), target)
    assert cover is not None
    assert cover.gpu_hours == best.gpu_hours
