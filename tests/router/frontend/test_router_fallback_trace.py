"""A request that takes the ladder's first step (its class's fallback pool) is one trace:
its ``router.request`` span says which pool served it and ends with the outcome of the
answer that pool gave, and that pool's schedule and upstream spans are in it (before: the
span was never ended, so a tracing backend never saw the request at all). The passthrough's
fallback: ``test_router_passthrough_degrade.py``."""

from __future__ import annotations

import aiohttp
from frontendkit import eventually, workers
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_router_fallback import BIG, SMALL, _router, _small_routable, _traffic

from preheat.process.tracing import Tracing
from preheat.router.pools import PoolSpec


async def test_a_fallback_request_ends_its_first_pools_span(
    traced: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = traced
    async with workers([{"id": "small-1", "engine": {"model": SMALL}}]) as ws:
        pools = [
            PoolSpec(name="big", model=BIG, routing=_traffic("small")),  # no worker: cold
            PoolSpec(name="small", model=SMALL, endpoints=(ws[0].endpoint,)),
        ]
        async with _router(pools, tracing) as (server, url), aiohttp.ClientSession() as http:
            await eventually(lambda: _small_routable(server), 10)
            body = {"model": BIG, "prompt": "hello there", "max_tokens": 5}
            async with http.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                assert resp.headers["X-Preheat-Degraded"] == "fallback-pool; pool=small"
            await eventually(lambda: len(roots(exporter)) == 1, 10)
    check_one_trace(exporter, served_by="small-1", tokens=5)


def roots(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == "router.request"]


def check_one_trace(exporter: InMemorySpanExporter, *, served_by: str, tokens: int) -> None:
    spans = exporter.get_finished_spans()
    (root,) = roots(exporter)
    assert root.attributes is not None
    assert root.attributes["dev.preheat.outcome"] == "ok"
    assert root.attributes["gen_ai.usage.output_tokens"] == tokens
    assert root.attributes["dev.preheat.fallback_pool"] == "small"
    assert root.attributes["dev.preheat.fallback_model"] == SMALL
    assert "fallback" in [e.name for e in root.events]
    (schedule,) = [s for s in spans if s.name == "router.schedule"]
    assert schedule.attributes is not None
    assert schedule.attributes["dev.preheat.endpoint"] == served_by
    assert {s.context.trace_id for s in spans if s.name.startswith("router.")} == {
        root.context.trace_id
    }
