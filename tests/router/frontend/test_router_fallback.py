"""The ladder's first step (issue 18): a request its pool would refuse goes to its class's
fallback pool when that pool predicts a start within the class's target, served there as
that pool's model and said so (``X-Preheat-Degraded: fallback-pool; pool=...``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from frontendkit import eventually, workers

from preheat.core import metric_names as mn
from preheat.core.promtext import parse_samples
from preheat.process.tracing import Tracing
from preheat.router.app import RouterConfig, RouterServer
from preheat.router.pools import LiteralPools, PoolSpec

BIG, SMALL = "big-model", "small-model"


def _traffic(fallback: str) -> dict[str, Any]:
    return {
        "traffic": {
            "classes": [
                {
                    "name": "chat",
                    "ttftMs": 60000,
                    "degrade": {"fallbackPool": fallback, "maxTokens": 2},
                }
            ]
        }
    }


def _small_routable(server: RouterServer) -> bool:
    pool = server.pools.get("small")
    return pool is not None and bool(pool.store.snapshot())


@contextlib.asynccontextmanager
async def _router(
    pools: list[PoolSpec], tracing: Tracing | None = None
) -> AsyncIterator[tuple[RouterServer, str]]:
    server = RouterServer(
        None,
        RouterConfig(refresh_interval_s=0.1, queue_timeout_s=0.5, tracing=tracing),
        pool_source=LiteralPools(pools),
    )
    ports = await server.start()
    try:
        yield server, f"http://127.0.0.1:{ports.http}"
    finally:
        await asyncio.wait_for(server.stop(), 20)


async def test_a_request_its_pool_cannot_serve_goes_to_the_fallback_pool() -> None:
    async with workers([{"id": "small-1", "engine": {"model": SMALL}}]) as ws:
        pools = [
            PoolSpec(name="big", model=BIG, routing=_traffic("small")),  # no worker: cold
            PoolSpec(name="small", model=SMALL, endpoints=(ws[0].endpoint,)),
        ]
        async with _router(pools) as (server, url), aiohttp.ClientSession() as http:
            await eventually(lambda: _small_routable(server), 10)
            body = {"model": BIG, "prompt": "hello there", "max_tokens": 5}
            async with http.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                assert resp.headers["X-Preheat-Degraded"] == "fallback-pool; pool=small"
                assert resp.headers["X-Preheat-Worker"] == "small-1"
                out = await resp.json()
            assert out["usage"]["completion_tokens"] == 5  # not clamped: served in time
            assert out["preheat"]["degraded"] == {"step": "fallback-pool", "pool": "small"}
            async with http.get(url + "/metrics") as resp:
                text = await resp.text()
            name = mn.ROUTER_DEGRADED + "_total"
            got = {
                (s.labels[mn.LABEL_POOL], s.labels[mn.LABEL_STEP]): s.value
                for s in parse_samples(text, only=(name,))
            }
            assert got == {("big", "fallback-pool"): 1}


async def test_an_unknown_fallback_pool_leaves_the_rest_of_the_ladder() -> None:
    async with workers([{"id": "small-1", "engine": {"model": SMALL}}]) as ws:
        pools = [
            PoolSpec(name="big", model=BIG, routing=_traffic("nowhere")),
            PoolSpec(name="small", model=SMALL, endpoints=(ws[0].endpoint,)),
        ]
        async with _router(pools) as (server, url), aiohttp.ClientSession() as http:
            await eventually(lambda: _small_routable(server), 10)
            body = {"model": BIG, "prompt": "hello there", "max_tokens": 5}
            async with http.post(url + "/v1/completions", json=body) as resp:
                # big has no worker: held for --queue-timeout-s, then 503 (no fallback)
                assert resp.status == 503
