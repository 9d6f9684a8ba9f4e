"""Tenants share a busy pool's in-flight bound fairly (weighted max-min)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from preheat.core.traffic.fairness import admit, fair_shares


def test_max_min_shares_leave_what_a_small_tenant_does_not_use_to_the_others() -> None:
    assert fair_shares(12, {"a": 2, "b": 20, "c": 20}) == {"a": 2.0, "b": 5.0, "c": 5.0}
    assert fair_shares(12, {"a": 20, "b": 20}) == {"a": 6.0, "b": 6.0}
    assert fair_shares(12, {"a": 1, "b": 1}) == {"a": 1.0, "b": 1.0}


@pytest.mark.parametrize(
    ("tenant", "held", "admitted"),
    [
        ("noisy", {"noisy": 7, "calm": 1}, False),  # busy, over its share of 4 (of 8)
        ("calm", {"noisy": 7, "calm": 1}, True),  # under its share: the free slot is its
        ("noisy", {"noisy": 3, "calm": 1}, True),  # not busy (4 < 6 of 8): no shares
        ("noisy", {"noisy": 7}, True),  # the only active tenant takes what it wants
    ],
)
def test_a_busy_pool_refuses_a_tenant_at_its_share_and_admits_one_under_it(
    tenant: str, held: dict[str, int], admitted: bool
) -> None:
    seen = {t: 99.0 for t in held}
    v = admit(tenant, held, seen, limit=8, now=100.0)
    assert v.admitted is admitted


def test_a_tenant_seen_lately_counts_even_with_nothing_in_flight() -> None:
    held = {"noisy": 8}
    v = admit("noisy", held, {"noisy": 100.0, "calm": 95.0}, limit=8, now=100.0)
    assert not v.admitted
    assert v.share == pytest.approx(7.0)  # calm wants one: max-min leaves noisy seven
    gone = admit("noisy", held, {"noisy": 100.0, "calm": 80.0}, limit=8, now=100.0)
    assert gone.admitted
    assert math.isinf(gone.share)


# --- weighted max-min (a tenants-table entry's ``weight``) -------------------------------


def test_shares_are_proportional_to_weights_among_tenants_that_want_more() -> None:
    assert fair_shares(12, {"a": 20, "b": 20}, {"a": 2.0}) == {"a": 8.0, "b": 4.0}
    # c wants less than its weighted share: what it leaves is split 3:1 again
    shares = fair_shares(12, {"a": 20, "b": 20, "c": 1}, {"a": 3.0, "c": 5.0})
    assert shares == pytest.approx({"a": 8.25, "b": 2.75, "c": 1.0})


def test_a_weighted_tenant_at_its_larger_share_is_admitted_where_an_unweighted_one_is_not() -> None:
    held = {"gold": 5, "calm": 2}  # busy: 7 of 8
    seen = {t: 99.0 for t in held}
    plain = admit("gold", held, seen, limit=8, now=100.0)
    assert not plain.admitted  # equal weights: gold's share is 5 of 8 (calm wants 3)
    weights = {"gold": 3.0, "calm": 1.0}
    heavy = admit("gold", held, seen, limit=8, now=100.0, weight=weights.__getitem__)
    assert heavy.admitted
    assert heavy.share == pytest.approx(6.0)


def test_a_weight_must_be_positive() -> None:
    with pytest.raises(ValueError, match="'b'"):
        fair_shares(4, {"a": 1, "b": 2}, {"b": 0.0})


@settings(max_examples=300)
@given(
    limit=st.integers(min_value=0, max_value=200),
    wants=st.dictionaries(
        st.sampled_from("abcdefgh"),
        st.tuples(st.integers(min_value=0, max_value=100), st.floats(0.1, 10.0)),
        max_size=8,
    ),
)
def test_weighted_max_min_properties(limit: int, wants: dict[str, tuple[int, float]]) -> None:
    demand = {t: d for t, (d, _) in wants.items()}
    weights = {t: w for t, (_, w) in wants.items()}
    shares = fair_shares(limit, demand, weights)
    assert set(shares) == set(demand)
    assert sum(shares.values()) <= limit + 1e-6  # never more than the bound
    for t, s in shares.items():
        assert -1e-9 <= s <= demand[t] + 1e-9  # never more than it wants
    unsatisfied = [t for t in demand if shares[t] < demand[t] - 1e-6]
    if unsatisfied:
        # the bound is used up, and the unsatisfied share it by weight (one level) ...
        assert sum(shares.values()) == pytest.approx(limit)
        levels = {shares[t] / weights[t] for t in unsatisfied}
        assert max(levels) - min(levels) <= 1e-6 * max(1.0, max(levels))
        # ... a level no satisfied tenant's demand per weight exceeds (else it was capped)
        level = min(levels)
        for t in demand:
            if t not in unsatisfied:
                assert demand[t] / weights[t] <= level + 1e-6
