"""Failover (a worker killed mid-run), admission (fast rejections), malformed gRPC requests."""

from __future__ import annotations

import asyncio
import os
import signal

import grpc
import pytest
from frontendkit import eventually, gen, router, words, workers

from preheat.bench.workerproc import spawn_worker
from preheat.core.traffic.classes import legacy_traffic
from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc
from preheat.router.app import RouterConfig, RouterServer
from preheat.router.endpoints import DiscoveredEndpoint, StaticDiscovery

# A subprocess sim worker 50x slower than the calibrated GPU: a first token takes over a
# second, so requests are still before their first token when it is killed.
FAST_START = ["--sim-load-s", "0", "--sim-warmup-s", "0"]
SLOW_WORKER = ["--worker-id", "victim", "--sim-time-scale", "50", *FAST_START]


def retries(r: object) -> float:
    metric = r.server.metrics.retries  # type: ignore[attr-defined]
    return sum(s.value for m in metric.collect() for s in m.samples if s.name.endswith("_total"))


async def test_worker_killed_before_first_token_requests_retried_elsewhere() -> None:
    async with (
        spawn_worker(SLOW_WORKER, ready_timeout_s=60) as victim,
        workers([{"id": "healthy"}]) as ws,
    ):
        eps = [DiscoveredEndpoint(address=victim.grpc_target, id="victim"), ws[0].endpoint]
        async with router(eps) as r:
            r.server.store.inject_rtt("healthy", 500.0)  # make the victim look attractive
            r.server.store.inject_rtt("victim", 0.1)
            reqs = [
                asyncio.create_task(r.generate(gen(words(16, f"f{k}"), 3), timeout=20))
                for k in range(6)
            ]
            await eventually(
                lambda: any(e.in_flight for e in r.server.store.snapshot() if e.id == "victim"),
                10,
            )
            os.kill(victim.proc.pid, signal.SIGKILL)
            results = await asyncio.wait_for(asyncio.gather(*reqs), 30)
            assert all(res[-1].worker_id == "healthy" for res in results)
            assert retries(r) >= 1
            # the dead endpoint drops out of the routable set; new requests still succeed
            await eventually(lambda: len(r.server.store.snapshot()) == 1, 10)
            assert (await r.generate(gen(max_tokens=2)))[-1].worker_id == "healthy"


async def test_worker_killed_after_tokens_ends_with_a_clear_error() -> None:
    args = ["--worker-id", "victim", "--sim-time-scale", "5", *FAST_START]
    async with spawn_worker(args, ready_timeout_s=60) as victim:
        eps = [DiscoveredEndpoint(address=victim.grpc_target, id="victim")]
        async with router(eps) as r:
            call = r.inference.Generate(gen("a b c", max_tokens=500), timeout=30)
            first = await asyncio.wait_for(call.read(), 20)
            assert first.token_ids
            os.kill(victim.proc.pid, signal.SIGKILL)
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await asyncio.wait_for(_read_to_end(call), 20)
            assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
            details = ei.value.details() or ""
            assert "worker victim failed after" in details
            assert "not retried to avoid duplicate text" in details


async def test_deadline_that_no_pod_can_meet_is_rejected_at_once() -> None:
    async with (
        workers([{"id": "w-1"}, {"id": "w-2"}]) as ws,
        router([w.endpoint for w in ws], traffic=legacy_traffic({"interactive": 1.0})) as r,
    ):
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await r.generate(gen(words(3000), 2, ttft_deadline_ms=1), timeout=30)
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        trailers = dict(ei.value.trailing_metadata() or ())
        assert float(trailers["retry-after-s"]) > 0
        assert loop.time() - t0 < 10  # answered, not timed out
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await r.generate(gen(words(3000), 2, slo_class="interactive"), timeout=30)
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        async with r.http.post(
            r.url + "/v1/completions",
            json={"prompt": words(3000), "max_tokens": 2},
            headers={"x-ttft-deadline-ms": "1"},
        ) as resp:
            assert resp.status == 429
            assert int(resp.headers["Retry-After"]) >= 1
            assert (await resp.json())["error"]["code"] == "rate_limit_exceeded"
        # a deadline that can be met is served
        chunks = await r.generate(gen("short prompt", 2, ttft_deadline_ms=60_000))
        assert chunks[-1].usage.completion_tokens == 2


async def test_bounded_queue_rejects_beyond_max_queue() -> None:
    async with router([], max_queue=2, queue_timeout_s=5.0) as r:
        waiting = [asyncio.create_task(r.generate(gen(), timeout=10)) for _ in range(2)]
        await eventually(lambda: r.server.dispatcher._waiting == 2, 5)
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await r.generate(gen(), timeout=10)
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "queue is full" in (ei.value.details() or "")
        for t in waiting:
            t.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)


async def test_queued_request_is_served_once_an_endpoint_appears() -> None:
    async with workers([{"id": "late"}]) as ws:
        disc = StaticDiscovery([])
        server = RouterServer(disc, RouterConfig(refresh_interval_s=0.1, queue_timeout_s=10))
        ports = await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc}") as ch:
                stub = inference_pb2_grpc.InferenceStub(ch)
                call = asyncio.create_task(_collect(stub, gen(max_tokens=2)))
                await eventually(lambda: server.dispatcher._waiting == 1, 5)
                disc.set_endpoints([ws[0].endpoint])
                chunks = await asyncio.wait_for(call, 15)
                assert chunks[-1].worker_id == "late"
        finally:
            await asyncio.wait_for(server.stop(), 20)


async def _read_to_end(call: grpc.aio.UnaryStreamCall) -> None:
    while (chunk := await call.read()) is not grpc.aio.EOF:
        assert chunk is not None


async def _collect(stub: object, req: object) -> list[object]:
    return [c async for c in stub.Generate(req, timeout=15)]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("req", "needle"),
    [
        (gen(max_tokens=0), "max_tokens must be > 0"),
        (gen(prompt="", max_tokens=2), "prompt is empty"),
        (gen(max_tokens=2, slo_class="platinum"), "unknown slo_class"),
        (
            inference_pb2.GenerateRequest(sampling={"max_tokens": 2}),
            "no prompt",
        ),
    ],
)
async def test_malformed_grpc_is_invalid_argument_and_router_keeps_serving(
    req: object, needle: str
) -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await r.generate(req)  # type: ignore[arg-type]
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert needle in (ei.value.details() or "")
        assert (await r.generate(gen(max_tokens=2)))[-1].usage.completion_tokens == 2
