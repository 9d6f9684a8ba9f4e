"""Tenants share a busy pool fairly (issue 18, item 3): once the pool holds most of its
bound on requests in flight, a tenant at its fair share is refused and the free slots go
to the tenants under theirs, so one tenant sending far more cannot take them all."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import pytest
from frontendkit import gen, router, workers

from preheat.core.routing.admission import AdmissionConfig
from preheat.core.traffic.classes import TenantQuota, Traffic

TRAFFIC = Traffic(tenants=(TenantQuota(name="*", requests_per_s=1000),))
Metadata = tuple[tuple[str, str], ...]


@contextlib.asynccontextmanager
async def busy_pool(traffic: Traffic, max_in_flight: int) -> AsyncIterator[Any]:
    """A router (tenant header ``x-tenant``) in front of one real-time sim worker, its
    pool's bound on requests in flight ``max_in_flight``."""
    async with (
        workers([{"id": "w-1", "engine": {"time_scale": 1.0}}]) as ws,
        router(
            [w.endpoint for w in ws],
            traffic=traffic,
            tenant_header="x-tenant",
            admission=AdmissionConfig(max_in_flight=max_in_flight),
        ) as r,
    ):
        yield r


@contextlib.asynccontextmanager
async def holding(r: Any, tenants: Sequence[Metadata]) -> AsyncIterator[None]:
    """One long request in flight per entry of ``tenants`` (each started before the next),
    cancelled on the way out."""
    calls = []
    try:
        for k, who in enumerate(tenants):
            call = r.inference.Generate(gen(f"long {k}", 3000), metadata=who, timeout=30)
            assert (await asyncio.wait_for(call.read(), 10)).request_id
            calls.append(call)
        yield
    finally:
        for call in calls:
            call.cancel()
        for call in calls:
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await call.code()


async def test_a_tenant_at_its_fair_share_of_a_busy_pool_waits_and_another_is_served() -> None:
    calm = (("x-tenant", "calm"),)
    noisy = (("x-tenant", "noisy"),)
    async with busy_pool(TRAFFIC, 4) as r:
        await r.generate(gen("calm says hi", 2), metadata=calm)  # calm is a tenant of late
        async with holding(r, [noisy] * 3):  # noisy fills 3 of the 4 slots: the pool is busy
            with pytest.raises(grpc.aio.AioRpcError) as ei:  # its share is 3 of 4
                await r.generate(gen("one more", 2), metadata=noisy)
            assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "tenant 'noisy' holds 3 of the pool's 4 requests in flight" in (
                ei.value.details() or ""
            )
            chunks = await r.generate(gen("calm again", 2), metadata=calm)  # the free slot
            assert chunks[-1].usage.completion_tokens == 2


async def test_a_tenants_weight_sets_its_fair_share_of_a_busy_pool() -> None:
    weighted = Traffic(
        tenants=(
            TenantQuota(name="*", requests_per_s=1000),
            TenantQuota(name="gold", requests_per_s=1000, weight=3.0),
        )
    )
    calm = (("x-tenant", "calm"),)
    gold = (("x-tenant", "gold"),)
    async with busy_pool(weighted, 8) as r, holding(r, [calm] * 3 + [gold] * 4):
        # calm holds 3 and gold 4 of the 8 slots: the pool is busy; gold's share is 3:1
        # (5 of 8; equal weights would refuse it at 4 of 8) ...
        chunks = await r.generate(gen("gold again", 2), metadata=gold)
        assert chunks[-1].usage.completion_tokens == 2
        # ... and calm's is what is left (equal weights would admit its 4th)
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await r.generate(gen("calm again", 2), metadata=calm)
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # (its share is 3, or 2 while gold's last request is still being released)
        assert "tenant 'calm' holds 3 of the pool's 8 requests in flight" in (
            ei.value.details() or ""
        )
