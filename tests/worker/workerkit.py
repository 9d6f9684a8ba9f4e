"""Helpers for worker tests: a controllable fake engine, an in-process worker, clients."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry, Gauge

from preheat.core.blocks import block_hashes
from preheat.core.errors import ErrorCode, PreheatError
from preheat.engine.base import (
    CacheEvent,
    CacheEventKind,
    CacheListener,
    EngineInfo,
    EngineOutput,
    EngineRequest,
    EngineStats,
    FinishReason,
    StageTiming,
    Usage,
)
from preheat.proto.preheat.v1 import (
    inference_pb2,
    inference_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)
from preheat.worker.server import WorkerConfig, WorkerServer

VOCAB = 1000
MODEL = "fake-model"
MAX_MODEL_LEN = 256


def make_sim_engine(**options: Any) -> Any:
    """A small SimEngine shaped like the fake (model name, 256-token window, 64 blocks of 4)
    that loads and warms at once. ``options`` go to ``SimConfig.from_options``."""
    from preheat.engine.sim import SimConfig, SimEngine

    base: dict[str, Any] = {
        "model": MODEL,
        "max_model_len": MAX_MODEL_LEN,
        "block_size": 4,
        "num_gpu_blocks": 256,
        "max_num_seqs": 8,
        "vocab_size": VOCAB,
        "load_s": 0.0,
        "warmup_s": 0.0,
    }
    base.update(options)
    return SimEngine(SimConfig.from_options(base))


class FakeEngine:
    """Honours the Engine protocol with knobs: tokens at a fixed interval, gates on load
    and warm-up, a capacity limit, a text per token, and a record of aborted requests."""

    def __init__(
        self,
        *,
        token_interval_s: float = 0.001,
        max_num_seqs: int = 8,
        max_model_len: int = MAX_MODEL_LEN,
        block_size: int = 4,
        token_text: Callable[[int], str] = lambda i: f" t{i}",
    ) -> None:
        self.token_interval_s = token_interval_s
        self.token_text = token_text
        self._info = EngineInfo(
            kind="fake",
            model=MODEL,
            max_model_len=max_model_len,
            block_size=block_size,
            num_gpu_blocks=64,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=256,
            vocab_size=VOCAB,
        )
        self._registry = CollectorRegistry()
        self._running_gauge = Gauge(
            "vllm:num_requests_running", "running", ["model_name"], registry=self._registry
        )
        self.load_gate = asyncio.Event()
        self.load_gate.set()
        self.warm_gate = asyncio.Event()
        self.warm_gate.set()
        self.fail_load: Exception | None = None
        self.running: set[str] = set()
        self.aborted: list[str] = []
        self.finished: list[str] = []
        self.requests: list[EngineRequest] = []
        self.hold_first_token = asyncio.Event()  # cleared: generate waits before token 1
        self.hold_first_token.set()
        self._listener: CacheListener | None = None
        self._cached: set[int] = set()
        self.shut_down = False

    @property
    def info(self) -> EngineInfo:
        return self._info

    @property
    def registry(self) -> CollectorRegistry:
        return self._registry

    async def load(self) -> None:
        await self.load_gate.wait()
        if self.fail_load is not None:
            raise self.fail_load

    async def warm_up(self) -> None:
        await self.warm_gate.wait()

    def tokenize(self, text: str) -> list[int]:
        return [sum(map(ord, w)) % VOCAB for w in text.split()]

    def emit_cache(self, event: CacheEvent) -> None:
        if event.kind is CacheEventKind.STORED:
            self._cached.update(event.block_hashes)
        elif event.kind is CacheEventKind.REMOVED:
            self._cached.difference_update(event.block_hashes)
        else:
            self._cached.clear()
        if self._listener is not None:
            self._listener(event)

    def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        if len(self.running) >= self._info.max_num_seqs:
            raise PreheatError(
                ErrorCode.RESOURCE_EXHAUSTED,
                f"engine is full: {len(self.running)} sequences running",
            )
        self.requests.append(request)
        self.running.add(request.request_id)
        self._running_gauge.labels("fake-model").set(len(self.running))
        return self._gen(request)

    async def _gen(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        rid = request.request_id
        done = False
        try:
            hashes = block_hashes(request.prompt_token_ids, self._info.block_size)
            new = [h for h in hashes if h not in self._cached]
            if new:
                self.emit_cache(CacheEvent(CacheEventKind.STORED, tuple(new)))
            await self.hold_first_token.wait()
            n = request.sampling.max_tokens
            for i in range(n):
                await asyncio.sleep(self.token_interval_s)
                last = i == n - 1
                yield EngineOutput(
                    text=self.token_text(i),
                    token_ids=(i % VOCAB,),
                    finish_reason=FinishReason.LENGTH if last else None,
                    usage=Usage(len(request.prompt_token_ids), 0, n) if last else None,
                    timing=StageTiming(0.001, 0.002, 0.003) if last else None,
                )
            done = True
            self.finished.append(rid)
        finally:
            if not done:
                self.aborted.append(rid)
            self.running.discard(rid)
            self._running_gauge.labels("fake-model").set(len(self.running))

    def stats(self) -> EngineStats:
        return EngineStats(len(self.running), 0, len(self._cached) / 64)

    def set_cache_listener(self, listener: CacheListener | None) -> None:
        self._listener = listener

    def cached_blocks(self) -> frozenset[int]:
        return frozenset(self._cached)

    async def shutdown(self) -> None:
        self.shut_down = True


CONTROL_TOKEN = "test-control-token"


class Authed:
    """A stub whose every call carries ``authorization: Bearer <token>``."""

    def __init__(self, stub: Any, token: str) -> None:
        self._stub = stub
        self._metadata = (("authorization", f"Bearer {token}"),)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)

        def call(request: Any, **kw: Any) -> Any:
            return method(request, metadata=self._metadata, **kw)

        return call


@dataclass
class Client:
    server: WorkerServer
    channel: grpc.aio.Channel
    inference: Any
    control: Any  # WorkerControl on the control port, with the control token
    data_control: Any  # WorkerControl on the data port, no token (what a router calls)
    health: Any
    http: aiohttp.ClientSession
    http_url: str

    async def generate(
        self, req: inference_pb2.GenerateRequest, **kw: Any
    ) -> list[inference_pb2.GenerateResponse]:
        return [c async for c in self.inference.Generate(req, **kw)]

    async def health_status(self, service: str = "") -> int:
        resp = await self.health.Check(health_pb2.HealthCheckRequest(service=service))
        return int(resp.status)

    async def state(self) -> int:
        return int((await self.control.Status(worker_pb2.StatusRequest())).state)


class NoDeadlineContext:
    """What the Generate servicer reads of a gRPC context, for a test that drives the
    servicer's stream itself: no deadline."""

    def time_remaining(self) -> float | None:
        return None


def gen_request(
    prompt: str = "hello there world",
    max_tokens: int = 5,
    **kw: Any,
) -> inference_pb2.GenerateRequest:
    sampling = kw.pop("sampling", None) or inference_pb2.SamplingParams(max_tokens=max_tokens)
    return inference_pb2.GenerateRequest(prompt=prompt, sampling=sampling, **kw)


@contextlib.asynccontextmanager
async def running_worker(
    engine: Any, *, wait_warm: bool = True, **config: Any
) -> AsyncIterator[Client]:
    config.setdefault("worker_id", "w-test")
    config.setdefault("drain_grace_s", 5.0)
    config.setdefault("stop_grace_s", 1.0)
    config.setdefault("control_token", CONTROL_TOKEN)
    server = WorkerServer(engine, WorkerConfig(**config))
    ports = await server.start()
    control_port = ports.control or ports.grpc  # no token: no control port (calls fail)
    try:
        if wait_warm:
            await asyncio.wait_for(server.wait_warm(), 10)
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc}") as channel,
            grpc.aio.insecure_channel(f"127.0.0.1:{control_port}") as control,
            aiohttp.ClientSession() as http,
        ):
            yield Client(
                server=server,
                channel=channel,
                inference=inference_pb2_grpc.InferenceStub(channel),
                control=Authed(worker_pb2_grpc.WorkerControlStub(control), config["control_token"]),
                data_control=worker_pb2_grpc.WorkerControlStub(channel),
                health=health_pb2_grpc.HealthStub(channel),
                http=http,
                http_url=f"http://127.0.0.1:{ports.http}",
            )
    finally:
        await asyncio.wait_for(server.stop(), 20)


async def eventually(check: Callable[[], Awaitable[bool] | bool], timeout_s: float = 5.0) -> None:
    """Polls ``check`` until it is true (bounded); for state held by other components."""
    async with asyncio.timeout(timeout_s):
        while True:
            result = check()
            if result if isinstance(result, bool) else await result:
                return
            await asyncio.sleep(0.01)
