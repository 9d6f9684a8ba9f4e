"""A request's SLO class: the one it names, else its tenant's default, else the pool's;
unknown classes and tenants are refused with the known names."""

from __future__ import annotations

import pytest

from preheat.core.traffic.classes import (
    TenantQuota,
    Traffic,
    TrafficClass,
    UnknownClass,
    legacy_traffic,
)

INTERACTIVE = TrafficClass(name="interactive", ttft_ms=500, priority=0, sheddable=False)
BATCH = TrafficClass(name="batch", ttft_ms=20_000, priority=2)
TRAFFIC = Traffic(
    classes=(INTERACTIVE, BATCH),
    default_class="interactive",
    tenants=(
        TenantQuota(name="etl", requests_per_s=5, default_class="batch"),
        TenantQuota(name="demo", requests_per_s=1, request_burst=2),
    ),
)


@pytest.mark.parametrize(
    ("requested", "tenant", "expected"),
    [
        ("batch", "", "batch"),  # named: wins
        ("interactive", "etl", "interactive"),  # named beats the tenant's default
        ("", "etl", "batch"),  # the tenant's default
        ("", "demo", "interactive"),  # tenant without a default: the pool's
        ("", "", "interactive"),  # nobody: the pool's
    ],
)
def test_a_requests_class_is_named_then_the_tenants_then_the_pools(
    requested: str, tenant: str, expected: str
) -> None:
    got = TRAFFIC.resolve(requested, tenant)
    assert got is not None
    assert got.name == expected


def test_an_unknown_class_is_refused_with_the_known_ones() -> None:
    with pytest.raises(
        UnknownClass, match=r"unknown slo_class 'gold' \(known: batch, interactive\)"
    ):
        TRAFFIC.resolve("gold")


def test_an_unknown_tenant_is_refused_unless_a_star_entry_covers_it() -> None:
    with pytest.raises(UnknownClass, match=r"unknown tenant 'mallory'.*known: demo, etl"):
        TRAFFIC.check_tenant("mallory")
    TRAFFIC.check_tenant("")  # no tenant named: no quota applies
    TRAFFIC.check_tenant("demo")
    star = Traffic(classes=(INTERACTIVE,), tenants=(TenantQuota(name="*", requests_per_s=3),))
    star.check_tenant("mallory")
    q = star.quota("mallory")
    assert q is not None
    assert q.name == "*"


def test_a_pool_without_classes_gives_none_and_the_old_map_keeps_the_requests_priority() -> None:
    assert Traffic().resolve("") is None
    old = legacy_traffic({"fast": 100.0})
    assert old.resolve("") is None  # no default class in the old map
    fast = old.resolve("fast")
    assert fast is not None
    assert fast.ttft_ms == 100.0
    assert not old.sets_priority
    assert old.deadlines_ms == {"fast": 100.0}
    assert TRAFFIC.deadlines_ms == {"interactive": 500, "batch": 20_000}


def test_bucket_depths_default_to_one_seconds_and_one_minutes_worth() -> None:
    q = TenantQuota(name="t", requests_per_s=0.5, tokens_per_min=6000)
    assert q.request_depth == 1.0
    assert q.token_depth == 6000
    assert TenantQuota(name="t", requests_per_s=1, request_burst=2).request_depth == 2
