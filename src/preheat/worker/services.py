"""The gRPC servicers: thin adapters from ``preheat.v1`` RPCs to :class:`WorkerServer`.

The data port serves Inference, health and :class:`DataControlService` (Status, WatchCache);
the control port serves :class:`ControlService`, where every call needs the control token.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, NoReturn

from preheat.core.errors import ErrorCode, PreheatError
from preheat.process.logs import fields
from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc, worker_pb2, worker_pb2_grpc
from preheat.wire.errors import abort
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


BEARER = "Bearer "


def token_matches(context: Any, tokens: tuple[str, ...]) -> bool:
    """Does the call carry ``authorization: Bearer <t>`` for one of ``tokens`` (non-empty)?

    Compared in constant time (:func:`hmac.compare_digest`) against every token, so the
    answer's timing says nothing about how much of a guess was right.
    """
    sent = ""
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and isinstance(value, str):
            sent = value
    got = sent.encode()
    ok = False
    for t in tokens:
        if t:
            ok |= hmac.compare_digest(got, (BEARER + t).encode())
    return ok


async def _require(context: Any, tokens: tuple[str, ...], rpc: str) -> None:
    if not token_matches(context, tokens):
        log.warning("control_unauthenticated", extra=fields(rpc=rpc, peer=context.peer()))
        await abort(
            context,
            PreheatError(
                ErrorCode.UNAUTHENTICATED,
                f"WorkerControl.{rpc} needs the worker's token as "
                "'authorization: Bearer <token>' metadata",
            ),
        )


class _CacheWatch:
    def __init__(self, worker: WorkerServer) -> None:
        self._w = worker

    async def _watch(self, context: Any) -> AsyncIterator[worker_pb2.CacheEvent]:
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


class ControlService(_CacheWatch, worker_pb2_grpc.WorkerControlServicer):
    """WorkerControl on the control port: every RPC needs the control token."""

    def __init__(self, worker: WorkerServer, *, token: str) -> None:
        if not token:
            raise ValueError("the control port needs a non-empty token")
        super().__init__(worker)
        self._tokens = (token,)

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
        await _require(context, self._tokens, "Status")
        return self._w.status()

    async def Promote(
        self, request: worker_pb2.PromoteRequest, context: Any
    ) -> worker_pb2.WorkerStatus:
        await _require(context, self._tokens, "Promote")
        log.info("control_call", extra=fields(rpc="Promote", peer=context.peer()))
        return await self._guard(context, self._w.promote)

    async def Demote(
        self, request: worker_pb2.DemoteRequest, context: Any
    ) -> worker_pb2.WorkerStatus:
        await _require(context, self._tokens, "Demote")
        log.info("control_call", extra=fields(rpc="Demote", peer=context.peer()))
        return await self._guard(context, self._w.demote)

    async def Drain(
        self, request: worker_pb2.DrainRequest, context: Any
    ) -> worker_pb2.WorkerStatus:
        await _require(context, self._tokens, "Drain")
        log.info("control_call", extra=fields(rpc="Drain", peer=context.peer()))
        await self._w.begin_drain_and_wait_draining()
        return self._w.status()

    async def WatchCache(
        self, request: worker_pb2.WatchCacheRequest, context: Any
    ) -> AsyncIterator[worker_pb2.CacheEvent]:
        await _require(context, self._tokens, "WatchCache")
        async for ev in self._watch(context):
            yield ev


class DataControlService(_CacheWatch, worker_pb2_grpc.WorkerControlServicer):
    """WorkerControl on the data port: the read-only RPCs a router needs.

    ``Status`` is open (lifecycle and load: what ``/metrics`` shows too). ``WatchCache``
    needs one of ``cache_tokens`` when any is set (it lists the hashes of cached prompt
    blocks). ``Promote``, ``Demote`` and ``Drain`` are not served here: UNIMPLEMENTED,
    naming the control port.
    """

    def __init__(self, worker: WorkerServer, *, cache_tokens: tuple[str, ...] = ()) -> None:
        super().__init__(worker)
        self._cache_tokens = tuple(t for t in cache_tokens if t)

    async def Status(
        self, request: worker_pb2.StatusRequest, context: Any
    ) -> worker_pb2.WorkerStatus:
        return self._w.status()

    async def _not_here(self, context: Any, rpc: str) -> NoReturn:
        log.warning("control_on_data_port", extra=fields(rpc=rpc, peer=context.peer()))
        await abort(
            context,
            PreheatError(
                ErrorCode.UNIMPLEMENTED,
                f"WorkerControl.{rpc} is served only on the worker's control port "
                "(--control-port), with its token",
            ),
        )

    async def Promote(
        self, request: worker_pb2.PromoteRequest, context: Any
    ) -> worker_pb2.WorkerStatus:
        await self._not_here(context, "Promote")

    async def Demote(
        self, request: worker_pb2.DemoteRequest, context: Any
    ) -> worker_pb2.WorkerStatus:
        await self._not_here(context, "Demote")

    async def Drain(
        self, request: worker_pb2.DrainRequest, context: Any
    ) -> worker_pb2.WorkerStatus:
        await self._not_here(context, "Drain")

    async def WatchCache(
        self, request: worker_pb2.WatchCacheRequest, context: Any
    ) -> AsyncIterator[worker_pb2.CacheEvent]:
        if self._cache_tokens:
            await _require(context, self._cache_tokens, "WatchCache")
        async for ev in self._watch(context):
            yield ev


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
