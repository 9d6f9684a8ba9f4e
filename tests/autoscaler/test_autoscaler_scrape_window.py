"""A worker scraped once, beside workers scraped twice or more (pure ``compute``): it is left
out of the window's figures, as PromQL's ``increase`` leaves out a series with one sample,
and does not make the snapshot stale; a pool where no worker has two scrapes has no window.
And the histogram bucket a percentile was read in, from either source."""

from __future__ import annotations

from preheat.autoscaler.prometheus import _floor_ms
from preheat.autoscaler.scrape import Scrape, compute
from preheat.autoscaler.source import SignalQuery
from preheat.core import metric_names as mn
from preheat.core.pool import Objective, Signal

TTFT99 = Objective(Signal.TTFT, 99.0, 300.0)
QUERY = SignalQuery((TTFT99,), window_s=30.0)


def ttft(fast: float, slow: float) -> dict[Signal, tuple[tuple[float, float], ...]]:
    """Cumulative TTFT buckets: ``fast`` requests under 0.1 s, ``slow`` more under 1 s."""
    return {Signal.TTFT: ((0.1, fast), (1.0, fast + slow), (float("inf"), fast + slow))}


def scrape(t: float, fast: float, slow: float) -> Scrape:
    return Scrape(t=t, ok=True, histograms=ttft(fast, slow), waiting=1.0, running=2.0)


def test_a_worker_scraped_once_is_left_out_and_the_pool_is_read() -> None:
    history = {
        "old": [scrape(0.0, 0.0, 0.0), scrape(15.0, 50.0, 0.0), scrape(30.0, 100.0, 0.0)],
        # just warm: its one scrape holds slow requests whose increase is not known yet
        "new": [scrape(30.0, 0.0, 40.0)],
    }
    s = compute(history, QUERY, now=30.0, stale_after_s=30.0)
    assert not s.stale, s.error
    assert s.error == ""
    (ttft99,) = s.values
    assert not ttft99.stale
    assert ttft99.samples == 100.0  # the covered worker's 100 requests, all under 100 ms
    assert ttft99.value is not None
    assert ttft99.value <= 100.0
    assert s.in_flight == 6.0  # its gauges count: they need no window


def test_a_pool_where_no_worker_has_two_scrapes_has_no_window() -> None:
    history = {"a": [scrape(30.0, 10.0, 0.0)], "b": [scrape(30.0, 5.0, 0.0)]}
    s = compute(history, QUERY, now=30.0, stale_after_s=30.0)
    assert s.stale
    assert "a: window not covered yet" in s.error
    assert "b: window not covered yet" in s.error


def test_a_worker_scraped_once_whose_scrape_then_failed_still_makes_it_stale() -> None:
    history = {
        "old": [scrape(0.0, 0.0, 0.0), scrape(30.0, 100.0, 0.0)],
        "new": [scrape(15.0, 0.0, 0.0), Scrape(t=30.0, ok=False, error="connection refused")],
    }
    s = compute(history, QUERY, now=30.0, stale_after_s=30.0)
    assert s.stale
    assert "new: connection refused" in s.error


def test_a_percentile_carries_the_bucket_it_was_read_in() -> None:
    """100 requests under 100 ms and 3 in (0.1, 1] s: the p99 interpolates inside (100,
    1,000] ms, and the snapshot says so (``floor``), for the policy to tell a reading
    inside the target's bucket from one the histogram shows over it."""
    history = {"w": [scrape(0.0, 0.0, 0.0), scrape(30.0, 100.0, 3.0)]}
    (ttft99,) = compute(history, QUERY, now=30.0, stale_after_s=30.0).values
    assert ttft99.value is not None
    assert 100.0 < ttft99.value <= 1000.0
    assert ttft99.floor == 100.0


def test_prometheus_reads_the_floor_from_vllms_buckets() -> None:
    assert _floor_ms(mn.VLLM_TIME_TO_FIRST_TOKEN_SECONDS, 2300.0) == 1000.0  # (1, 2.5] s
    assert _floor_ms(mn.VLLM_TIME_TO_FIRST_TOKEN_SECONDS, 600.0) == 500.0
    assert _floor_ms(mn.VLLM_E2E_REQUEST_LATENCY_SECONDS, 2300.0) == 2000.0
    assert _floor_ms("my_own_ttft_seconds", 2300.0) is None  # buckets not known
    assert _floor_ms(mn.VLLM_TIME_TO_FIRST_TOKEN_SECONDS, None) is None
