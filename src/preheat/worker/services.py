"""The gRPC servicers: thin adapters from ``preheat.v1`` RPCs to :class:`WorkerServer`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from preheat.core.errors import ErrorCode, PreheatError
from preheat.grpc_errors import abort
from preheat.logs import fields
from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc, worker_pb2, worker_pb2_grpc
from preheat.worker.cache_hub import SubscriberOverflow

if TYPE_CHECKING:
    from preheat.worker.server import WorkerServer

log = logging.getLogger(__name__)


class InferenceService(inference_pb2_grpc.InferenceServicer):
    def __init__(self, worker: WorkerServer) -> None:
        self._w = worker

    async def Generate(
        self, request: inference_pb2.GenerateRequest, context: Any
    ) -> AsyncIterator[inference_pb2.GenerateResponse]:
        async for chunk in self._w.generate(request, context):
            yield chunk


class ControlService(worker_pb2_grpc.WorkerControlServicer):
    def __init__(self, worker: WorkerServer) -> None:
        self._w = worker

    async def _guard(self, context: Any, op: Any) -> worker_pb2.WorkerStatus:
        try:
            await op()
        except PreheatError as e:
            log.info("control_refused", extra=fields(code=e.code.value, reason=e.message))
            await abort(context, e)
        return self._w.status()

    async def Status(
        self, request: worker_pb2.StatusRequest, context: Any
    ) -> worker_pb2.WorkerStatus:
        return self._w.status()

    async def Promote(
        self, request: worker_pb2.PromoteRequest, context: Any
    ) -> worker_pb2.WorkerStatus:
        return await self._guard(context, self._w.promote)

    async def Demote(
        self, request: worker_pb2.DemoteRequest, context: Any
    ) -> worker_pb2.WorkerStatus:
        return await self._guard(context, self._w.demote)

    async def Drain(
        self, request: worker_pb2.DrainRequest, context: Any
    ) -> worker_pb2.WorkerStatus:
        await self._w.begin_drain_and_wait_draining()
        return self._w.status()

    async def WatchCache(
        self, request: worker_pb2.WatchCacheRequest, context: Any
    ) -> AsyncIterator[worker_pb2.CacheEvent]:
        try:
            async for ev in self._w.hub.subscribe():
                yield _cache_event_pb(ev.seq, ev.kind.value, ev.block_hashes, ev.snapshot)
        except SubscriberOverflow:
            await abort(
                context,
                PreheatError(
                    ErrorCode.RESOURCE_EXHAUSTED,
                    "WatchCache subscriber fell too far behind and was dropped; "
                    "resubscribe for a fresh snapshot",
                ),
            )


def _cache_event_pb(
    seq: int, kind: str, hashes: tuple[int, ...], snapshot: bool
) -> worker_pb2.CacheEvent:
    if kind == "stored":
        return worker_pb2.CacheEvent(
            seq=seq, stored=worker_pb2.BlocksStored(block_hashes=hashes), snapshot=snapshot
        )
    if kind == "removed":
        return worker_pb2.CacheEvent(
            seq=seq, removed=worker_pb2.BlocksRemoved(block_hashes=hashes), snapshot=snapshot
        )
    return worker_pb2.CacheEvent(seq=seq, cleared=worker_pb2.AllBlocksCleared(), snapshot=snapshot)
