"""Overload and slow or failing parties: admission without a client deadline, the pool's
bound on requests in flight, first-token and HTTP timeouts, retries of non-streaming
requests, waiting for a standby (issue 12, item B, router side)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal

import grpc
import pytest
from frontendkit import Worker, eventually, gen, router, words, workers
from prometheus_client.parser import text_string_to_metric_families

from preheat.bench.workerproc import spawn_worker
from preheat.core.routing.admission import AdmissionConfig
from preheat.core.routing.config import SchedulerConfig
from preheat.proto.preheat.v1 import inference_pb2_grpc
from preheat.router.app import RouterConfig, RouterServer
from preheat.router.endpoints import DiscoveredEndpoint, StaticDiscovery
from preheat.router.frontend.http import HttpLimits

FAST_START = ["--sim-load-s", "0", "--sim-warmup-s", "0"]
STUCK = {"id": "stuck"}


def freeze(w: Worker) -> None:
    """From now on the worker takes requests and sends no token for days (its engine's
    every step takes a million times longer): frozen, as the router sees it, while it
    still answers Status."""
    core = w.server.engine.core  # type: ignore[attr-defined]
    core.cost = dataclasses.replace(core.cost, scale=1e6)


def _ttft_count(r: object) -> float:
    metric = r.server.metrics.ttft  # type: ignore[attr-defined]
    return sum(s.value for m in metric.collect() for s in m.samples if s.name.endswith("_count"))


async def test_request_without_deadline_is_admitted_against_the_default_target() -> None:
    adm = AdmissionConfig(default_ttft_target_ms=1.0)
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], admission=adm) as r,
    ):
        # no deadline, no SLO class: the pool's default target (1 ms) still applies
        async with r.http.post(
            r.url + "/v1/completions", json={"prompt": words(3000), "max_tokens": 2}
        ) as resp:
            assert resp.status == 429
            assert int(resp.headers["Retry-After"]) >= 1
            body = await resp.json()
            assert "exceeds the deadline of 1 ms" in body["error"]["message"]
        # a request's own deadline takes precedence over the default
        chunks = await r.generate(gen("short prompt", 2, ttft_deadline_ms=60_000))
        assert chunks[-1].usage.completion_tokens == 2


async def test_stale_figures_alone_do_not_refuse_requests_without_a_deadline() -> None:
    # one Status at start, then none for a minute: the figures go stale (as when the
    # router's loop stalls longer than stalenessSeconds and its refreshes cannot run)
    stale = SchedulerConfig(staleness_s=0.05)
    adm = AdmissionConfig(default_ttft_target_ms=2000.0)
    async with (
        workers([{"id": "w-1"}]) as ws,
        router(
            [w.endpoint for w in ws], admission=adm, scheduler=stale, refresh_interval_s=60.0
        ) as r,
    ):
        await asyncio.sleep(0.2)
        # no deadline: admitted against the default target on the last figures
        async with r.http.post(
            r.url + "/v1/completions", json={"prompt": "x y", "max_tokens": 2}
        ) as resp:
            assert resp.status == 200, await resp.text()
        # the client's own deadline still refuses an endpoint it knows nothing fresh of
        async with r.http.post(
            r.url + "/v1/completions",
            json={"prompt": "x y", "max_tokens": 2},
            headers={"x-ttft-deadline-ms": "2000"},
        ) as resp:
            assert resp.status == 429
            assert "stale metrics" in (await resp.json())["error"]["message"]


async def test_pool_bound_refuses_with_a_drain_time_retry_after() -> None:
    adm = AdmissionConfig(default_ttft_target_ms=0, max_in_flight=2)
    async with (
        workers([{"id": "w-1", "engine": {"time_scale": 2.0}}]) as ws,
        router([w.endpoint for w in ws], admission=adm) as r,
    ):
        held = [
            asyncio.create_task(r.generate(gen(f"long {k}", 400), timeout=60)) for k in range(2)
        ]
        await eventually(lambda: r.server.dispatcher._in_flight == 2, 10)
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await r.generate(gen("one more", 2))
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "concurrency limit (2 of 2 requests in flight" in (ei.value.details() or "")
        assert "predicted drain" in (ei.value.details() or "")
        async with r.http.post(
            r.url + "/v1/completions", json={"prompt": "x y", "max_tokens": 2}
        ) as resp:
            assert resp.status == 429
            assert int(resp.headers["Retry-After"]) >= 1
            assert (await resp.json())["error"]["type"] == "rate_limit_error"
        for t in held:
            t.cancel()
        await asyncio.gather(*held, return_exceptions=True)
        await eventually(lambda: r.server.dispatcher._in_flight == 0, 10)
        assert (await r.generate(gen("after", 2)))[-1].usage.completion_tokens == 2


async def test_frozen_worker_request_is_rerouted_after_the_first_token_timeout() -> None:
    async with workers([STUCK, {"id": "ok"}]) as ws:
        freeze(ws[0])
        async with router([w.endpoint for w in ws], first_token_timeout_s=0.5) as r:
            r.server.store.inject_rtt("ok", 500.0)  # make the stuck worker look attractive
            r.server.store.inject_rtt("stuck", 0.1)
            chunks = await r.generate(gen("hello", 2), timeout=15)
            assert chunks[-1].worker_id == "ok"
            async with r.http.post(
                r.url + "/v1/completions",
                json={"prompt": "hello again", "max_tokens": 2},
                timeout=15,
            ) as resp:
                assert resp.status == 200
                assert resp.headers["X-Preheat-Worker"] == "ok"


async def test_frozen_only_worker_fails_with_a_clear_error() -> None:
    async with workers([STUCK]) as ws:
        freeze(ws[0])
        async with (
            router([ws[0].endpoint], first_token_timeout_s=0.3, queue_timeout_s=0.3) as r,
            r.http.post(
                r.url + "/v1/completions", json={"prompt": "hello", "max_tokens": 2}, timeout=15
            ) as resp,
        ):
            assert resp.status in (503, 504)
            msg = (await resp.json())["error"]["message"]
            assert "stuck" in msg
            assert "first-token timeout" in msg or "failed before anything was sent" in msg


async def test_http_request_timeout_ends_a_request_the_worker_never_answers() -> None:
    limits = HttpLimits(request_timeout_s=0.5)
    async with workers([STUCK]) as ws:
        freeze(ws[0])
        async with (
            router([ws[0].endpoint], first_token_timeout_s=0, http=limits) as r,
            r.http.post(
                r.url + "/v1/completions", json={"prompt": "hello", "max_tokens": 2}, timeout=15
            ) as resp,
        ):
            assert resp.status == 504
            assert (await resp.json())["error"]["type"] == "timeout"


async def test_non_streaming_request_is_retried_when_its_worker_fails_mid_stream() -> None:
    args = ["--worker-id", "victim", "--sim-time-scale", "5", *FAST_START]
    async with (
        spawn_worker(args, ready_timeout_s=60) as victim,
        workers([{"id": "healthy"}]) as ws,
    ):
        eps = [DiscoveredEndpoint(address=victim.grpc_target, id="victim"), ws[0].endpoint]
        async with router(eps) as r:
            r.server.store.inject_rtt("healthy", 500.0)
            r.server.store.inject_rtt("victim", 0.1)
            post = asyncio.create_task(
                r.http.post(
                    r.url + "/v1/completions",
                    json={"prompt": "a b c", "max_tokens": 300},
                    timeout=60,
                )
            )
            # the victim has sent tokens to the router, which has sent nothing to the client
            await eventually(lambda: _ttft_count(r) >= 1, 20)
            assert not post.done()
            os.kill(victim.proc.pid, signal.SIGKILL)
            resp = await asyncio.wait_for(post, 60)
            async with resp:
                assert resp.status == 200, await resp.text()
                body = await resp.json()
                assert resp.headers["X-Preheat-Worker"] == "healthy"
                assert body["usage"]["completion_tokens"] == 300


async def test_request_waits_for_a_standby_when_its_only_endpoint_fails() -> None:
    args = ["--worker-id", "victim", "--sim-time-scale", "50", *FAST_START]
    async with (
        spawn_worker(args, ready_timeout_s=60) as victim,
        workers([{"id": "standby"}]) as ws,
    ):
        victim_ep = DiscoveredEndpoint(address=victim.grpc_target, id="victim")
        disc = StaticDiscovery([victim_ep])
        server = RouterServer(disc, RouterConfig(refresh_interval_s=0.1, queue_timeout_s=20))
        ports = await server.start()
        try:
            await server.wait_ready(1, timeout_s=10)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc}") as ch:
                stub = inference_pb2_grpc.InferenceStub(ch)
                call = stub.Generate(gen(words(16, "s"), 3), timeout=30)
                task = asyncio.create_task(_collect(call))
                await eventually(lambda: any(e.in_flight for e in server.store.snapshot()), 10)
                os.kill(victim.proc.pid, signal.SIGKILL)
                # the request is held (not failed at once) until the standby is promoted
                await eventually(lambda: server.dispatcher._waiting == 1, 10)
                assert not task.done()
                disc.set_endpoints([victim_ep, ws[0].endpoint])
                chunks = await asyncio.wait_for(task, 30)
                assert chunks[-1].worker_id == "standby"
        finally:
            await asyncio.wait_for(server.stop(), 20)


async def _collect(call: grpc.aio.UnaryStreamCall) -> list:
    return [c async for c in call]


async def test_connection_whose_headers_never_arrive_is_closed() -> None:
    async with router([], http=HttpLimits(header_timeout_s=0.3), min_ready=0) as r:
        port = int(r.url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # never finished
            await writer.drain()
            rest = await asyncio.wait_for(reader.read(), 10)  # EOF: the router closed it
            assert rest == b""
        finally:
            writer.close()


async def test_body_that_never_arrives_is_answered_408() -> None:
    async with router([], http=HttpLimits(body_timeout_s=0.3), min_ready=0) as r:
        port = int(r.url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"prompt": '
            )
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 408")
            assert b"application/json" in head
        finally:
            writer.close()


async def test_a_worker_slower_than_predicted_is_refused_until_its_miss_fades() -> None:
    # an engine 40x slower than the calibrated H100 the router's cost model predicts: its
    # first token comes hundreds of ms after the predicted few ms. The router learns the
    # miss (core/routing/calibration.py) and refuses, against the default target, what the
    # model alone would admit; the miss fades with its half-life (here 0.5 s) and the
    # worker is admitted again. One token each: the request ends with its first token.
    adm = AdmissionConfig(default_ttft_target_ms=150.0, max_in_flight=0)
    sched = SchedulerConfig(ttft_error_half_life_s=0.5)
    async with (
        workers([{"id": "w-1", "engine": {"time_scale": 40.0}}]) as ws,
        router([w.endpoint for w in ws], admission=adm, scheduler=sched) as r,
    ):
        store = r.server.store
        assert store.snapshot()[0].ttft_error_ms is None
        first = await r.generate(gen(words(64, "a"), 1))
        assert first[-1].usage.completion_tokens == 1
        (ep,) = store.snapshot()
        assert ep.ttft_error_ms is not None
        assert ep.ttft_error_ms > 150.0  # it came that much later than predicted
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await r.generate(gen(words(64, "b"), 1))
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "later than predicted" in (ei.value.details() or "")
        # an SRE sees it on /metrics, per endpoint, as admission adds it now
        async with r.http.get(f"{r.url}/metrics") as resp:
            text = await resp.text()
        (miss,) = [
            s
            for f in text_string_to_metric_families(text)
            if f.name == "preheat_router_ttft_miss_seconds"
            for s in f.samples
        ]
        assert miss.labels["endpoint"] == "w-1"
        assert 0.0 < miss.value <= ep.ttft_error_ms / 1000.0
        await asyncio.sleep(4.0)  # eight half-lives: the miss is under a 250th
        again = await r.generate(gen(words(64, "c"), 1))
        assert again[-1].usage.completion_tokens == 1


async def test_the_miss_is_not_kept_when_the_correction_is_off() -> None:
    off = SchedulerConfig(ttft_error_half_life_s=0.0)
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws], scheduler=off) as r:
        await r.generate(gen(words(16, "a"), 2))
        assert r.server.store.snapshot()[0].ttft_error_ms is None
