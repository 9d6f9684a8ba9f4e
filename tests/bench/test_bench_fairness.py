"""The pure parts of ``scripts/bench_fairness.py``: its pool file gives every tenant the
quota, and its Retry-After check finds a wait that was certainly too long, too short or
badly rounded, and nothing in a right one or one that cannot be judged."""

from __future__ import annotations

from types import ModuleType

import pytest
from scriptkit import load_script

from preheat.api.poolfile import load_pool


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("bench_fairness")


def send(bench: ModuleType, sent: float, status: int, wait_ms: float = 0.0) -> object:
    """A request answered 5 ms after it was sent; a 429's Retry-After rounded up."""
    whole = max(1, -(-wait_ms // 1000)) if status == 429 else 0.0
    return bench.Send(sent, sent + 0.005, status, wait_ms, float(whole))


def test_the_pool_file_gives_every_tenant_the_quota(bench: ModuleType) -> None:
    pool = load_pool(bench.pool_file(2.0, 4.0).encode(), source="fair.yaml")
    (tenant,) = pool.config.traffic.tenants
    assert tenant.name == "*"
    assert (tenant.requests_per_s, tenant.request_burst) == (2.0, 4.0)
    assert (pool.config.replicas.min, pool.config.replicas.max) == (1, 1)


def test_a_right_retry_after_has_no_errors(bench: ModuleType) -> None:
    sends = [
        send(bench, 0.0, 429, 400.0),  # next token at 0.4 s
        send(bench, 0.2, 429, 200.0),  # the same token
        send(bench, 0.5, 200),  # first after the wait: served
        send(bench, 0.6, 429, 1400.0),
        send(bench, 2.1, 200),
    ]
    assert bench.retry_after_errors(sends) == {"too_long": 0, "too_short": 0, "header": 0}


def test_a_request_served_within_the_wait_means_it_was_too_long(bench: ModuleType) -> None:
    sends = [send(bench, 0.0, 429, 1000.0), send(bench, 0.5, 200)]
    assert bench.retry_after_errors(sends)["too_long"] == 1


def test_one_sent_before_the_refusal_was_answered_is_not_judged_too_long(
    bench: ModuleType,
) -> None:
    # sent 2 ms after the 429's request, before its answer: it may have been charged first
    sends = [send(bench, 0.0, 429, 1000.0), send(bench, 0.002, 200)]
    assert bench.retry_after_errors(sends)["too_long"] == 0


def test_a_refusal_after_the_wait_means_it_was_too_short(bench: ModuleType) -> None:
    sends = [send(bench, 0.0, 429, 100.0), send(bench, 0.5, 429, 100.0)]
    # the first 429's wait ended by 0.105 s and the request at 0.5 s was refused again; the
    # second one has nothing after it
    assert bench.retry_after_errors(sends) == {"too_long": 0, "too_short": 1, "header": 0}


def test_a_refusal_after_a_token_another_request_may_have_taken_is_not_judged(
    bench: ModuleType,
) -> None:
    sends = [
        send(bench, 0.0, 429, 500.0),
        bench.Send(0.45, 0.56, 200, 0.0, 0.0),  # charged anywhere in [0.45, 0.56]
        send(bench, 0.52, 429, 500.0),
    ]
    assert bench.retry_after_errors(sends)["too_short"] == 0


def test_the_whole_seconds_header_is_the_wait_rounded_up(bench: ModuleType) -> None:
    sends = [bench.Send(0.0, 0.005, 429, 1200.0, 1.0), send(bench, 5.0, 200)]
    assert bench.retry_after_errors(sends)["header"] == 1
