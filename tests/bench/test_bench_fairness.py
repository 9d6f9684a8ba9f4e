"""The pure parts of ``scripts/bench_fairness.py``: its pool file gives every tenant the
quota, and its Retry-After check finds a wait that was too long, too short or badly
rounded, and nothing in a right one."""

from __future__ import annotations

from types import ModuleType

import pytest
from scriptkit import load_script

from preheat.api.poolfile import load_pool


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("bench_fairness")


def test_the_pool_file_gives_every_tenant_the_quota(bench: ModuleType) -> None:
    pool = load_pool(bench.pool_file(2.0, 4.0).encode(), source="fair.yaml")
    (tenant,) = pool.config.traffic.tenants
    assert tenant.name == "*"
    assert (tenant.requests_per_s, tenant.request_burst) == (2.0, 4.0)
    assert (pool.config.replicas.min, pool.config.replicas.max) == (1, 1)


def test_a_right_retry_after_has_no_errors(bench: ModuleType) -> None:
    sends = [
        (0.0, 429, 400.0, 1.0),  # next token at 0.4 s
        (0.2, 429, 200.0, 1.0),  # the same token
        (0.5, 200, 0.0, 0.0),  # first after the wait: served
        (0.6, 429, 1400.0, 2.0),
        (2.1, 200, 0.0, 0.0),
    ]
    assert bench.retry_after_errors(sends) == {"too_long": 0, "too_short": 0, "header": 0}


def test_a_request_served_within_the_wait_means_it_was_too_long(bench: ModuleType) -> None:
    sends = [(0.0, 429, 1000.0, 1.0), (0.5, 200, 0.0, 0.0)]
    assert bench.retry_after_errors(sends)["too_long"] == 1


def test_a_refusal_after_the_wait_means_it_was_too_short(bench: ModuleType) -> None:
    sends = [(0.0, 429, 100.0, 1.0), (0.5, 429, 100.0, 1.0)]
    # the first 429's wait ended at 0.1 s and the request at 0.5 s was refused again; the
    # second one has nothing after it
    assert bench.retry_after_errors(sends) == {"too_long": 0, "too_short": 1, "header": 0}


def test_one_sent_within_the_tolerance_of_the_wait_is_not_judged(bench: ModuleType) -> None:
    sends = [(0.0, 429, 500.0, 1.0), (0.505, 429, 500.0, 1.0)]
    assert bench.retry_after_errors(sends)["too_short"] == 0


def test_the_whole_seconds_header_is_the_wait_rounded_up(bench: ModuleType) -> None:
    sends = [(0.0, 429, 1200.0, 1.0), (5.0, 200, 0.0, 0.0)]
    assert bench.retry_after_errors(sends)["header"] == 1
