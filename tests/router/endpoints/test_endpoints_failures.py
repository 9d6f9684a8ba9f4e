"""Failure handling: quick re-Status on request failure, restart recovery, no leaked tasks."""

from __future__ import annotations

import asyncio

import pytest
from endpointkit import eventually, make_sim_engine, running_store, sim_workers

from preheat.router.endpoints import EndpointStore, StaticDiscovery
from preheat.worker.server import WorkerConfig, WorkerServer


async def test_request_failed_asks_status_at_once() -> None:
    async with sim_workers(2) as workers:
        source = StaticDiscovery([w.discovered() for w in workers])
        # a refresh interval far longer than the test: only the kick can notice the stop
        async with running_store(source, refresh_interval_s=60.0, status_timeout_s=1.0) as store:
            await store.wait_ready(2, timeout_s=10)
            await asyncio.wait_for(workers[0].server.stop(), 20)
            assert len(store.snapshot()) == 2  # nobody has looked yet
            store.request_started("w-0")
            store.request_failed("w-0")
            await eventually(lambda: [e.id for e in store.snapshot()] == ["w-1"])
            (info,) = [v for v in store.all_endpoints() if v.id == "w-0"]
            assert info.cached_blocks is None  # the WatchCache stream broke with it
            assert info.in_flight == 0


async def test_restarted_worker_on_same_port_comes_back() -> None:
    async with sim_workers(1) as workers:
        w = workers[0]
        source = StaticDiscovery([w.discovered()])
        async with running_store(source, status_timeout_s=0.5) as store:
            await store.wait_ready(1, timeout_s=10)
            await asyncio.wait_for(w.server.stop(), 20)
            await eventually(lambda: store.snapshot() == ())
            again = WorkerServer(
                make_sim_engine(),
                WorkerConfig(
                    worker_id="w-0", grpc_port=w.grpc_port, drain_grace_s=1, stop_grace_s=0.5
                ),
            )
            await again.start()
            try:
                await again.wait_warm()
                await store.wait_ready(1, timeout_s=10)
                await eventually(lambda: store.snapshot()[0].cached_blocks is not None, 10)
            finally:
                await asyncio.wait_for(again.stop(), 20)


async def test_run_leaves_no_tasks_and_closes_channels() -> None:
    async with sim_workers(2) as workers:
        before = asyncio.all_tasks()
        source = StaticDiscovery([w.discovered(metrics_url=w.metrics_url) for w in workers])
        store = EndpointStore(source, refresh_interval_s=0.05)
        task = asyncio.create_task(store.run())
        await store.wait_ready(2, timeout_s=10)
        channel = store.channel("w-0")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        leaked = [t for t in asyncio.all_tasks() - before if _is_ours(t)]
        assert leaked == []
        assert store.snapshot() == ()
        assert store.all_endpoints() == ()
        with pytest.raises(Exception, match=r"(?i)closed|cancel"):
            await channel.unary_unary("/x/y")(b"", timeout=1)


def _is_ours(task: asyncio.Task[object]) -> bool:
    """A task running code of the endpoints package (the worker's own server-side tasks
    that are still winding down their cancelled streams are not)."""
    coro = task.get_coro()
    code = getattr(coro, "cr_code", None) or getattr(coro, "ag_code", None)
    return code is not None and "router/endpoints" in code.co_filename
