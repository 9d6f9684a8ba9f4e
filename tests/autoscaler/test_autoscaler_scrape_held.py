"""Direct scrape with routers: requests held at the router wake a pool at zero (pure)."""

from __future__ import annotations

from preheat.autoscaler.scrape import Scrape, compute
from preheat.autoscaler.source import SignalQuery
from preheat.core.pool import Objective, Signal

QUERY = SignalQuery(objectives=(Objective(Signal.TTFT, 95.0, 500.0),), window_s=10.0)
CONCURRENCY = Objective(Signal.CONCURRENCY, 0.0, 8.0)


def test_no_worker_and_nothing_held_is_stale():
    s = compute({}, QUERY, now=5.0, stale_after_s=30.0, held=0.0)
    assert s.stale
    assert s.error == "no workers to scrape"


def test_no_worker_but_requests_held_is_a_fresh_wake_signal():
    s = compute({}, QUERY, now=5.0, stale_after_s=30.0, held=3.0)
    assert not s.stale
    assert (s.observed_at, s.in_flight, s.requests) == (5.0, 3.0, 3.0)
    assert [(v.signal, v.value, v.observed_at) for v in s.values] == [(Signal.TTFT, None, 5.0)]


def test_held_requests_count_as_in_flight():
    scrapes = [Scrape(t=t, ok=True, waiting=1.0, running=2.0) for t in (1.0, 2.0)]
    s = compute({"w": scrapes}, QUERY, now=2.0, stale_after_s=30.0, held=4.0)
    assert s.in_flight == 7.0


def test_a_concurrency_objective_reads_what_is_held_at_zero_and_running_plus_waiting():
    query = SignalQuery(objectives=(QUERY.objectives[0], CONCURRENCY), window_s=10.0)
    woken = compute({}, query, now=5.0, stale_after_s=30.0, held=3.0)
    conc = woken.find(CONCURRENCY)
    assert conc is not None
    assert (conc.value, conc.stale) == (3.0, False)
    scrapes = [Scrape(t=t, ok=True, waiting=1.0, running=2.0) for t in (1.0, 2.0)]
    serving = compute({"w": scrapes}, query, now=2.0, stale_after_s=30.0, held=4.0)
    conc = serving.find(CONCURRENCY)
    assert conc is not None
    assert (conc.value, conc.stale, conc.samples) == (7.0, False, 1)
