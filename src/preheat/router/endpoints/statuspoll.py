"""Polls ``WorkerControl.Status``: the endpoint's lifecycle, load and health in one call."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import grpc

from preheat.proto.preheat.v1 import worker_pb2, worker_pb2_grpc
from preheat.router.endpoints.entry import EndpointEntry

log = logging.getLogger(__name__)


async def poll_status(
    entry: EndpointEntry, *, timeout_s: float, clock: Callable[[], float]
) -> bool:
    """One Status call: updates ``entry`` and returns whether it answered. The round trip
    is an RTT sample (it is the health ping)."""
    stub = worker_pb2_grpc.WorkerControlStub(entry.channel)
    t0 = time.perf_counter()
    try:
        status = await stub.Status(worker_pb2.StatusRequest(), timeout=timeout_s)
    except grpc.aio.AioRpcError as e:
        was_healthy = entry.healthy
        entry.healthy = False
        entry.consecutive_failures += 1
        entry.status_error = f"Status: {e.code().name}: {e.details()}"
        if was_healthy:
            log.warning(
                "endpoint unhealthy",
                extra={"endpoint": entry.key, "error": entry.status_error},
            )
        entry.touch()
        return False
    entry.rtt.sample((time.perf_counter() - t0) * 1000.0)
    if not entry.healthy and entry.consecutive_failures:
        log.info("endpoint healthy again", extra={"endpoint": entry.key})
    entry.status = status
    entry.status_at = clock()
    entry.healthy = True
    entry.consecutive_failures = 0
    entry.status_error = ""
    entry.touch()
    return True


async def status_loop(
    entry: EndpointEntry, *, interval_s: float, timeout_s: float, clock: Callable[[], float]
) -> None:
    """Status every ``interval_s``, or at once when ``entry.kick`` is set."""
    while True:
        entry.kick.clear()
        await poll_status(entry, timeout_s=timeout_s, clock=clock)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(interval_s):
                await entry.kick.wait()
