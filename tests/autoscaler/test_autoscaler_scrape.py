"""DirectScrapeSource against in-process sim workers on loopback: the windowed TTFT p95
from bucket deltas is the engines' own histogram's; queue depth is vllm:num_requests_waiting;
a worker that stops answering makes the snapshot stale."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from prometheus_client import generate_latest

from preheat.autoscaler.scrape import DirectScrapeSource
from preheat.autoscaler.source import SignalQuery
from preheat.core import metric_names as mn
from preheat.core.percentiles import bucket_deltas, histogram_quantile
from preheat.core.pool import Objective, Signal
from preheat.core.promtext import histogram, parse_samples
from preheat.engine.sim import SimConfig, SimEngine
from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc
from preheat.worker.server import WorkerConfig, WorkerServer

TTFT95 = Objective(Signal.TTFT, 95.0, 400.0)
QUEUE = Objective(Signal.QUEUE_DEPTH, 0.0, 2.0)
CONCURRENCY = Objective(Signal.CONCURRENCY, 0.0, 48.0)
QUERY = SignalQuery((TTFT95, QUEUE, CONCURRENCY), window_s=3600.0)


@contextlib.asynccontextmanager
async def sim_workers(n: int, **engine: Any) -> AsyncIterator[list[tuple[WorkerServer, str, str]]]:
    """``n`` sim workers: (server, grpc address, http base URL); stopped at the end."""
    out: list[tuple[WorkerServer, str, str]] = []
    options: dict[str, Any] = {
        "model": "sim-model",
        "max_model_len": 4096,
        "block_size": 16,
        "num_gpu_blocks": 4096,
        "max_num_seqs": 4,
        "load_s": 0.0,
        "warmup_s": 0.0,
        "time_scale": 0.2,
    }
    options.update(engine)
    try:
        for i in range(n):
            server = WorkerServer(
                SimEngine(SimConfig.from_options(options)),
                WorkerConfig(worker_id=f"w-{i + 1}", drain_grace_s=1.0, stop_grace_s=0.5),
            )
            ports = await server.start()
            out.append((server, f"127.0.0.1:{ports.grpc}", f"http://127.0.0.1:{ports.http}"))
        for server, _, _ in out:
            await asyncio.wait_for(server.wait_warm(), 10)
        yield out
    finally:
        for server, _, _ in out:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.stop(), 20)


async def generate(address: str, prompt: str, max_tokens: int) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = inference_pb2_grpc.InferenceStub(channel)
        req = inference_pb2.GenerateRequest(
            prompt=prompt, sampling=inference_pb2.SamplingParams(max_tokens=max_tokens)
        )
        async for _ in stub.Generate(req, timeout=30):
            pass


async def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110 (state held by the engine, polled, bounded)
            await asyncio.sleep(0.01)


def ttft_buckets(server: WorkerServer) -> tuple[tuple[float, float], ...]:
    text = generate_latest(server.engine.registry).decode()
    return histogram(parse_samples(text), mn.VLLM_TIME_TO_FIRST_TOKEN_SECONDS).buckets


async def test_windowed_ttft_p95_is_the_engines_histogram_over_the_same_buckets() -> None:
    async with sim_workers(2) as ws:
        urls = [u for _, _, u in ws]
        source = DirectScrapeSource(lambda: urls)
        try:
            await source.scrape()  # the window's start (warm-up requests before it)
            before = [ttft_buckets(s) for s, _, _ in ws]
            # at most 8 at a time per worker: well inside its 4 running + 16 waiting, so
            # none is refused however the event loop interleaves the sends
            limits = {addr: asyncio.Semaphore(8) for _, addr, _ in ws}

            async def bounded(addr: str, i: int) -> None:
                async with limits[addr]:
                    await generate(addr, f"prompt {i} " + "word " * (20 * (i % 7)), 4)

            await asyncio.gather(*(bounded(addr, i) for i in range(24) for _, addr, _ in ws))
            after = [ttft_buckets(s) for s, _, _ in ws]
            signals = await source.read(QUERY)
        finally:
            await source.close()
    per_le: dict[float, float] = {}
    for b, a in zip(before, after, strict=True):
        for le, c in bucket_deltas(b, a):
            per_le[le] = per_le.get(le, 0.0) + c
    deltas = sorted(per_le.items())
    assert deltas[-1][1] == 48  # every request of the window, none of the warm-up
    expected = histogram_quantile(0.95, deltas)
    assert expected is not None
    assert not signals.stale, signals.error
    ttft = signals.find(TTFT95)
    assert ttft is not None
    assert ttft.value == pytest.approx(expected * 1000.0)
    assert ttft.samples == 48
    assert signals.requests == 48
    queue = signals.find(QUEUE)
    assert queue is not None
    assert queue.value == 0.0


async def test_queue_depth_is_num_requests_waiting() -> None:
    async with sim_workers(1, max_num_seqs=1, time_scale=1.0) as ws:
        server, addr, url = ws[0]
        source = DirectScrapeSource(lambda: [url])
        tasks = [asyncio.create_task(generate(addr, f"p {i}", 400)) for i in range(4)]
        try:
            await source.scrape()
            await until(lambda: server.engine.stats().num_waiting >= 3)
            signals = await source.read(QUERY)
            queue = signals.find(QUEUE)
            assert queue is not None
            assert queue.value == 3.0  # one running, three waiting
            assert signals.in_flight == 4.0
            conc = signals.find(CONCURRENCY)
            assert conc is not None
            assert (conc.value, conc.stale) == (4.0, False)  # running + waiting
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await source.close()


async def test_a_worker_that_stops_answering_makes_the_signal_stale() -> None:
    async with sim_workers(2) as ws:
        urls = [u for _, _, u in ws]
        source = DirectScrapeSource(lambda: urls, timeout_s=1.0)
        try:
            await source.scrape()
            fresh = await source.read(QUERY)
            assert not fresh.stale, fresh.error
            await asyncio.wait_for(ws[1][0].stop(), 20)
            stale = await source.read(QUERY)
        finally:
            await source.close()
    assert stale.stale
    assert urls[1] in stale.error
    assert all(v.stale for v in stale.values)
