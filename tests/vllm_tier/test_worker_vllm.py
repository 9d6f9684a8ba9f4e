"""The worker's gRPC server around a real vLLM engine (CPU build, tiny offline model).

Serves the acceptance items: a real vLLM engine behind the worker streams tokens over gRPC;
cancelling mid-stream frees the sequence; /metrics shows vLLM's own metrics.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="needs the vLLM CPU build (run in .venv-vllm)")

import aiohttp
import grpc
import pytest_asyncio

from preheat.core import metric_names as m
from preheat.engine.vllm import VllmEngine, VllmEngineConfig
from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc
from preheat.worker.server import WorkerConfig, WorkerServer

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="module")]


@dataclass
class Running:
    server: WorkerServer
    engine: VllmEngine
    inference: Any
    http: aiohttp.ClientSession
    http_url: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def worker(tiny_model: Path) -> AsyncIterator[Running]:
    engine = VllmEngine(
        VllmEngineConfig(
            model=str(tiny_model),
            served_model_name="tiny-llama",
            max_model_len=1024,
            max_num_seqs=4,
            kv_cache_bytes=64 << 20,
            dtype="float32",
        )
    )
    server = WorkerServer(
        engine, WorkerConfig(worker_id="w-vllm", drain_grace_s=5.0, stop_grace_s=1.0)
    )
    ports = await server.start()
    try:
        await asyncio.wait_for(server.wait_warm(), 180)
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc}") as channel,
            aiohttp.ClientSession() as http,
        ):
            yield Running(
                server=server,
                engine=engine,
                inference=inference_pb2_grpc.InferenceStub(channel),
                http=http,
                http_url=f"http://127.0.0.1:{ports.http}",
            )
    finally:
        await asyncio.wait_for(server.stop(), 60)


def gen(prompt: str, max_tokens: int) -> inference_pb2.GenerateRequest:
    return inference_pb2.GenerateRequest(
        prompt=prompt,
        sampling=inference_pb2.SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=1),
    )


async def eventually(cond: Callable[[], bool], within_s: float = 10.0) -> None:
    """Polls ``cond`` until it is true (state the engine core updates asynchronously)."""
    async with asyncio.timeout(within_s):
        while True:
            if cond():
                return
            await asyncio.sleep(0.05)


async def test_streams_tokens_over_grpc(worker: Running) -> None:
    chunks = [c async for c in worker.inference.Generate(gen("Hello over gRPC, please.", 16))]
    assert len(chunks) >= 2
    last = chunks[-1]
    assert last.finish_reason in (
        inference_pb2.FINISH_REASON_LENGTH,
        inference_pb2.FINISH_REASON_STOP,
    )
    assert all(c.finish_reason == inference_pb2.FINISH_REASON_UNSPECIFIED for c in chunks[:-1])
    assert last.usage.completion_tokens == sum(len(c.token_ids) for c in chunks)
    assert last.usage.prompt_tokens > 0
    assert last.timing.ttft_ms > 0
    assert last.worker_id == "w-vllm"


async def test_cancel_mid_stream_frees_the_sequence(worker: Running) -> None:
    call = worker.inference.Generate(gen("Cancel this long answer midway.", 900))
    for _ in range(3):
        chunk = await call.read()
        assert chunk.finish_reason == inference_pb2.FINISH_REASON_UNSPECIFIED
    await eventually(lambda: worker.engine.stats().num_running == 1)
    call.cancel()
    await eventually(lambda: worker.engine.stats().num_running == 0)
    await eventually(lambda: worker.server.in_flight == 0)
    # Still serving.
    chunks = [c async for c in worker.inference.Generate(gen("And one more.", 4))]
    assert chunks[-1].finish_reason != inference_pb2.FINISH_REASON_UNSPECIFIED


async def test_metrics_show_vllm_metrics(worker: Running) -> None:
    async with worker.http.get(worker.http_url + "/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    for name in (
        m.VLLM_NUM_REQUESTS_RUNNING,
        m.VLLM_NUM_REQUESTS_WAITING,
        m.VLLM_KV_CACHE_USAGE_PERC,
        m.VLLM_TIME_TO_FIRST_TOKEN_SECONDS + "_bucket",
        m.VLLM_PREFIX_CACHE_HITS + "_total",
        m.VLLM_GENERATION_TOKENS + "_total",
    ):
        assert f"\n{name}{{" in text, name
    assert m.WORKER_REQUESTS in text
