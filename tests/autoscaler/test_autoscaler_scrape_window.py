"""A worker scraped once, beside workers scraped twice or more (pure ``compute``): it is left
out of the window's figures, as PromQL's ``increase`` leaves out a series with one sample,
and does not make the snapshot stale; a pool where no worker has two scrapes has no window."""

from __future__ import annotations

from preheat.autoscaler.scrape import Scrape, compute
from preheat.autoscaler.source import SignalQuery
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
