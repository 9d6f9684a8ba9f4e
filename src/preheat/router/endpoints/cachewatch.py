"""Follows ``WorkerControl.WatchCache``: the endpoint's cached prefix blocks, exactly.

The stream starts with one snapshot message (every cached hash), then deltas. On any error
or end of stream the set becomes unknown (``None``) and the watcher resubscribes after a
backoff (doubling from ``min_backoff_s`` to ``max_backoff_s``, reset by a snapshot), which
gives a fresh snapshot. A worker started with a cache token (``--cache-token-file``) answers
UNAUTHENTICATED unless the call carries it (``metadata``, from the router's
``--worker-cache-token-file``): the set then stays unknown and ``watch_error`` says why.
"""

from __future__ import annotations

import asyncio

import grpc

from preheat.proto.preheat.v1 import worker_pb2, worker_pb2_grpc
from preheat.router.endpoints.entry import EndpointEntry


def apply_event(cached: set[int] | None, event: worker_pb2.CacheEvent) -> set[int] | None:
    """Folds one event into the cached set (a snapshot replaces it; a delta before any
    snapshot leaves it unknown)."""
    kind = event.WhichOneof("event")
    if event.snapshot:
        cached = set()
    elif cached is None:
        return None
    if kind == "stored":
        cached.update(event.stored.block_hashes)
    elif kind == "removed":
        cached.difference_update(event.removed.block_hashes)
    elif kind == "cleared":
        cached.clear()
    return cached


async def watch_cache(
    entry: EndpointEntry,
    *,
    min_backoff_s: float = 0.1,
    max_backoff_s: float = 5.0,
    metadata: tuple[tuple[str, str], ...] = (),
) -> None:
    stub = worker_pb2_grpc.WorkerControlStub(entry.channel)
    backoff = min_backoff_s
    while True:
        try:
            call = stub.WatchCache(worker_pb2.WatchCacheRequest(), metadata=metadata)
            try:
                async for event in call:
                    entry.cached = apply_event(entry.cached, event)
                    if event.snapshot:
                        backoff = min_backoff_s
                        entry.watch_error = ""
                    entry.cache_changed()
            finally:
                call.cancel()
            entry.watch_error = "WatchCache: stream ended"
        except grpc.aio.AioRpcError as e:
            entry.watch_error = f"WatchCache: {e.code().name}: {e.details()}"
        if entry.cached is not None:
            entry.cached = None
            entry.cache_changed()
        await asyncio.sleep(backoff)
        backoff = min(max_backoff_s, backoff * 2)
