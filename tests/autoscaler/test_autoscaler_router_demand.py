"""The routers' demand counters as the direct-scrape source reads them (pure): rates over the
window from the router's ``/metrics`` text, summed over routers, a restarted router's reset
counters, and how the signals read to a person."""

from __future__ import annotations

from dataclasses import replace

import pytest

from preheat.autoscaler.describe import describe_signals
from preheat.autoscaler.scrape import RouterScrape, Scrape, compute, parse_router, router_demand
from preheat.autoscaler.source import SignalQuery
from preheat.core.autoscaling import Demand, Signals, SignalValue
from preheat.core.pool import AutoscalingConfig, Objective, PanicConfig, ScaleRule, Signal

TTFT95 = Objective(Signal.TTFT, 95.0, 400.0)
QUERY = SignalQuery((TTFT95,), window_s=60.0)

PAGE = """\
# HELP preheat_router_arrivals_total Requests that arrived for the pool
# TYPE preheat_router_arrivals_total counter
preheat_router_arrivals_total{{pool="chat"}} {arrivals}
preheat_router_arrivals_total{{pool="other"}} 1000.0
# TYPE preheat_router_refused_total counter
preheat_router_refused_total{{pool="chat",reason="rejected"}} {rejected}
preheat_router_refused_total{{pool="chat",reason="unavailable"}} {unavailable}
preheat_router_refused_total{{pool="other",reason="rejected"}} 900.0
# TYPE preheat_router_queue_depth gauge
preheat_router_queue_depth {held}
"""


def page(arrivals: float, rejected: float, unavailable: float = 0.0, held: float = 0.0) -> str:
    return PAGE.format(arrivals=arrivals, rejected=rejected, unavailable=unavailable, held=held)


def test_a_routers_page_is_read_for_its_pool() -> None:
    s = parse_router(5.0, page(40.0, 10.0, 2.0, held=3.0), pool="chat")
    assert (s.t, s.ok, s.counted, s.arrivals, s.held) == (5.0, True, True, 40.0, 3.0)
    assert dict(s.refused) == {"rejected": 10.0, "unavailable": 2.0}
    every = parse_router(5.0, page(40.0, 10.0), pool=None)
    assert every.arrivals == 1040.0
    assert not parse_router(5.0, "preheat_router_queue_depth 0\n").counted  # an older router


def test_rates_over_the_window_from_the_newest_scrape_at_or_before_its_start() -> None:
    history = {
        "r": [
            parse_router(0.0, page(0.0, 0.0), "chat"),
            parse_router(40.0, page(100.0, 10.0), "chat"),
            parse_router(70.0, page(400.0, 160.0, 20.0), "chat"),
            parse_router(100.0, page(700.0, 310.0, 20.0), "chat"),
        ]
    }
    d = router_demand(history, now=100.0, window_s=60.0)  # from t=40 to t=100
    assert d is not None
    assert d.window_s == 60.0
    assert d.arrival_rate == pytest.approx(10.0)
    assert d.refused_rate == pytest.approx(5.0 + 20.0 / 60.0)
    assert d.by_reason == (
        ("rejected", pytest.approx(5.0)),
        ("unavailable", pytest.approx(20.0 / 60.0)),
    )


def test_routers_are_summed_and_a_reset_counter_counts_from_zero() -> None:
    a = [RouterScrape(0.0, True, 100.0, {"rejected": 50.0}, counted=True)]
    a.append(RouterScrape(60.0, True, 160.0, {"rejected": 80.0}, counted=True))
    restarted = [RouterScrape(0.0, True, 500.0, {"rejected": 300.0}, counted=True)]
    restarted.append(RouterScrape(60.0, True, 120.0, {"rejected": 0.0}, counted=True))
    d = router_demand({"a": a, "b": restarted}, now=60.0, window_s=60.0)
    assert d is not None
    assert d.arrival_rate == pytest.approx((60.0 + 120.0) / 60.0)
    assert d.refused_rate == pytest.approx(30.0 / 60.0)


def test_no_demand_without_two_scrapes_of_the_counters() -> None:
    one = {"r": [RouterScrape(0.0, True, 5.0, counted=True)]}
    assert router_demand(one, now=10.0, window_s=60.0) is None
    failed = {"r": [RouterScrape(0.0, False), RouterScrape(5.0, False)]}
    assert router_demand(failed, now=10.0, window_s=60.0) is None
    old = {"r": [RouterScrape(0.0, True), RouterScrape(5.0, True)]}  # no counters exported
    assert router_demand(old, now=10.0, window_s=60.0) is None


def test_refused_requests_count_as_requests_in_the_snapshot() -> None:
    scrapes = [Scrape(t=t, ok=True, waiting=0.0, running=0.0) for t in (0.0, 60.0)]
    d = Demand(arrival_rate=2.0, refused_rate=2.0, window_s=60.0, by_reason=(("rejected", 2.0),))
    s = compute({"w": scrapes}, QUERY, now=60.0, stale_after_s=30.0, demand=d)
    assert s.demand == d
    assert s.requests == 120.0  # nothing served, but 120 requests arrived
    assert compute({"w": scrapes}, QUERY, now=60.0, stale_after_s=30.0).requests == 0.0


def test_the_signals_text_names_what_the_routers_refused() -> None:
    cfg = AutoscalingConfig(
        objectives=(TTFT95,),
        window_s=60.0,
        scale_up=ScaleRule(0.0, 15.0, 4),
        scale_down=ScaleRule(300.0, 120.0, 1),
        tolerance=0.1,
        panic=PanicConfig(False, 2.0, 10.0),
    )
    values = (SignalValue(Signal.TTFT, 95.0, 210.0, 1.0),)
    plain = Signals(values=values, observed_at=1.0, stale=False)
    assert describe_signals(cfg, plain) == "ttft_p95 210/400"
    refusing = Signals(
        values=values,
        observed_at=1.0,
        stale=False,
        demand=Demand(arrival_rate=12.0, refused_rate=5.76, window_s=60.0),
    )
    assert describe_signals(cfg, refusing) == "ttft_p95 210/400, refused 48% of 12.0 req/s"
    noisy = replace(plain, demand=Demand(12.0, 0.0, 60.0, arrival_dispersion=1.4))
    assert describe_signals(cfg, noisy) == "ttft_p95 210/400"  # within Poisson noise
    bursty = replace(plain, demand=Demand(12.0, 0.0, 60.0, arrival_dispersion=9.0))
    assert describe_signals(cfg, bursty) == (
        "ttft_p95 210/400, arrivals in bursts of 4.8 (dispersion 9.0)"
    )


def test_requests_over_a_tenants_quota_are_not_demand() -> None:
    """Rate-limited requests arrived but a bigger pool would refuse them too (issue 18's
    quotas): the arrivals the policy reads leave them out."""
    limited = (
        "# TYPE preheat_router_rate_limited_total counter\n"
        'preheat_router_rate_limited_total{pool="chat",tenant="noisy",limit="requests"} 25.0\n'
        'preheat_router_rate_limited_total{pool="other",tenant="noisy",limit="requests"} 7.0\n'
    )
    s = parse_router(5.0, page(40.0, 10.0) + limited, pool="chat")
    assert s.arrivals == 15.0
    assert parse_router(5.0, page(40.0, 10.0) + limited, pool=None).arrivals == 1040.0 - 32.0


BURST_PAGE = """\
# TYPE preheat_router_arrivals_total counter
preheat_router_arrivals_total{{pool="chat"}} {arrivals}
preheat_router_arrivals_total{{pool="other"}} 1000.0
# TYPE preheat_router_arrival_burst_total counter
preheat_router_arrival_burst_total{{pool="chat"}} {burst}
preheat_router_arrival_burst_total{{pool="other"}} 99999.0
# TYPE preheat_router_rate_limited_total counter
preheat_router_rate_limited_total{{pool="chat",tenant="t",limit="requests"}} {limited}
"""


def test_the_arrivals_dispersion_is_read_from_the_burst_counter_over_the_window() -> None:
    """``increase(burst) / (2 * increase(arrivals))``, both counted before the quota's
    refusals are taken off the arrivals, summed over routers; a router without the
    counter (an older one) adds nothing to it."""

    def burst_page(arrivals: float, burst: float, limited: float = 0.0) -> str:
        return BURST_PAGE.format(arrivals=arrivals, burst=burst, limited=limited)

    s = parse_router(5.0, burst_page(40.0, 90.0, limited=4.0), pool="chat")
    assert (s.arrivals, s.burst, s.burst_arrivals) == (36.0, 90.0, 40.0)
    assert parse_router(5.0, page(40.0, 0.0), pool="chat").burst is None
    history = {
        "a": [
            parse_router(0.0, burst_page(100.0, 50.0), "chat"),
            parse_router(60.0, burst_page(400.0, 950.0, limited=30.0), "chat"),
        ],
        "b": [  # a reset burst counter counts from zero, as the arrivals do
            parse_router(0.0, burst_page(500.0, 7000.0), "chat"),
            parse_router(60.0, burst_page(100.0, 300.0), "chat"),
        ],
        "older": [
            RouterScrape(0.0, True, 0.0, counted=True),
            RouterScrape(60.0, True, 600.0, counted=True),
        ],
    }
    d = router_demand(history, now=60.0, window_s=60.0)
    assert d is not None
    assert d.arrival_rate == pytest.approx((270.0 + 100.0 + 600.0) / 60.0)
    assert d.arrival_dispersion == pytest.approx((900.0 + 300.0) / (2.0 * (300.0 + 100.0)))
    plain = {
        "r": [
            RouterScrape(0.0, True, 0.0, counted=True),
            RouterScrape(60.0, True, 60.0, counted=True),
        ]
    }
    got = router_demand(plain, now=60.0, window_s=60.0)
    assert got is not None
    assert got.arrival_dispersion is None
