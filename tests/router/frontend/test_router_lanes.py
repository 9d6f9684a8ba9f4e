"""The router's wait queue by class (issue 18, item 2): while no endpoint is routable,
held requests leave by class priority, then by tenants' turns (item 3: fair queuing by
weight), then deadline, and a class's bound keeps a batch flood from taking the places
interactive requests need."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import grpc
import pytest
from frontendkit import eventually, gen, router, workers

from preheat.core.traffic.classes import TenantQuota, Traffic, TrafficClass
from preheat.router.app import RouterConfig, RouterServer
from preheat.router.endpoints import StaticDiscovery
from preheat.router.frontend.dispatch import Dispatcher

TRAFFIC = Traffic(
    classes=(
        TrafficClass(name="interactive", ttft_ms=60_000, priority=0),
        TrafficClass(name="batch", ttft_ms=60_000, priority=2, max_queue=2),
    ),
    default_class="interactive",
)


@contextlib.asynccontextmanager
async def held_router(traffic: Traffic) -> AsyncIterator[tuple[Dispatcher, Callable[[], None]]]:
    """A router with no endpoint yet (every request is held) and one worker; yields its
    dispatcher and the call that makes the worker routable."""
    async with workers([{"id": "late"}]) as ws:
        disc = StaticDiscovery([])
        config = RouterConfig(refresh_interval_s=0.1, queue_timeout_s=15, traffic=traffic)
        server = RouterServer(disc, config)
        await server.start()
        try:
            yield server.dispatcher, lambda: disc.set_endpoints([ws[0].endpoint])
        finally:
            await asyncio.wait_for(server.stop(), 20)


async def test_a_full_batch_lane_leaves_the_interactive_lane_open() -> None:
    async with router([], max_queue=10, queue_timeout_s=10.0, traffic=TRAFFIC) as r:
        held = [
            asyncio.create_task(r.generate(gen(slo_class="batch"), timeout=15)) for _ in range(2)
        ]
        await eventually(lambda: r.server.dispatcher._waiting == 2, 5)
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await r.generate(gen(slo_class="batch"), timeout=10)
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "the router queue of class 'batch' is full" in (ei.value.details() or "")
        held.append(asyncio.create_task(r.generate(gen(slo_class="interactive"), timeout=15)))
        await eventually(lambda: r.server.dispatcher._waiting == 3, 5)
        for t in held:
            t.cancel()
        await asyncio.gather(*held, return_exceptions=True)


async def test_held_requests_leave_by_priority_then_deadline_not_arrival() -> None:
    async with held_router(TRAFFIC) as (d, routable):
        order: list[str] = []

        async def route(name: str, klass: str, deadline_ms: int = 0) -> None:
            prep = d.prepare(gen(name, 2, slo_class=klass, ttft_deadline_ms=deadline_ms))
            await d.decide(prep, record=False)
            order.append(name)

        tasks = [
            asyncio.create_task(route("batch-1", "batch")),
            asyncio.create_task(route("batch-2", "batch")),
            asyncio.create_task(route("late-deadline", "interactive", 50_000)),
            asyncio.create_task(route("early-deadline", "interactive", 20_000)),
        ]
        await eventually(lambda: d._waiting == 4, 5)
        routable()
        await asyncio.wait_for(asyncio.gather(*tasks), 15)
        assert order == ["early-deadline", "late-deadline", "batch-1", "batch-2"]


FAIR = Traffic(
    classes=(
        TrafficClass(name="interactive", ttft_ms=60_000, priority=0),
        TrafficClass(name="standard", ttft_ms=60_000, priority=1),
    ),
    default_class="standard",
    tenants=(TenantQuota(name="*", requests_per_s=1000), TenantQuota(name="gold", weight=2.0)),
)


async def test_a_small_tenant_is_not_held_behind_a_big_tenants_burst_of_its_class() -> None:
    # issue 18 item 3: held requests of one class leave by tenants' turns (fair queuing),
    # while a higher class still leaves first
    async with held_router(FAIR) as (d, routable):
        order: list[str] = []

        async def route(name: str, tenant: str, klass: str = "standard") -> None:
            prep = d.prepare(gen(name, 2, slo_class=klass), tenant=tenant)
            await d.decide(prep, record=False)
            order.append(name)

        tasks = []
        arrivals = [(f"big-{i}", "big", "standard") for i in range(5)]
        arrivals += [("small", "small", "standard"), ("big-urgent", "big", "interactive")]
        for n, (name, tenant, klass) in enumerate(arrivals, start=1):
            tasks.append(asyncio.create_task(route(name, tenant, klass)))
            await eventually(lambda n=n: d._waiting == n, 5)  # held in this order
        routable()
        await asyncio.wait_for(asyncio.gather(*tasks), 15)
        assert order[0] == "big-urgent"  # the higher class first, whoever sent it
        assert order[1:3] == ["big-0", "small"]  # then turns: small goes 2nd, not 6th
        assert order[3:] == ["big-1", "big-2", "big-3", "big-4"]


async def test_a_tenant_of_weight_two_gets_two_turns_to_anothers_one() -> None:
    async with held_router(FAIR) as (d, routable):
        order: list[str] = []

        async def route(tenant: str) -> None:
            prep = d.prepare(gen("hi", 2), tenant=tenant)
            await d.decide(prep, record=False)
            order.append(tenant)

        tasks = []
        for n, tenant in enumerate(["plain"] * 4 + ["gold"] * 4, start=1):
            tasks.append(asyncio.create_task(route(tenant)))
            await eventually(lambda n=n: d._waiting == n, 5)
        routable()
        await asyncio.wait_for(asyncio.gather(*tasks), 15)
        assert order[:6].count("gold") == 4  # tags gold 0, .5, 1, 1.5; plain 0, 1, 2
        assert order == ["plain", "gold", "gold", "plain", "gold", "gold", "plain", "plain"]
