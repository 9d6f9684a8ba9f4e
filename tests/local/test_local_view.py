"""The live view's numbers (bucket deltas over a window) and its rendering, without a
terminal."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from rich.console import Console

from preheat.core.autoscaling import ReplicaCounts
from preheat.local.runtime import EventLine, PoolSnapshot
from preheat.local.stats import LiveStats, TrafficView, parse_point
from preheat.local.view import LiveView, LogView, render


def router_text(b100: int, b500: int, total: int, ok: int, rejected: int) -> str:
    return f"""\
# TYPE preheat_router_ttft_seconds histogram
preheat_router_ttft_seconds_bucket{{pool="p",reason="best",le="0.1"}} {b100}
preheat_router_ttft_seconds_bucket{{pool="p",reason="best",le="0.5"}} {b500}
preheat_router_ttft_seconds_bucket{{pool="p",reason="best",le="+Inf"}} {total}
preheat_router_ttft_seconds_count{{pool="p",reason="best"}} {total}
preheat_router_ttft_seconds_sum{{pool="p",reason="best"}} 1.0
# TYPE preheat_router_requests counter
preheat_router_requests_total{{api="grpc",outcome="ok"}} {ok}
preheat_router_requests_total{{api="grpc",outcome="rejected"}} {rejected}
"""


def worker_text(hits: int, queries: int) -> str:
    return f"""\
vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}
vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}
"""


def test_parse_point_reads_router_and_worker_counters():
    p = parse_point(1.0, router_text(1, 2, 3, 3, 1))
    assert p.ttft == ((0.1, 1.0), (0.5, 2.0), (float("inf"), 3.0))
    assert p.requests == {"ok": 3.0, "rejected": 1.0}
    w = parse_point(1.0, worker_text(30, 100))
    assert (w.cache_hits, w.cache_queries) == (30.0, 100.0)


def test_view_is_over_the_window_only():
    stats = LiveStats(window_s=10.0)
    # before the window: 100 fast requests that must not count
    stats.add("router", parse_point(0.0, router_text(100, 100, 100, 100, 0)))
    stats.add("router", parse_point(20.0, router_text(100, 100, 100, 100, 0)))
    # in the window: 10 more, all between 100 and 500 ms; 2 rejected
    stats.add("router", parse_point(30.0, router_text(100, 110, 110, 110, 2)))
    stats.add("w-1", parse_point(20.0, worker_text(0, 0)))
    stats.add("w-1", parse_point(30.0, worker_text(25, 100)))
    v = stats.view(now=30.0)
    p50, p95, _p99 = v.ttft_ms
    assert p50 == pytest.approx(300.0)  # the middle of the 100-500 ms bucket
    assert p95 is not None
    assert 100.0 < p95 <= 500.0
    assert v.outcomes == {"ok": 10.0, "rejected": 2.0}
    assert v.rate == pytest.approx(12 / 10)
    assert v.cache_hit_rate == pytest.approx(0.25)


def test_a_restarted_worker_counts_from_zero():
    stats = LiveStats(window_s=10.0)
    stats.add("w-1", parse_point(0.0, worker_text(500, 1000)))
    stats.add("w-1", parse_point(5.0, worker_text(10, 20)))  # counters reset
    assert stats.view(now=5.0).cache_hit_rate == pytest.approx(0.5)


def test_no_traffic_shows_nothing():
    v = LiveStats(window_s=10.0).view(now=1.0)
    assert v.ttft_ms == (None, None, None)
    assert v.cache_hit_rate is None
    assert v.rate == 0.0


def snapshot() -> PoolSnapshot:
    return PoolSnapshot(
        pool="demo",
        engine="sim",
        t_s=42.0,
        desired=3,
        standby_wanted=1,
        counts=ReplicaCounts(active=2, standby=1, warming=1, draining=0),
        workers=(
            {
                "name": "w-1",
                "state": "active",
                "pid": 101,
                "in_flight": 4,
                "running": 3,
                "waiting": 1,
                "kv": 0.25,
                "restarts": 0,
            },
            {
                "name": "w-2",
                "state": "warming",
                "pid": 102,
                "in_flight": 0,
                "running": 0,
                "waiting": 0,
                "kv": 0.0,
                "restarts": 1,
            },
        ),
        traffic=TrafficView(10.0, (120.0, 900.0, 1500.0), 30.0, 3.0, {"ok": 30.0}, 0.4),
        signals="ttft_p95 900/1000",
        decision="ttft p95 2400 ms > 1000 ms over 10 s; +2: 1 standby promoted, 1 new",
        source="direct scrape",
        router="127.0.0.1:5000",
        router_http="http://127.0.0.1:5001",
        out="runs/x",
        events=(EventLine(40.0, "scale_up", "", "ttft p95 2400 ms > 1000 ms"),),
        stopping=False,
    )


def test_render_shows_workers_traffic_and_events():
    console = Console(record=True, width=140, color_system=None)
    console.print(render(snapshot()))
    text = console.export_text()
    assert "want 3 active + 1 standby" in text
    assert "2 active, 1 standby, 1 starting, 0 draining" in text
    assert "3.0 req/s" in text
    assert "cache hit 40%" in text
    assert "p95 900 ms" in text
    assert "w-1" in text
    assert "w-2" in text
    assert "warming" in text
    assert "scale_up" in text
    assert "ttft p95 2400 ms > 1000 ms" in text
    assert "Ctrl-C" in text


def test_log_view_writes_events_and_status(caplog):
    caplog.set_level(logging.INFO, logger="preheat.local")
    view = LogView(every_s=60.0, clock=lambda: 0.0)
    view.event(EventLine(1.0, "crash", "w-2", "pid 7 killed by SIGKILL"))
    view.update(snapshot())
    view.update(snapshot())  # within every_s: no second status line
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["pool_event", "pool_status"]


def test_live_view_shows_every_pool_behind_one_router():
    console = Console(record=True, width=140, color_system=None)
    view = LiveView(console)
    with view:
        view.update(snapshot())
        view.update(replace(snapshot(), pool="code-pool", desired=1))
        view.update(replace(snapshot(), desired=2))  # the first pool again: replaced in place
    text = console.export_text()  # the last frame: both pools, in the order they came
    assert text.count("pool demo ") == 1
    assert text.index("pool demo ") < text.index("pool code-pool ")
    assert "want 2 active" in text  # the first pool's latest snapshot
    assert "want 1 active" in text
    assert "want 3 active" not in text


def test_parse_point_keeps_one_pools_series():
    text = router_text(1, 2, 3, 3, 0).replace('pool="p"', 'pool="other"')
    mine = router_text(5, 6, 7, 7, 0)
    both = parse_point(0.0, text + mine.split("# TYPE preheat_router_requests")[0], pool="p")
    assert dict(both.ttft)[float("inf")] == 7  # only pool p's histogram
    assert parse_point(0.0, text, pool="p").ttft == ()
