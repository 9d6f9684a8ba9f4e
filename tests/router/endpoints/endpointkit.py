"""Helpers for endpoint-store tests: in-process sim workers on loopback and a running store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from preheat.engine.sim import SimConfig, SimEngine
from preheat.router.endpoints import DiscoveredEndpoint, DiscoverySource, EndpointStore
from preheat.worker.server import WorkerConfig, WorkerServer

VOCAB = 1000
BLOCK_SIZE = 4


def make_sim_engine(**options: Any) -> SimEngine:
    base: dict[str, Any] = {
        "model": "fake-model",
        "max_model_len": 256,
        "block_size": BLOCK_SIZE,
        "num_gpu_blocks": 256,
        "max_num_seqs": 8,
        "vocab_size": VOCAB,
        "load_s": 0.0,
        "warmup_s": 0.0,
    }
    base.update(options)
    return SimEngine(SimConfig.from_options(base))


@dataclass
class Worker:
    server: WorkerServer
    grpc_port: int
    http_port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/metrics"

    def discovered(self, **kw: Any) -> DiscoveredEndpoint:
        kw.setdefault("id", self.server.worker_id)
        return DiscoveredEndpoint(address=self.address, **kw)


@contextlib.asynccontextmanager
async def sim_workers(n: int, **config: Any) -> AsyncIterator[list[Worker]]:
    """``n`` warm sim workers ``w-0..``; ``config`` (e.g. zones=[...]) goes to WorkerConfig."""
    zones: list[str] = config.pop("zones", [""] * n)
    regions: list[str] = config.pop("regions", [""] * n)
    workers: list[Worker] = []
    try:
        for i in range(n):
            server = WorkerServer(
                make_sim_engine(),
                WorkerConfig(
                    worker_id=f"w-{i}",
                    zone=zones[i],
                    region=regions[i],
                    drain_grace_s=2.0,
                    stop_grace_s=0.5,
                    **config,
                ),
            )
            ports = await server.start()
            workers.append(Worker(server, ports.grpc, ports.http))
            await asyncio.wait_for(server.wait_warm(), 10)
        yield workers
    finally:
        for w in workers:
            await asyncio.wait_for(w.server.stop(), 20)


@contextlib.asynccontextmanager
async def running_store(source: DiscoverySource, **kw: Any) -> AsyncIterator[EndpointStore]:
    kw.setdefault("refresh_interval_s", 0.05)
    store = EndpointStore(source, **kw)
    task = asyncio.create_task(store.run())
    try:
        yield store
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


async def eventually(check: Callable[[], Awaitable[bool] | bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            result = check()
            if result if isinstance(result, bool) else await result:
                return
            await asyncio.sleep(0.01)
