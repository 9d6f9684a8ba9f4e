"""EndpointStore against real sim workers on loopback (static discovery)."""

from __future__ import annotations

import asyncio

import pytest
from endpointkit import eventually, running_store, sim_workers

from preheat.router.endpoints import EndpointStore, StaticDiscovery


async def test_static_discovery_shows_workers_with_load_and_topology() -> None:
    async with sim_workers(3, zones=["a", "b", "c"], regions=["eu", "eu", "us"]) as workers:
        source = StaticDiscovery([w.discovered() for w in workers])
        async with running_store(source, pool="p") as store:
            await store.wait_ready(3, timeout_s=10)
            snap = store.snapshot()
            assert [e.id for e in snap] == ["w-0", "w-1", "w-2"]
            assert [(e.zone, e.region) for e in snap] == [("a", "eu"), ("b", "eu"), ("c", "us")]
            for e in snap:
                assert e.pool == "p"
                assert e.block_size == 4
                assert e.max_num_seqs == 8
                assert e.num_running == 0
                assert e.metrics_at is not None
                assert e.rtt_ms is not None
                assert e.address.startswith("127.0.0.1:")


async def test_discovery_zone_overrides_status_zone() -> None:
    async with sim_workers(1, zones=["a"], regions=["eu"]) as workers:
        source = StaticDiscovery([workers[0].discovered(zone="z9")])
        async with running_store(source) as store:
            await store.wait_ready(1, timeout_s=10)
            (e,) = store.snapshot()
            assert (e.zone, e.region) == ("z9", "eu")


async def test_demoted_worker_leaves_snapshot_and_returns_on_promote() -> None:
    async with sim_workers(2) as workers:
        source = StaticDiscovery([w.discovered() for w in workers])
        async with running_store(source) as store:
            await store.wait_ready(2, timeout_s=10)
            await workers[1].server.demote()
            await eventually(lambda: [e.id for e in store.snapshot()] == ["w-0"])
            (info,) = [v for v in store.all_endpoints() if v.id == "w-1"]
            assert info.lifecycle == "standby"
            assert info.healthy
            assert not info.routable
            await workers[1].server.promote()
            await eventually(lambda: len(store.snapshot()) == 2)


async def test_stopped_worker_leaves_snapshot_without_hanging() -> None:
    async with sim_workers(2) as workers:
        source = StaticDiscovery([w.discovered() for w in workers])
        async with running_store(source, status_timeout_s=0.5) as store:
            await store.wait_ready(2, timeout_s=10)
            await asyncio.wait_for(workers[0].server.stop(), 20)
            await eventually(lambda: [e.id for e in store.snapshot()] == ["w-1"], 10)
            (info,) = [v for v in store.all_endpoints() if v.id == "w-0"]
            assert not info.healthy
            assert info.last_error.startswith("Status:")


async def test_unknown_endpoint_never_ready_times_out_with_reason() -> None:
    source = StaticDiscovery(["127.0.0.1:1"])
    async with running_store(source, status_timeout_s=0.2) as store:
        with pytest.raises(TimeoutError, match=r"127\.0\.0\.1:1"):
            await store.wait_ready(1, timeout_s=0.5)
        assert store.snapshot() == ()


async def test_in_flight_accounting_and_rtt() -> None:
    async with sim_workers(1) as workers:
        source = StaticDiscovery([workers[0].discovered()])
        async with running_store(source) as store:
            await store.wait_ready(1, timeout_s=10)
            store.request_started("w-0")
            store.request_started("w-0")
            assert store.snapshot()[0].in_flight == 2
            store.first_token("w-0", ttft_s=0.050, server_ttft_ms=40.0)
            assert store.snapshot()[0].in_flight == 1
            assert store.snapshot()[0].observed_ttft_ms == pytest.approx(40.0)
            # past its first token the request decodes there until it ends
            assert store.snapshot()[0].decoding == 1
            store.request_done("w-0")
            assert store.snapshot()[0].decoding == 0
            store.request_done("w-0")  # never below zero
            assert store.snapshot()[0].decoding == 0
            store.request_failed("w-0")
            assert store.snapshot()[0].in_flight == 0
            store.request_failed("w-0")  # never below zero
            assert store.snapshot()[0].in_flight == 0
            store.request_started("nope")  # unknown ids are ignored

            store.inject_rtt("w-0", 42.0)
            assert store.snapshot()[0].rtt_ms == 42.0
            await asyncio.sleep(0.2)  # Status pings keep coming; the injected value holds
            assert store.snapshot()[0].rtt_ms == 42.0
            store.inject_rtt("w-0", None)
            assert store.snapshot()[0].rtt_ms != 42.0


async def test_rtt_injected_before_discovery_applies() -> None:
    async with sim_workers(1) as workers:
        source = StaticDiscovery([workers[0].discovered()])
        store = EndpointStore(source, refresh_interval_s=0.05)
        store.inject_rtt("w-0", 7.0)
        task = asyncio.create_task(store.run())
        try:
            await store.wait_ready(1, timeout_s=10)
            assert store.snapshot()[0].rtt_ms == 7.0
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_removed_endpoint_closes_and_forgets() -> None:
    async with sim_workers(2) as workers:
        source = StaticDiscovery([w.discovered() for w in workers])
        async with running_store(source) as store:
            await store.wait_ready(2, timeout_s=10)
            store.history.record("w-1", [1, 2, 3], 0.0)
            channel = store.channel("w-1")
            assert store.channel("w-1") is channel
            source.set_endpoints([workers[0].discovered()])
            await eventually(lambda: [e.id for e in store.snapshot()] == ["w-0"])
            assert [v.id for v in store.all_endpoints()] == ["w-0"]
            assert store.history.match([1, 2, 3], 0.0) == {}
            with pytest.raises(KeyError):
                store.channel("w-1")


async def test_metrics_at_is_on_the_store_clock_and_region_matrix_is_kept() -> None:
    async with sim_workers(1) as workers:
        source = StaticDiscovery([workers[0].discovered()])
        matrix = {"eu": {"us": 80.0}}
        async with running_store(source, clock=lambda: 1234.5, region_rtt_ms=matrix) as store:
            await store.wait_ready(1, timeout_s=10)
            assert store.snapshot()[0].metrics_at == 1234.5
            assert store.all_endpoints()[0].status_at == 1234.5
            assert store.region_rtt_ms() == matrix


async def test_in_flight_is_kept_by_priority_for_the_queue_term() -> None:
    """The router's own record of what it sent and has no first token of, by the requests'
    engine priority: the queue term's "behind us" for an engine that reports no
    per-priority counts (vLLM)."""
    async with sim_workers(1) as workers:
        source = StaticDiscovery([workers[0].discovered()])
        async with running_store(source) as store:
            await store.wait_ready(1, timeout_s=10)
            for _ in range(3):
                store.request_started("w-0", 2)
            store.request_started("w-0", 0)
            assert store.snapshot()[0].in_flight == 4
            assert store.snapshot()[0].in_flight_by_priority == ((0, 1), (2, 3))
            store.first_token("w-0", ttft_s=0.05, server_ttft_ms=0.0, priority=2)
            store.request_failed("w-0", 2)
            store.request_finished("w-0", 0)
            assert store.snapshot()[0].in_flight_by_priority == ((2, 1),)
            store.request_finished("w-0", 2)
            store.request_finished("w-0", 2)  # never below zero
            assert store.snapshot()[0].in_flight == 0
            assert store.snapshot()[0].in_flight_by_priority == ()


async def test_in_flight_keeps_the_prompt_tokens_the_queue_term_prices() -> None:
    """The prompt tokens this router gave an endpoint to prefill (not predicted cached),
    until each request's first token, failure or end: the queue term prices the requests
    ahead by them instead of by the typical prompt."""
    async with sim_workers(1) as workers:
        source = StaticDiscovery([workers[0].discovered()])
        async with running_store(source) as store:
            await store.wait_ready(1, timeout_s=10)
            store.request_started("w-0", 1, 4000)
            store.request_started("w-0", 1, 300)
            store.request_started("w-0", 0, 50)
            assert store.snapshot()[0].in_flight_tokens == 4350
            store.first_token("w-0", ttft_s=0.05, server_ttft_ms=0.0, priority=1, tokens=4000)
            assert store.snapshot()[0].in_flight_tokens == 350
            store.request_failed("w-0", 1, 300)
            assert store.snapshot()[0].in_flight_tokens == 50
            store.request_finished("w-0", 0, 9999)  # never below zero
            assert (store.snapshot()[0].in_flight, store.snapshot()[0].in_flight_tokens) == (0, 0)
