"""The router's gRPC services: ``preheat.v1.Inference`` (proxy) and ``preheat.v1.Router``
(lookaside ``Pick``). Thin adapters over :class:`Dispatcher`; errors go through
``preheat.wire.errors.abort``, the one PreheatError -> status mapping.

Client region/zone come from metadata ``x-client-region`` / ``x-client-zone`` (Inference) or
the request fields (Pick), else the router's own. A session id in metadata ``x-session-id``
is used when the request's ``session_id`` is empty. A pool's response cache answers a
deterministic ``Generate`` it holds at once, as one chunk (:mod:`.cache_use`); trailers
``x-preheat-cache`` (hit, miss, bypass) and ``x-preheat-degraded`` (the ladder's step).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc

from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.routing.types import Candidate, Endpoint
from preheat.process.logs import fields, request_context
from preheat.proto.preheat.v1 import (
    inference_pb2,
    inference_pb2_grpc,
    router_pb2,
    router_pb2_grpc,
)
from preheat.router.frontend import cache_use, tracing
from preheat.router.frontend.dispatch import Dispatcher, Prepared, StreamStats
from preheat.router.frontend.metrics import RouterOutcome
from preheat.router.frontend.tracing import RequestTrace
from preheat.wire.coalesce import CoalesceConfig, coalesce
from preheat.wire.errors import abort, grpc_status

if TYPE_CHECKING:
    from preheat.router.pools import Pool, PoolSet

log = logging.getLogger("preheat.router")

CLIENT_REGION_KEY = "x-client-region"
CLIENT_ZONE_KEY = "x-client-zone"
SESSION_KEY = "x-session-id"
MAX_ALTERNATES = 3
# what a client sees of a bug: the detail (and the request id) is in the router's log
INTERNAL_MESSAGE = "internal error in the router (its log has the details)"


def _metadata(context: Any) -> dict[str, str]:
    md = context.invocation_metadata() or ()
    out: dict[str, str] = {}
    for item in md:
        key, value = item[0], item[1]
        if isinstance(value, str):
            out[key.lower()] = value
    return out


def _tenant(d: Dispatcher, md: dict[str, str]) -> str:
    """The tenant a trusted gateway names in metadata (``--tenant-header``), else ""."""
    key = d.config.tenant_header.lower()
    return md.get(key, "") if key else ""


def _with_session(req: inference_pb2.GenerateRequest, md: dict[str, str]) -> Any:
    sid = md.get(SESSION_KEY, "")
    if sid and not req.session_id:
        r = inference_pb2.GenerateRequest()
        r.CopyFrom(req)
        r.session_id = sid
        return r
    return req


def _for_pool(pool: Pool, req: inference_pb2.GenerateRequest) -> inference_pb2.GenerateRequest:
    """``req`` naming the model as the pool's workers do (an alias renamed)."""
    model = pool.canonical(req.model)
    if model == req.model:
        return req
    r = inference_pb2.GenerateRequest()
    r.CopyFrom(req)
    r.model = model
    return r


class InferenceProxy(inference_pb2_grpc.InferenceServicer):
    def __init__(self, pools: PoolSet, coalesce_config: CoalesceConfig) -> None:
        self._pools = pools
        self._coalesce = coalesce_config

    async def Generate(
        self, request: inference_pb2.GenerateRequest, context: Any
    ) -> AsyncIterator[inference_pb2.GenerateResponse]:
        loop = asyncio.get_running_loop()
        received = loop.time()
        received_pc = time.perf_counter()
        md = _metadata(context)
        metrics = self._pools.metrics
        trace: RequestTrace | None = None
        try:
            pool = self._pools.resolve(request.model)
            d = pool.dispatcher
            metrics = d.metrics
            trace = tracing.start(d.tracing, md, "grpc", "text_completion", received_pc)
            prep = await d.prepare_async(
                _with_session(_for_pool(pool, request), md),
                client_region=md.get(CLIENT_REGION_KEY, ""),
                client_zone=md.get(CLIENT_ZONE_KEY, ""),
                received=received,
                tenant=_tenant(d, md),
            )
            prep = tracing.prepared(prep, trace)
        except PreheatError as e:
            if trace is not None:
                trace.refused(e.code.value, e.message, time.perf_counter())
            metrics.observe_outcome("grpc", RouterOutcome.INVALID)
            log.info("request_refused", extra=fields(code=e.code.value, reason=e.message))
            await abort(context, e)
        with request_context(prep.info.request_id):
            cache = _cache_lookup(d, prep, md)
            if cache.answer is not None:  # answered by the router: no worker, no quota
                metrics.observe_outcome("grpc", RouterOutcome.OK, slo_class=prep.slo_class)
                hit = cache_use.hit_chunk(prep, cache.answer)
                if trace is not None:
                    trace.end(
                        "ok", time.perf_counter(), usage=hit.usage, finish_reason=hit.finish_reason
                    )
                _trail(context, StreamStats(), cache)
                yield hit
                return
            stats = StreamStats()
            got = cache_use.Collected() if cache.key else None
            stream = d.generate(prep, api="grpc", timeout_s=context.time_remaining(), stats=stats)
            try:
                if not self._coalesce.enabled:  # the common case: no extra layer per chunk
                    async with contextlib.aclosing(stream):
                        async for chunk in stream:
                            if got is not None:
                                got.add(chunk)
                            yield chunk
                else:
                    async with (
                        contextlib.aclosing(stream),
                        contextlib.aclosing(coalesce(stream, self._coalesce)) as chunks,
                    ):
                        async for chunk in chunks:
                            if got is not None:
                                got.add(chunk)
                            yield chunk
                if got is not None:  # a whole, finished answer (an error raised above)
                    got.store(cache, prep, stats)
                _trail(context, stats, cache)
            except PreheatError as e:
                log.info("request_failed", extra=fields(code=e.code.value, reason=e.message))
                await abort(context, e)
            except Exception as e:
                if isinstance(e, grpc.aio.AbortError):
                    raise
                log.exception("request_error")
                await abort(context, PreheatError(ErrorCode.INTERNAL, INTERNAL_MESSAGE))


DEGRADED_TRAILER = "x-preheat-degraded"
CACHE_TRAILER = cache_use.CACHE_HEADER.lower()  # hit, miss or bypass


def _trail(context: Any, stats: StreamStats, cache: cache_use.CacheUse) -> None:
    """The degradation step the request took and its response cache's result, as
    trailing metadata (none: nothing)."""
    md: list[tuple[str, str]] = []
    if note := stats.degraded_note():
        md.append((DEGRADED_TRAILER, note))
    if cache.result:
        md.append((CACHE_TRAILER, cache.result))
    if md:
        context.set_trailing_metadata(tuple(md))


def _cache_lookup(d: Dispatcher, prep: Prepared, md: dict[str, str]) -> cache_use.CacheUse:
    """The pool's response cache for a gRPC request (``core.traffic.respcache``): off, not
    cacheable, bypassed (metadata ``x-preheat-cache: bypass``), a hit or a miss."""
    if not d.config.traffic.cache.enabled:
        return cache_use.CacheUse()
    params = cache_use.generate_params(prep.request)
    if params is None:
        return cache_use.CacheUse()
    bypass = md.get(cache_use.CACHE_BYPASS, "").lower() == "bypass"
    model = d.config.model or prep.request.model
    return cache_use.lookup(d, "grpc", model, params, prep, bypass=bypass)


def picked(endpoint: Endpoint, predicted_ms: float) -> router_pb2.PickedEndpoint:
    return router_pb2.PickedEndpoint(
        worker_id=endpoint.id,
        address=endpoint.address,
        zone=endpoint.zone,
        region=endpoint.region,
        predicted_ttft_ms=predicted_ms,
    )


def alternates(
    chosen: Endpoint, candidates: tuple[Candidate, ...]
) -> list[router_pb2.PickedEndpoint]:
    rest = sorted((c for c in candidates if c.endpoint.id != chosen.id), key=lambda c: c.total_ms)
    return [picked(c.endpoint, c.total_ms) for c in rest[:MAX_ALTERNATES]]


MAX_PICK_BATCH = 1024
MAX_PICK_STREAM_IN_FLIGHT = 1024


async def pick_response(
    d: Dispatcher, request: router_pb2.PickRequest, md: dict[str, str], deadline: float | None
) -> router_pb2.PickResponse:
    """One decision, as Pick, each item of PickBatch and PickStream, and the embedded
    router make it (``md``: the caller's gRPC metadata); raises PreheatError."""
    outcome = RouterOutcome.ERROR
    error = ""
    trace = None
    if d.tracing is not None:  # the decision as a trace: router.request (api pick), schedule
        trace = tracing.start(d.tracing, md, "pick", "text_completion", time.perf_counter())
    try:
        prep = d.prepare(
            _with_session(request.request, md),
            client_region=request.client_region or md.get(CLIENT_REGION_KEY, ""),
            client_zone=request.client_zone or md.get(CLIENT_ZONE_KEY, ""),
            tenant=_tenant(d, md),
        )
        prep = tracing.prepared(prep, trace)
        decision = await d.decide(prep, deadline=deadline)
        ep = decision.endpoint
        assert ep is not None
        outcome = RouterOutcome.OK
        return router_pb2.PickResponse(
            endpoint=picked(ep, decision.predicted_ttft_ms),
            reason=decision.reason,
            explanation=decision.explanation,
            cached_blocks=decision.cached_blocks,
            alternates=alternates(ep, decision.candidates),
        )
    except PreheatError as e:
        outcome = RouterOutcome.of_error(e.code)
        error = e.message
        raise
    finally:
        d.metrics.observe_outcome("pick", outcome)
        if trace is not None:
            trace.end(outcome.value, time.perf_counter(), error=error)


async def pool_pick(
    pools: PoolSet, request: router_pb2.PickRequest, md: dict[str, str], deadline: float | None
) -> router_pb2.PickResponse:
    """:func:`pick_response` in the pool that serves the request's model."""
    try:
        pool = pools.resolve(request.request.model)
    except PreheatError as e:
        pools.metrics.observe_outcome("pick", RouterOutcome.of_error(e.code))
        raise
    model = pool.canonical(request.request.model)
    if model != request.request.model:
        r = router_pb2.PickRequest()
        r.CopyFrom(request)
        r.request.model = model
        request = r
    return await pick_response(pool.dispatcher, request, md, deadline)


class RouterService(router_pb2_grpc.RouterServicer):
    def __init__(self, pools: PoolSet) -> None:
        self._pools = pools

    @staticmethod
    def _deadline(context: Any) -> float | None:
        remaining = context.time_remaining()
        return None if remaining is None else asyncio.get_running_loop().time() + remaining

    async def Pick(self, request: router_pb2.PickRequest, context: Any) -> router_pb2.PickResponse:
        try:
            return await pool_pick(
                self._pools, request, _metadata(context), self._deadline(context)
            )
        except PreheatError as e:
            await abort(context, e)

    async def PickBatch(
        self, request: router_pb2.PickBatchRequest, context: Any
    ) -> router_pb2.PickBatchResponse:
        n = len(request.picks)
        if n > MAX_PICK_BATCH:
            await abort(
                context,
                PreheatError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"a PickBatch carries at most {MAX_PICK_BATCH} requests, got {n}",
                ),
            )
        md = _metadata(context)
        deadline = self._deadline(context)
        results = [await self._result(item, md, deadline) for item in request.picks]
        return router_pb2.PickBatchResponse(results=results)

    async def _result(
        self, request: router_pb2.PickRequest, md: dict[str, str], deadline: float | None
    ) -> router_pb2.PickResult:
        """One decision as an item of PickBatch or PickStream: a refusal is its answer."""
        try:
            return router_pb2.PickResult(picked=await pool_pick(self._pools, request, md, deadline))
        except PreheatError as e:
            return router_pb2.PickResult(
                error=router_pb2.PickError(
                    code=grpc_status(e.code).name,
                    message=e.message,
                    retry_after_s=e.retry_after_s or 0.0,
                )
            )

    async def PickStream(
        self, request_iterator: AsyncIterator[router_pb2.PickStreamRequest], context: Any
    ) -> AsyncIterator[router_pb2.PickStreamResponse]:
        md = _metadata(context)
        loop = asyncio.get_running_loop()
        answers: asyncio.Queue[router_pb2.PickStreamResponse | None] = asyncio.Queue()
        room = asyncio.Semaphore(MAX_PICK_STREAM_IN_FLIGHT)  # released as answers are sent
        deciding: set[asyncio.Task[None]] = set()

        async def decide(item: router_pb2.PickStreamRequest) -> None:
            deadline = loop.time() + item.timeout_ms / 1e3 if item.timeout_ms else None
            try:
                result = await self._result(item.pick, md, deadline)
            except Exception:  # a bug must still answer, or the client waits forever
                log.exception("pick_error")
                result = router_pb2.PickResult(
                    error=router_pb2.PickError(code="INTERNAL", message=INTERNAL_MESSAGE)
                )
            answers.put_nowait(router_pb2.PickStreamResponse(id=item.id, result=result))

        async def read() -> None:
            try:
                async for item in request_iterator:
                    await room.acquire()
                    task = asyncio.create_task(decide(item))
                    deciding.add(task)
                    task.add_done_callback(deciding.discard)
                while deciding:  # the client has said all it will: answer what is left
                    await asyncio.wait(set(deciding))
            finally:
                answers.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while (answer := await answers.get()) is not None:
                room.release()
                yield answer
            await reader  # a failed read (the client went away) ends the call with it
        finally:
            reader.cancel()
            for task in list(deciding):
                task.cancel()
