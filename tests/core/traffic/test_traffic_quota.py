"""Token buckets with the time injected: a burst, a refill rate, a retry-after that says
when the cost will be there, and reconciliation of an estimate."""

from __future__ import annotations

import math

import pytest

from preheat.core.traffic.quota import full, refill, refund, take


def test_a_burst_of_two_at_one_per_second_admits_two_then_says_when() -> None:
    b = full(2.0, now=0.0)
    outcomes = []
    for _ in range(3):
        t = take(b, rate=1.0, depth=2.0, cost=1.0, now=0.0)
        outcomes.append(t.ok)
        b = t.bucket
    assert outcomes == [True, True, False]
    assert t.retry_after_s == pytest.approx(1.0)
    assert t.remaining == 0.0
    assert t.reset_s == pytest.approx(2.0)
    # half a second later it still needs half a second; at the retry-after it is served
    assert take(b, 1.0, 2.0, 1.0, now=0.5).retry_after_s == pytest.approx(0.5)
    assert take(b, 1.0, 2.0, 1.0, now=1.0).ok


def test_over_any_window_no_more_than_rate_times_window_plus_burst_is_admitted() -> None:
    b = full(2.0, 0.0)
    admitted = 0
    for k in range(1000):  # 100 requests/s offered for 10 s against 1/s burst 2
        t = take(b, 1.0, 2.0, 1.0, now=k * 0.01)
        b = t.bucket
        admitted += t.ok
    assert admitted <= 2 + math.ceil(10 * 1.0)
    assert admitted >= 11


def test_the_refill_stops_at_the_depth_and_a_refund_gives_back_the_unused_part() -> None:
    b = full(6000.0, 0.0)
    t = take(b, 100.0, 6000.0, 5000.0, 0.0)  # prompt + max_tokens
    assert t.ok
    assert refill(t.bucket, 100.0, 6000.0, 100.0).level == 6000.0
    back = refund(t.bucket, 100.0, 6000.0, 4000.0, 0.0)  # it generated 4000 fewer
    assert back.level == pytest.approx(5000.0)


def test_a_cost_larger_than_the_bucket_is_refused_with_a_full_buckets_wait() -> None:
    t = take(full(10.0, 0.0), rate=1.0, depth=10.0, cost=50.0, now=0.0)
    assert not t.ok
    assert t.retry_after_s == 0.0  # min(cost, depth) is there: the caller says why it fails
