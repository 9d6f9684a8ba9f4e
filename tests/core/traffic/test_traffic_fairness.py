"""Tenants share a busy pool's in-flight bound fairly (max-min)."""

from __future__ import annotations

import math

import pytest

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
