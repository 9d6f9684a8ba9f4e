"""Helpers for router front-end tests: in-process sim workers on loopback and a RouterServer
over them, with gRPC stubs and an HTTP session. Every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import grpc

from preheat.engine.sim import SimConfig, SimEngine
from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc, router_pb2_grpc
from preheat.router.app import RouterConfig, RouterServer
from preheat.router.endpoints import DiscoveredEndpoint, StaticDiscovery
from preheat.worker.server import WorkerConfig, WorkerServer

MODEL = "sim-model"
BLOCK = 16


def sim_engine(**options: Any) -> SimEngine:
    """A small, fast SimEngine: 16-token blocks, 32000-token vocabulary (the router's default
    ``sim`` tokenizer), no load or warm-up time."""
    base: dict[str, Any] = {
        "model": MODEL,
        "max_model_len": 4096,
        "block_size": BLOCK,
        "num_gpu_blocks": 4096,
        "max_num_seqs": 16,
        "load_s": 0.0,
        "warmup_s": 0.0,
        "time_scale": 0.2,
    }
    base.update(options)
    return SimEngine(SimConfig.from_options(base))


@dataclass
class Worker:
    server: WorkerServer
    endpoint: DiscoveredEndpoint

    @property
    def id(self) -> str:
        return self.server.worker_id


@contextlib.asynccontextmanager
async def workers(
    specs: Sequence[dict[str, Any]],
) -> AsyncIterator[list[Worker]]:
    """Starts one sim worker per spec: ``{"id": "w-1", "zone": "", "region": "",
    "engine": {...SimConfig options}}``; stops them all at the end (bounded)."""
    out: list[Worker] = []
    try:
        for i, spec in enumerate(specs):
            wid = spec.get("id", f"w-{i + 1}")
            server = WorkerServer(
                sim_engine(**spec.get("engine", {})),
                WorkerConfig(
                    worker_id=wid,
                    zone=spec.get("zone", ""),
                    region=spec.get("region", ""),
                    drain_grace_s=spec.get("drain_grace_s", 2.0),
                    stop_grace_s=0.5,
                ),
            )
            ports = await server.start()
            out.append(
                Worker(
                    server,
                    DiscoveredEndpoint(
                        address=f"127.0.0.1:{ports.grpc}",
                        id=wid,
                        zone=spec.get("zone", ""),
                        region=spec.get("region", ""),
                    ),
                )
            )
        for w in out:
            await asyncio.wait_for(w.server.wait_warm(), 10)
        yield out
    finally:
        for w in out:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(w.server.stop(), 20)


@dataclass
class Router:
    server: RouterServer
    channel: grpc.aio.Channel
    inference: Any
    router: Any
    http: aiohttp.ClientSession
    url: str
    extra: dict[str, Any] = field(default_factory=dict)

    async def generate(
        self, req: inference_pb2.GenerateRequest, **kw: Any
    ) -> list[inference_pb2.GenerateResponse]:
        kw.setdefault("timeout", 20)
        return [c async for c in self.inference.Generate(req, **kw)]

    async def worker_of(self, req: inference_pb2.GenerateRequest, **kw: Any) -> str:
        chunks = await self.generate(req, **kw)
        return chunks[-1].worker_id


@contextlib.asynccontextmanager
async def router(
    endpoints: Sequence[DiscoveredEndpoint],
    *,
    min_ready: int | None = None,
    fixed_rtt_ms: float | None = 1.0,
    **config: Any,
) -> AsyncIterator[Router]:
    """A RouterServer over a literal static discovery of ``endpoints``; waits until
    ``min_ready`` (default: all) endpoints are routable. RTTs are fixed at ``fixed_rtt_ms``
    (None: measured) so that a busy test machine's ping jitter cannot steer decisions."""
    config.setdefault("refresh_interval_s", 0.1)
    config.setdefault("model", MODEL)
    server = RouterServer(StaticDiscovery(list(endpoints)), RouterConfig(**config))
    if fixed_rtt_ms is not None:
        for e in endpoints:
            server.store.inject_rtt(e.key, fixed_rtt_ms)
    ports = await server.start()
    try:
        want = len(endpoints) if min_ready is None else min_ready
        if want:
            await server.wait_ready(want, timeout_s=10)
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc}") as channel,
            aiohttp.ClientSession() as http,
        ):
            yield Router(
                server=server,
                channel=channel,
                inference=inference_pb2_grpc.InferenceStub(channel),
                router=router_pb2_grpc.RouterStub(channel),
                http=http,
                url=f"http://127.0.0.1:{ports.http}",
            )
    finally:
        await asyncio.wait_for(server.stop(), 20)


def gen(
    prompt: str = "hello there world", max_tokens: int = 4, **kw: Any
) -> inference_pb2.GenerateRequest:
    return inference_pb2.GenerateRequest(
        prompt=prompt, sampling=inference_pb2.SamplingParams(max_tokens=max_tokens), **kw
    )


def words(n: int, salt: str = "") -> str:
    """A prompt of exactly ``n`` sim tokens."""
    return " ".join(f"p{salt}{i}" for i in range(n))


async def eventually(check: Callable[[], Awaitable[bool] | bool], timeout_s: float = 5.0) -> None:
    """Polls ``check`` until it is true (bounded)."""
    async with asyncio.timeout(timeout_s):
        while True:
            result = check()
            if result if isinstance(result, bool) else await result:
                return
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def flooded(
    w: Worker, n: int = 12, max_tokens: int = 300, priority: int = 0
) -> AsyncIterator[None]:
    """``n`` long requests (wire ``priority``) sent straight to ``w`` (not through the
    router): its engine queue fills. Cancelled at the end of the block."""
    async with grpc.aio.insecure_channel(w.endpoint.address) as ch:
        stub = inference_pb2_grpc.InferenceStub(ch)

        async def one(i: int) -> None:
            req = gen(words(32, f"flood-{w.id}-{i}"), max_tokens, priority=priority)
            with contextlib.suppress(grpc.aio.AioRpcError):
                async for _ in stub.Generate(req, timeout=30):
                    pass

        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        try:
            yield
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
