"""The router's request path, shared by every front end: prepare, decide, proxy.

1. **Prepare** (:meth:`Dispatcher.prepare`, :meth:`Dispatcher.prepare_async`): tokenize
   the prompt (counting piece by piece, so a prompt over the context window is refused
   after about one window's worth of work), validate it with ``preheat.core.validation``
   against the pool's limits, cut it into prefix block hashes and work out its TTFT target
   (``ttft_deadline_ms``, else its SLO class's deadline, else the pool's default target:
   ``preheat.core.routing.admission``). ``prepare_async`` does the CPU work of a prompt of
   ``offload_chars`` or more in a small thread pool, off the event loop.
2. **Admit** (:meth:`Dispatcher.generate`): the pool's bound on requests in flight
   (``preheat.core.routing.admission.admit``, adapted to the observed TTFT); past it
   RESOURCE_EXHAUSTED with the predicted drain time as retry-after.
3. **Decide** (:meth:`Dispatcher.decide`): wait (bounded queue, bounded time) until an
   endpoint is routable, build a :class:`RoutingContext` from the store's snapshot, call the
   pure scheduler and keep its state. A rejection becomes RESOURCE_EXHAUSTED with a
   retry-after. Every decision is recorded in the store's prefix history.
4. **Proxy** (:meth:`Dispatcher.generate`): forward to the chosen worker with the remaining
   deadline; a failure before anything was passed on (UNAVAILABLE, RESOURCE_EXHAUSTED, a
   dead connection, or no first token within ``first_token_timeout_s``: a frozen worker) is
   retried on the next-best endpoint (bounded); when every endpoint was tried, the request
   waits in the queue (bounded) for a new one, e.g. a standby being promoted. A buffered
   request (a non-streaming HTTP response) passes nothing on before the worker finishes,
   so a failure at any point is retried. After tokens were passed on the stream ends with
   UNAVAILABLE saying so, never with duplicated text; a worker stream that ends without a
   ``finish_reason`` ends with UNAVAILABLE too, never as a silent truncation. Closing the
   returned iterator (client cancel) cancels the upstream call.

Everything here is transport-neutral: errors are ``PreheatError``; the gRPC and HTTP front
ends map them to statuses in their one place each.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import math
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc

from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.routing import admission
from preheat.core.routing.admission import AdmissionConfig, AdmissionInput, LimitState
from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.plugins.prefix import new_tokens
from preheat.core.routing.plugins.queue import phase_residual_ms, requests_ahead
from preheat.core.routing.scheduler import SchedulerState, schedule
from preheat.core.routing.types import (
    Endpoint,
    PrefillCost,
    RequestInfo,
    RouteDecision,
    RoutingContext,
)
from preheat.core.traffic import fairness, ladder, lanes
from preheat.core.traffic.classes import Traffic, TrafficClass, UnknownClass
from preheat.core.traffic.ladder import CLAMP, REJECT
from preheat.core.traffic.respcache import ResponseCache
from preheat.core.validation import ModelLimits, reason_of
from preheat.process.logs import fields, pseudonym
from preheat.process.tracing import Tracing
from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc
from preheat.router.endpoints import EndpointStore
from preheat.router.frontend.bounds import check_request
from preheat.router.frontend.metrics import RouterMetrics, RouterOutcome
from preheat.router.frontend.quotas import Grant, Quotas, RateLimited
from preheat.router.frontend.tokenizer import (
    PromptTokenizer,
    TooManyTokens,
    encode_within,
    prompt_block_hashes,
)
from preheat.router.frontend.tracing import RequestTrace
from preheat.wire.coalesce import CoalesceConfig
from preheat.wire.convert import PromptTooLong, checked_request
from preheat.wire.errors import error_code
from preheat.wire.priority import WIRE_PRIORITY, engine_priority

log = logging.getLogger("preheat.router")
perf_counter = time.perf_counter
T = TypeVar("T")

RETRYABLE = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.RESOURCE_EXHAUSTED})
"""Worker errors before the first token that send the request to the next-best endpoint."""

UPSTREAM_INTERNAL = "internal error in the worker (the router's log has its detail)"
DRAIN_RETRY_AFTER_S = 1.0  # what a request refused by a draining router is told


UNLIMITED_MODEL_LEN = 1 << 30
DEFAULT_BLOCK_SIZE = 16
COMPLETION_WINDOW_S = 10.0  # the completion rate (retry-after's drain time) is over this
MAX_SEEN_TENANTS = 10_000  # tenants remembered for fair shares before old ones are dropped


@dataclass(frozen=True)
class DispatchConfig:
    region: str = ""  # the router's own region/zone: a client's when it names none
    zone: str = ""
    max_retries: int = 2  # re-routes after failures before the first token
    max_queue: int = 256  # requests that may wait for a routable endpoint; beyond: reject
    queue_timeout_s: float = 10.0  # how long one may wait for a routable endpoint
    # SLO classes (TTFT budget, priority, queue bound) and tenant quotas of the pool
    traffic: Traffic = field(default_factory=Traffic)
    model: str = ""  # the served model when the endpoints do not say; "" = any
    # asked of the worker on every request that does not say (None: no coalescing upstream)
    upstream_coalesce: CoalesceConfig | None = None
    # send the router's token ids instead of the text to a worker whose tokenizer has the
    # router's tokenizer's name (WorkerStatus.tokenizer): the prompt is tokenized once
    forward_token_ids: bool = True
    # metadata/header naming the request's tenant, set by a trusted gateway ("" = none);
    # the tenant salts the prefix block hashes (see router/frontend/auth.py)
    tenant_header: str = ""
    # the default TTFT target and the bound on requests in flight (core.routing.admission)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    # a worker that sends no token this long after the request reached it is given up on
    # (re-routed when nothing was passed on yet); 0: no limit
    first_token_timeout_s: float = 10.0
    # prompts of at least this many characters are tokenized and hashed in a thread pool
    offload_chars: int = 16 * 1024
    tokenizer_threads: int = 2

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.max_queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {self.max_queue}")
        if self.queue_timeout_s < 0:
            raise ValueError(f"queue_timeout_s must be >= 0, got {self.queue_timeout_s}")
        if not self.first_token_timeout_s >= 0:
            raise ValueError(
                f"first_token_timeout_s must be >= 0, got {self.first_token_timeout_s}"
            )
        if self.offload_chars < 0 or self.tokenizer_threads < 1:
            raise ValueError("offload_chars must be >= 0 and tokenizer_threads >= 1")


@dataclass(frozen=True)
class Prepared:
    """A validated request, ready to route."""

    request: inference_pb2.GenerateRequest  # with request_id filled in
    info: RequestInfo
    received: float  # loop time at receipt (deadlines are on the loop's clock)
    # perf_counter() at receipt: latencies are measured on it (uvloop's loop.time() ticks
    # in whole milliseconds, too coarse for the router's own sub-millisecond stages)
    received_pc: float
    tokens: list[int] | None = None  # the router's tokenization of a text prompt
    # the TTFT it is admitted against (its deadline, its SLO class's, or the pool's default)
    target_ms: float | None = None
    klass: TrafficClass | None = None  # its SLO class (None: the pool declares none)
    trace: RequestTrace | None = None  # its spans, when tracing is on

    @property
    def slo_class(self) -> str:
        return self.klass.name if self.klass is not None else ""

    def with_token_ids(self) -> inference_pb2.GenerateRequest:
        """The request with the router's token ids in place of its text."""
        assert self.tokens is not None
        r = inference_pb2.GenerateRequest()
        r.CopyFrom(self.request)
        r.prompt_token_ids.ids.extend(self.tokens)  # replaces the prompt (a oneof)
        return r


DEGRADED_HEADER = "X-Preheat-Degraded"  # HTTP: the ladder's step (StreamStats.degraded_note)


@dataclass
class StreamStats:
    """What the proxy observed of one stream (for logs, metrics and the HTTP front end);
    times are ``time.perf_counter()`` values."""

    endpoint: Endpoint | None = None
    decision: RouteDecision | None = None
    attempts: int = 0
    tokens: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None
    routed_at: float | None = None
    usage: inference_pb2.Usage | None = None
    degraded: str = ""  # the degradation step taken (core.traffic.ladder), "" none
    clamped_from: int = 0  # max_tokens before a clamp-output step (0: not clamped)
    fallback_pool: str = ""  # the pool that served it (the fallback-pool step)
    # the step clock's prediction of its wait for the step in progress on the endpoint it
    # was sent to (ms; None: no clock, or a prefill of ours ahead), checked at its end
    predicted_wait_ms: float | None = None
    # the prompt tokens it gave its endpoint to prefill (not predicted cached there): what
    # it adds to the endpoint's ``in_flight_tokens`` until its first token
    held_tokens: int = 0

    def degraded_note(self) -> str:
        """``STEP[; max_tokens_asked=N][; pool=P]`` ("" when no step was taken): the HTTP
        header ``X-Preheat-Degraded`` and the gRPC trailer ``x-preheat-degraded``."""
        if not self.degraded:
            return ""
        note = self.degraded
        if self.clamped_from:
            note += f"; max_tokens_asked={self.clamped_from}"
        if self.fallback_pool:
            note += f"; pool={self.fallback_pool}"
        return note

    finish_reason: int = 0  # the last chunk's (inference_pb2.FinishReason)


class Dispatcher:
    """One per router: holds the scheduler state; store, scheduler and cost come in."""

    def __init__(
        self,
        store: EndpointStore,
        scheduler_config: SchedulerConfig,
        cost: PrefillCost,
        tokenizer: PromptTokenizer,
        config: DispatchConfig,
        metrics: RouterMetrics,
    ) -> None:
        self.store = store
        self.scheduler_config = scheduler_config
        self.cost = cost
        self.tokenizer = tokenizer
        self.config = config
        self.metrics = metrics
        self._state = SchedulerState()
        self._stubs: dict[int, Any] = {}
        self._waiting = 0
        # the router's wait queue (core.traffic.lanes): who waits, in which class
        self._held: dict[int, lanes.Held] = {}
        self._held_by_class: dict[str, int] = {}
        self._held_seq = 0
        self._turns = lanes.NO_TURNS  # fair queuing over tenants (core.traffic.lanes)
        self._next: tuple[lanes.Held, float] | None = None  # the head and its tag (cached)
        self._next_stale = False  # _held, _retrying or _turns changed since _next was made
        self._retrying: set[int] = set()  # held retries (they wait for another endpoint)
        self._turn = asyncio.Event()  # set (and replaced) whenever a held request leaves
        self._in_flight = 0  # generate() calls admitted and not finished
        self._limit: LimitState = admission.initial_state(config.admission)
        self._completions: collections.deque[float] = collections.deque()
        self._executor: ThreadPoolExecutor | None = None
        self._draining = asyncio.Event()
        self._quotas = Quotas()  # the pool's tenants' buckets on this replica
        self._tenant_held: dict[str, int] = {}  # requests in flight by tenant
        self._tenant_seen: dict[str, float] = {}  # when each tenant last asked (loop time)
        # another pool's dispatcher and model by pool name (the ladder's fallback-pool
        # step); set by the router's pool set, None: no other pools
        self.fallback: Callable[[str], tuple[Dispatcher, str] | None] | None = None
        self.response_cache = ResponseCache(config.traffic.cache)  # off unless enabled
        self.tracing: Tracing | None = None  # set by main when tracing is on
        uc = config.upstream_coalesce
        self._upstream_coalesce = uc.to_pb() if uc is not None and uc.enabled else None

    @property
    def pool(self) -> str:
        return self.store.pool

    @property
    def busy(self) -> int:
        """Requests admitted and not finished, and requests waiting for an endpoint."""
        return self._in_flight + self._waiting

    def reconfigure(self, scheduler_config: SchedulerConfig, config: DispatchConfig) -> None:
        """New settings for the pool (its InferencePool or file changed); the scheduler
        state is kept, the admission state restarts when its settings changed."""
        if config.admission != self.config.admission:
            self._limit = admission.initial_state(config.admission)
        if (config.model, config.traffic.cache) != (self.config.model, self.config.traffic.cache):
            # a new model (or cache settings): no answer of the old one is served again
            self.response_cache = ResponseCache(config.traffic.cache)
        self.scheduler_config = scheduler_config
        self.config = config
        uc = config.upstream_coalesce
        self._upstream_coalesce = uc.to_pb() if uc is not None and uc.enabled else None

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    def begin_drain(self) -> None:
        """The router is stopping: every request not yet routed (new ones, and those waiting
        in the queue) is refused at once with UNAVAILABLE and a retry-after; requests
        already on a worker go on."""
        self._draining.set()

    def _refuse_if_draining(self) -> None:
        if self._draining.is_set():
            raise PreheatError(
                ErrorCode.UNAVAILABLE,
                "the router is shutting down (draining); retry shortly or on another router",
                retry_after_s=DRAIN_RETRY_AFTER_S,
            )

    # --- prepare -------------------------------------------------------------------------
    def pool_limits(self, model: str) -> ModelLimits:
        """The pool's limits from the store when it knows them, else permissive ones (the
        worker validates again with the exact limits)."""
        limits = self.store.model_limits()
        if limits is not None:
            return limits
        return ModelLimits(model=self.config.model or model, max_model_len=UNLIMITED_MODEL_LEN)

    def block_size(self, endpoints: tuple[Endpoint, ...]) -> int:
        return endpoints[0].block_size if endpoints else DEFAULT_BLOCK_SIZE

    def prepare(
        self,
        req: inference_pb2.GenerateRequest,
        *,
        client_region: str = "",
        client_zone: str = "",
        received: float | None = None,
        tenant: str = "",
    ) -> Prepared:
        """Validates ``req`` and works out what routing needs, on the calling thread."""
        received_pc = perf_counter()
        loop = asyncio.get_running_loop()
        received = loop.time() if received is None else received
        req, limits, bs = self._pre(req, tenant)
        return self._build(req, limits, bs, client_region, client_zone, received, received_pc)

    async def prepare_async(
        self,
        req: inference_pb2.GenerateRequest,
        *,
        client_region: str = "",
        client_zone: str = "",
        received: float | None = None,
        tenant: str = "",
    ) -> Prepared:
        """:meth:`prepare`, with a prompt of ``offload_chars`` or more tokenized and hashed in
        the dispatcher's thread pool, so the event loop keeps serving other requests."""
        received_pc = perf_counter()
        loop = asyncio.get_running_loop()
        received = loop.time() if received is None else received
        req, limits, bs = self._pre(req, tenant)
        args = (req, limits, bs, client_region, client_zone, received, received_pc)
        if _prompt_size(req) < self.config.offload_chars:
            return self._build(*args)
        return await loop.run_in_executor(self._pool(), self._build, *args)

    async def offload(self, size: int, fn: Callable[[], T]) -> T:
        """``fn()``, in the thread pool when ``size`` (characters or bytes of input) is at
        least ``offload_chars``, else at once on the calling thread."""
        if size < self.config.offload_chars:
            return fn()
        return await asyncio.get_running_loop().run_in_executor(self._pool(), fn)

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=self.config.tokenizer_threads, thread_name_prefix="preheat-tokenize"
            )
        return self._executor

    def close(self) -> None:
        """Stops the tokenizer threads (a running tokenization finishes first)."""
        ex, self._executor = self._executor, None
        if ex is not None:
            ex.shutdown(wait=False, cancel_futures=True)

    def _pre(
        self, req: inference_pb2.GenerateRequest, tenant: str
    ) -> tuple[inference_pb2.GenerateRequest, ModelLimits, int]:
        """The loop-side part of preparing: bounds, a request id, the tenant's cache salt,
        the pool's limits, its block size."""
        check_request(req)
        if not req.request_id or req.cache_salt != tenant:
            r = inference_pb2.GenerateRequest()
            r.CopyFrom(req)
            r.request_id = req.request_id or uuid.uuid4().hex
            r.cache_salt = tenant  # the router's word on the tenant, never the client's
            req = r
        return req, self.pool_limits(req.model), self.block_size(self._snapshot())

    def _build(
        self,
        req: inference_pb2.GenerateRequest,
        limits: ModelLimits,
        bs: int,
        client_region: str,
        client_zone: str,
        received: float,
        received_pc: float,
    ) -> Prepared:
        """The CPU part of preparing (tokenize, validate, hash): touches nothing shared but
        the tokenizer, so it may run in the thread pool."""
        window = limits.max_model_len

        def tokenize(text: str) -> list[int]:
            try:
                return encode_within(self.tokenizer, text, window)
            except TooManyTokens as e:
                raise PromptTooLong(e.counted) from None

        spec, ids = checked_request(req, limits, tokenize)
        s = req.sampling
        tokens = ids if isinstance(ids, list) else list(ids)
        prompt = spec.prompt
        if self._upstream_coalesce is not None and not req.HasField("coalesce"):
            req.coalesce.CopyFrom(self._upstream_coalesce)
        deadline_ms: float | None = float(req.ttft_deadline_ms) if req.ttft_deadline_ms else None
        traffic = self.config.traffic
        try:
            traffic.check_tenant(req.cache_salt)
            klass = traffic.resolve(req.slo_class, req.cache_salt)
        except UnknownClass as e:
            raise PreheatError(ErrorCode.INVALID_ARGUMENT, str(e)) from None
        slo_ms: float | None = None
        if klass is not None:
            if deadline_ms is None:
                slo_ms = klass.ttft_ms
            req.slo_class = klass.name  # the worker and the logs see the class it got
            if traffic.sets_priority:  # the class's priority, never the client's own
                req.priority = WIRE_PRIORITY.get(klass.priority, inference_pb2.PRIORITY_STANDARD)
        target = admission.ttft_target_ms(deadline_ms, slo_ms, self.config.admission)
        info = RequestInfo(
            request_id=req.request_id,
            prompt_tokens=len(tokens),
            block_hashes=prompt_block_hashes(tokens, bs, req.cache_salt),
            block_size=bs,
            max_tokens=s.max_tokens,
            session_id=req.session_id,
            client_region=client_region or self.config.region,
            client_zone=client_zone or (self.config.zone if not client_region else ""),
            ttft_deadline_ms=target,
            deadline_is_default=deadline_ms is None and slo_ms is None and target is not None,
            priority=engine_priority(req.priority),  # what the engine will run it at
        )
        self.metrics.observe_arrival()  # a valid request for the pool: demand, served or not
        return Prepared(req, info, received, received_pc, tokens if prompt else None, target, klass)

    # --- decide --------------------------------------------------------------------------
    def _snapshot(self) -> tuple[Endpoint, ...]:
        return tuple(self.store.snapshot())

    async def _wait_routable(
        self,
        deadline: float | None,
        exclude: frozenset[str] = frozenset(),
        prep: Prepared | None = None,
    ) -> tuple[Endpoint, ...]:
        """The snapshot (less ``exclude``) once it has an endpoint: waits in the bounded
        queue if needed, e.g. for a standby being promoted after the only endpoint failed.
        Waiting requests leave in :func:`preheat.core.traffic.lanes.serve_order` (class
        priority, then tenants by turns (fair queuing by weight), then earliest deadline),
        each class within its own bound."""
        self._refuse_if_draining()
        endpoints = self._routable(exclude)
        if endpoints and self._head() is None:
            return endpoints
        klass = prep.klass if prep is not None else None
        name = klass.name if klass is not None else ""
        tenant = prep.request.cache_salt if prep is not None else lanes.ANONYMOUS
        bound = (klass.max_queue if klass is not None else 0) or self.config.max_queue
        if self._waiting >= self.config.max_queue or not lanes.may_wait(
            self._held_by_class, name, bound
        ):
            which = f"the router queue of class {name!r}" if name else "the router queue"
            raise PreheatError(
                ErrorCode.RESOURCE_EXHAUSTED,
                f"no routable endpoint and {which} is full ({self._waiting} requests "
                "waiting); retry later",
                retry_after_s=1.0,
            )
        loop = asyncio.get_running_loop()
        limit = loop.time() + self.config.queue_timeout_s
        if deadline is not None:
            limit = min(limit, deadline)
        waited = max(0.0, limit - loop.time())  # the request's deadline may cut it short
        self._held_seq += 1
        me = lanes.Held(
            key=self._held_seq,
            priority=klass.priority if klass is not None else int(lanes.NO_CLASS_PRIORITY),
            deadline=lanes.deadline_of(prep.received, prep.target_ms)
            if prep is not None
            else math.inf,
            arrival=loop.time(),
            klass=name,
            tenant=tenant,
            weight=self.config.traffic.weight(tenant),
        )
        self._held[me.key] = me
        if exclude:  # a retry waits for an endpoint it has not tried: not in the order
            self._retrying.add(me.key)
        self._next_stale = True
        self._held_by_class[name] = self._held_by_class.get(name, 0) + 1
        self._waiting += 1
        held = self.metrics.queue_depth.labels(*self.metrics.series)
        held.inc()
        try:
            while True:
                if endpoints and exclude:
                    return endpoints
                if endpoints and self._head() == me.key:
                    assert self._next is not None
                    self._turns = lanes.served(self._turns, me, self._next[1])
                    return endpoints
                remaining = limit - loop.time()
                if remaining <= 0:
                    raise PreheatError(
                        ErrorCode.UNAVAILABLE,
                        self._none_routable(waited, exclude),
                        retry_after_s=1.0,
                    )
                await self._wait_changed_or_drain(remaining, self._turn)
                self._refuse_if_draining()  # a drain wakes the queue: refused, not held
                endpoints = self._routable(exclude)
        finally:
            del self._held[me.key]
            self._retrying.discard(me.key)
            self._turns = lanes.settle(self._turns, self._held.values())
            self._next_stale = True
            self._held_by_class[name] -= 1
            self._waiting -= 1
            held.dec()
            turn, self._turn = self._turn, asyncio.Event()
            turn.set()  # the next one in order may go

    def _head(self) -> int | None:
        """The key of the held request served next (None: none waits in the order); worked
        out once per change of the queue, not once per waiter woken."""
        if self._next_stale:
            waiting = [h for k, h in self._held.items() if k not in self._retrying]
            self._next = lanes.head(waiting, self._turns)
            self._next_stale = False
        return self._next[0].key if self._next is not None else None

    async def _wait_changed_or_drain(
        self, timeout_s: float, turn: asyncio.Event | None = None
    ) -> None:
        changed = asyncio.ensure_future(self.store.wait_changed(timeout_s))
        drain = asyncio.ensure_future(self._draining.wait())
        waits = {changed, drain}
        if turn is not None:
            waits.add(asyncio.ensure_future(turn.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    def _routable(self, exclude: frozenset[str]) -> tuple[Endpoint, ...]:
        endpoints = self._snapshot()
        if exclude:
            endpoints = tuple(e for e in endpoints if e.id not in exclude)
        return endpoints

    def _none_routable(self, waited: float, exclude: frozenset[str]) -> str:
        if exclude:
            return (
                f"no endpoint left to try: {', '.join(sorted(exclude))} failed before "
                f"anything was sent, and no other became routable within {waited:.3g}s"
            )
        known = ", ".join(
            f"{v.id}({v.lifecycle}, healthy={v.healthy}"
            + (f", error={v.last_error}" if v.last_error else "")
            + ")"
            for v in self.store.all_endpoints()
        )
        return (
            f"no routable endpoint within {waited:.3g}s: pool {self.pool!r}: 0 endpoints "
            f"routable; known: {known or 'none'}"
        )

    def _now(self) -> float:
        """The store's clock (its ``metrics_at`` are on it), else the loop's."""
        clock = getattr(self.store, "clock", None)
        return float(clock()) if callable(clock) else asyncio.get_running_loop().time()

    def _history_match(self, info: RequestInfo, now: float) -> Mapping[str, int]:
        history = getattr(self.store, "history", None)
        if history is None or not info.block_hashes:
            return {}
        result: Mapping[str, int] = history.match(info.block_hashes, now)
        return result

    def _history_record(self, endpoint_id: str, info: RequestInfo, now: float) -> None:
        history = getattr(self.store, "history", None)
        if history is not None and info.block_hashes:
            history.record(endpoint_id, info.block_hashes, now)

    async def decide(
        self,
        prep: Prepared,
        *,
        exclude: frozenset[str] = frozenset(),
        deadline: float | None = None,
        record: bool = True,
        stats: StreamStats | None = None,
    ) -> RouteDecision:
        """The scheduler's decision (never a rejection: that raises RESOURCE_EXHAUSTED).
        With ``stats`` (a request being served, not a Pick), a request its class's target
        would refuse takes its class's degradation ladder (``core.traffic.ladder``)."""
        tr = prep.trace
        t0 = perf_counter() if tr is not None else 0.0
        endpoints = await self._wait_routable(deadline, exclude, prep)
        t1 = perf_counter() if tr is not None else 0.0
        now = self._now()
        ctx = self._context(prep, endpoints, now)
        decision, self._state = schedule(ctx, self.scheduler_config, self.cost, self._state)
        if stats is not None:
            stats.predicted_wait_ms = _predicted_wait(ctx, decision)
        self.metrics.decisions.labels(*self.metrics.series, decision.reason).inc()
        if (
            decision.endpoint is None
            and decision.reason == "rejected"
            and stats is not None
            and (stats.degraded or self._degrade(prep, stats, decision.explanation) != REJECT)
        ):
            # served despite the prediction: the best endpoint, without the target
            relaxed = dataclasses.replace(ctx, request=replace_target(prep.info))
            decision, self._state = schedule(relaxed, self.scheduler_config, self.cost, self._state)
        if tr is not None:
            tr.scheduled(decision, t0, t1, perf_counter())
        if decision.endpoint is None and decision.reason == "no-endpoints":
            raise PreheatError(
                ErrorCode.UNAVAILABLE,
                decision.explanation,
                retry_after_s=decision.retry_after_s if decision.retry_after_s else 1.0,
            )
        if decision.endpoint is None:
            raise PreheatError(
                ErrorCode.RESOURCE_EXHAUSTED,
                f"rejected: {decision.explanation}",
                retry_after_s=decision.retry_after_s if decision.retry_after_s else 1.0,
            )
        if record:
            self._history_record(decision.endpoint.id, prep.info, now)
        return decision

    def _context(
        self, prep: Prepared, endpoints: tuple[Endpoint, ...], now: float
    ) -> RoutingContext:
        """What the scheduler decides ``prep`` over: these endpoints at ``now``."""
        return RoutingContext(
            now=now,
            request=prep.info,
            endpoints=endpoints,
            history_matches=self._history_match(prep.info, now),
            region_rtt_ms=self.store.region_rtt_ms(),
            step_clocks=self.store.step_clocks(),
        )

    # --- proxy ---------------------------------------------------------------------------
    def _stub(self, endpoint: Endpoint) -> Any:
        channel = self.store.channel(endpoint.id)
        stub = self._stubs.get(id(channel))
        if stub is None or stub[0] is not channel:
            stub = (channel, inference_pb2_grpc.InferenceStub(channel))
            self._stubs[id(channel)] = stub
        return stub[1]

    def _would_miss(self, prep: Prepared) -> bool:
        """Whether the pool would refuse ``prep`` now: at its bound on requests in flight,
        no routable endpoint, or every endpoint predicted past the request's target (a
        look at the scheduler's answer; its state is not kept)."""
        endpoints = self._snapshot()
        if not endpoints or self._in_flight >= self.in_flight_limit:
            return True
        now = self._now()
        ctx = self._context(prep, endpoints, now)
        decision, _ = schedule(ctx, self.scheduler_config, self.cost, self._state)
        return decision.endpoint is None

    def _fallback_for(self, prep: Prepared) -> tuple[Dispatcher, Prepared] | None:
        """The fallback pool's dispatcher and the request prepared for it, when the class
        names one, this pool would miss the class's target and that pool would not."""
        k = prep.klass
        if k is None or not k.fallback_pool or self.fallback is None:
            return None
        if not self._would_miss(prep):
            return None
        found = self.fallback(k.fallback_pool)
        if found is None:
            log.warning(
                "fallback_pool_unknown",
                extra=fields(slo_class=k.name, fallback_pool=k.fallback_pool),
            )
            return None
        fb, model = found
        req = inference_pb2.GenerateRequest()
        req.CopyFrom(prep.request)
        req.model = model
        req.slo_class = ""  # that pool's classes are its own: the target goes as a deadline
        if not req.ttft_deadline_ms and prep.target_ms:
            req.ttft_deadline_ms = max(1, round(prep.target_ms))
        if req.WhichOneof("input") == "prompt_token_ids" and prep.request.prompt:
            req.prompt = prep.request.prompt
        try:
            fb_prep = fb.prepare(req, received=prep.received, tenant=prep.request.cache_salt)
        except PreheatError as e:
            log.info("fallback_refused", extra=fields(fallback_pool=fb.pool, reason=e.message))
            return None
        if fb._would_miss(fb_prep):
            return None
        return fb, fb_prep

    def _note_fallback(
        self, prep: Prepared, st: StreamStats, pool: str, fb_prep: Prepared
    ) -> Prepared:
        """Counts and logs the ladder's fallback step; ``fb_prep`` carrying the request's
        trace, so the fallback pool's spans follow in it and that pool ends its root."""
        tr = prep.trace
        if tr is not None:
            tr.fallback(pool, fb_prep.request.model, perf_counter())
            fb_prep = dataclasses.replace(fb_prep, trace=tr)
        st.degraded = ladder.FALLBACK
        st.fallback_pool = pool
        m = self.metrics
        m.degraded.labels(*m.series, prep.slo_class, ladder.FALLBACK).inc()
        log.info(
            "request_degraded",
            extra=fields(
                request_id=prep.info.request_id,
                slo_class=prep.slo_class,
                step=ladder.FALLBACK,
                fallback_pool=pool,
            ),
        )
        return fb_prep

    def _degrade(self, prep: Prepared, st: StreamStats, why: str) -> str:
        """The class's ladder step for a request the pool would refuse (``why``): a clamp
        caps its ``max_tokens`` (in ``prep.request``); counted and logged."""
        step = ladder.step_for(prep.klass)
        if prep.klass is None:
            return step
        if step == CLAMP:
            n = prep.request.sampling.max_tokens
            capped = ladder.clamp(n, prep.klass)
            if capped < n:
                prep.request.sampling.max_tokens = capped
                st.clamped_from = n
        if step != REJECT:
            st.degraded = step
        m = self.metrics
        m.degraded.labels(*m.series, prep.slo_class, step).inc()
        log.info(
            "request_degraded",
            extra=fields(
                request_id=prep.info.request_id,
                slo_class=prep.slo_class,
                step=step,
                max_tokens=prep.request.sampling.max_tokens,
                clamped_from=st.clamped_from or None,
                why=why,
            ),
        )
        return step

    def _fair_share(self, prep: Prepared) -> None:
        """RESOURCE_EXHAUSTED when the request's tenant holds its fair share of the pool's
        bound while the pool is busy (only for a pool that lists tenants)."""
        tenant = prep.request.cache_salt
        if not self.config.traffic.tenants or not tenant:
            return
        now = asyncio.get_running_loop().time()
        seen = self._tenant_seen
        if len(seen) > MAX_SEEN_TENANTS:
            for t in [t for t, at in seen.items() if now - at > fairness.ACTIVE_WINDOW_S]:
                del seen[t]
        limit = self.in_flight_limit
        traffic = self.config.traffic
        verdict = fairness.admit(tenant, self._tenant_held, seen, limit, now, weight=traffic.weight)
        seen[tenant] = now
        if verdict.admitted:
            return
        self.metrics.decisions.labels(*self.metrics.series, "fair-share").inc()
        raise PreheatError(
            ErrorCode.RESOURCE_EXHAUSTED,
            f"rejected: tenant {tenant!r} holds {verdict.held} of the pool's {limit} requests "
            f"in flight, its fair share ({verdict.share:.3g}) while the pool is busy; retry "
            "shortly",
            retry_after_s=1.0,
        )

    def admission_refused(self, api: str, prep: Prepared, e: PreheatError) -> None:
        """Counts and traces a request that its tenant's quota, the pool's bound or its
        class's ladder refused (the caller raises ``e`` on); the gRPC, HTTP and passthrough
        fronts share it."""
        outcome = RouterOutcome.of_error(e.code)
        self.metrics.observe_outcome(api, outcome, slo_class=prep.slo_class)
        tr = prep.trace
        if tr is not None:
            now = perf_counter()
            tr.admission(False, prep.slo_class, prep.request.cache_salt, e.message, now)
            tr.end(outcome.value, now, error=e.message)

    def _admit(self, prep: Prepared | None = None, st: StreamStats | None = None) -> None:
        """Raises RESOURCE_EXHAUSTED when the pool is at its bound on requests in flight
        (unless the request's class's ladder serves it anyway: ``st.degraded``), or when
        its tenant holds its fair share of a busy pool (``core.traffic.fairness``)."""
        if prep is not None:
            self._fair_share(prep)
        now = self._now()
        cutoff = now - COMPLETION_WINDOW_S
        done = self._completions
        while done and done[0] < cutoff:
            done.popleft()
        span = min(COMPLETION_WINDOW_S, now - done[0]) if len(done) >= 2 else 0.0
        rate = (len(done) - 1) / span if span > 0 else 0.0
        verdict = admission.admit(
            AdmissionInput(
                now=now,
                in_flight=self._in_flight,
                endpoints=self._snapshot(),
                completions_per_s=rate,
                pool=self.pool,
            ),
            self._limit,
            self.config.admission,
        )
        if not verdict.admitted:
            self.metrics.decisions.labels(*self.metrics.series, "over-limit").inc()
            if (
                prep is not None
                and st is not None
                and self._degrade(prep, st, verdict.explanation) != REJECT
            ):
                return
            raise PreheatError(
                ErrorCode.RESOURCE_EXHAUSTED,
                f"rejected: {verdict.explanation}",
                retry_after_s=verdict.retry_after_s,
            )

    @property
    def in_flight_limit(self) -> int:
        """The pool's bound on requests in flight right now."""
        return admission.pool_limit(self._limit, self._snapshot(), self.config.admission)

    async def generate(
        self,
        prep: Prepared,
        *,
        api: str,
        timeout_s: float | None = None,
        stats: StreamStats | None = None,
        buffered: bool = False,
    ) -> AsyncGenerator[inference_pb2.GenerateResponse, None]:
        """Admits, routes and proxies one prepared request; raises ``PreheatError`` on
        failure. ``buffered``: the caller passes nothing on before the stream ends (a
        non-streaming response), so chunks are held until the worker finished and a failure
        at any point is retried like one before the first token."""
        loop = asyncio.get_running_loop()
        st = stats if stats is not None else StreamStats()
        deadline = prep.received + timeout_s if timeout_s is not None else None
        tried: set[str] = set()
        outcome = RouterOutcome.ERROR
        as_ids: inference_pb2.GenerateRequest | None = None
        sent = False  # a chunk was passed on: no retry from then on
        attempt_first: float | None = None  # the current attempt's first token
        grant: Grant | None = None
        tr = prep.trace
        error = ""
        fallback: tuple[Dispatcher, Prepared] | None = None
        try:
            grant = self.charge(prep, api)
            fallback = self._fallback_for(prep)
            if fallback is None:
                self._admit(prep, st)
        except RateLimited:
            raise  # counted, logged and traced by charge()
        except PreheatError as e:
            self.admission_refused(api, prep, e)
            raise
        admission_passed(prep)
        if fallback is not None:  # the ladder's first step: another pool serves it
            fb, fb_prep = fallback
            fb_prep = self._note_fallback(prep, st, fb.pool, fb_prep)
            try:
                inner = fb.generate(
                    fb_prep, api=api, timeout_s=timeout_s, stats=st, buffered=buffered
                )
                async with contextlib.aclosing(inner):
                    async for fb_chunk in inner:
                        yield fb_chunk
            finally:
                self.settle(grant, prep, st.tokens)
            return
        self.hold(prep)
        gauge = self.metrics.in_flight.labels(*self.metrics.series)  # the one it leaves
        gauge.inc()
        try:
            while True:
                decision = await self.decide(
                    prep, exclude=frozenset(tried), deadline=deadline, stats=st
                )
                ep = decision.endpoint
                assert ep is not None
                st.endpoint, st.decision = ep, decision
                st.attempts += 1
                st.routed_at = perf_counter()
                attempt_first = None
                self.metrics.overhead.observe(st.routed_at - prep.received_pc)
                self._log_routed(prep, decision, st.attempts)
                st.held_tokens = new_tokens(prep.info, decision.cached_blocks)
                self.store.request_started(ep.id, prep.info.priority, st.held_tokens)
                remaining = None if deadline is None else max(0.001, deadline - loop.time())
                upstream = prep.request
                if self._send_ids(prep, ep):
                    as_ids = as_ids if as_ids is not None else prep.with_token_ids()
                    upstream = as_ids
                md = None if tr is None else tr.upstream(ep.id, ep.address, st.routed_at)
                call = self._stub(ep).Generate(upstream, timeout=remaining, metadata=md)
                chunks: AsyncIterator[inference_pb2.GenerateResponse] = call.__aiter__()
                itl_hist = self.metrics.itl.labels(*self.metrics.series, decision.reason)
                held: list[inference_pb2.GenerateResponse] = []
                ended = False  # the last chunk had a finish_reason
                ft_limit = self.config.first_token_timeout_s
                try:
                    while True:
                        if attempt_first is None and ft_limit > 0:
                            left = ft_limit - (perf_counter() - st.routed_at)
                            chunk = await _read_within(chunks, left, ep.id, ft_limit)
                        else:
                            chunk = await anext(chunks, None)
                        if chunk is None:
                            if not ended:  # a silent truncation: said, never passed on as done
                                raise PreheatError(
                                    ErrorCode.UNAVAILABLE,
                                    f"worker {ep.id} ended the stream after {st.tokens} tokens "
                                    "without finishing it; the output is incomplete",
                                )
                            break
                        ended = chunk.finish_reason != inference_pb2.FINISH_REASON_UNSPECIFIED
                        if ended:
                            st.finish_reason = chunk.finish_reason
                            if chunk.HasField("timing"):  # the router's stage, for the client
                                chunk.timing.router_ms = (st.routed_at - prep.received_pc) * 1e3
                                self._check_clock(ep.id, st, attempt_first, chunk.timing)
                        n = len(chunk.token_ids)
                        first: float | None = None
                        if n or chunk.text:
                            now = perf_counter()
                            itl: float | None = None
                            if attempt_first is None:
                                attempt_first = st.first_token_at = first = now
                            elif n and st.last_token_at is not None:
                                itl = (now - st.last_token_at) / n
                                for _ in range(n):
                                    itl_hist.observe(itl)
                            st.last_token_at = now
                            st.tokens += n
                            # the engine's step boundaries, for the queue term's step clock
                            self.store.token(ep.id, None if itl is None else itl * 1e3)
                        if chunk.HasField("usage"):
                            st.usage = chunk.usage
                        if buffered:
                            held.append(chunk)
                            if first is not None:
                                self._on_first_token(prep, st, ep, decision, first)
                            continue
                        if first is None:
                            sent = True
                            yield chunk
                            continue
                        try:
                            sent = True
                            yield chunk  # the first token goes out before its bookkeeping
                        finally:
                            self._on_first_token(prep, st, ep, decision, first)
                    outcome = RouterOutcome.OK
                    self._on_done(prep, st, ep, decision)
                    for chunk in held:
                        sent = True
                        yield chunk
                    return
                except (grpc.aio.AioRpcError, _NoFirstToken) as e:
                    if isinstance(e, _NoFirstToken):
                        code, detail = ErrorCode.UNAVAILABLE, str(e)
                    else:
                        code, detail = error_code(e.code()), e.details() or e.code().name
                    if code is ErrorCode.INTERNAL:  # a worker's bug: its text stays in the log
                        log.warning(
                            "upstream_internal_error", extra=fields(worker=ep.id, detail=detail)
                        )
                        detail = UPSTREAM_INTERNAL
                    if sent:
                        raise PreheatError(
                            ErrorCode.UNAVAILABLE,
                            f"worker {ep.id} failed after {st.tokens} tokens ({code.value}: "
                            f"{detail}); not retried to avoid duplicate text",
                        ) from None
                    if attempt_first is None:
                        if code in RETRYABLE or code is ErrorCode.INTERNAL:
                            self.store.request_failed(ep.id, prep.info.priority, st.held_tokens)
                        else:
                            self.store.request_finished(ep.id, prep.info.priority, st.held_tokens)
                    retry = (
                        code in RETRYABLE
                        and st.attempts <= self.config.max_retries
                        and (deadline is None or loop.time() < deadline)
                    )
                    log.info(
                        "upstream_failed",
                        extra=fields(
                            worker=ep.id,
                            code=code.value,
                            detail=detail,
                            retrying=retry,
                            tokens_discarded=st.tokens,
                        ),
                    )
                    if tr is not None:
                        tr.attempt_failed(code.value, detail, retry, perf_counter())
                    if retry:
                        tried.add(ep.id)
                        st.tokens, st.usage = 0, None
                        st.first_token_at = st.last_token_at = None
                        self.metrics.retries.labels(*self.metrics.series).inc()
                        continue
                    if isinstance(e, _NoFirstToken):
                        raise PreheatError(
                            ErrorCode.DEADLINE_EXCEEDED,
                            f"{detail}; no other endpoint to try",
                            retry_after_s=1.0,
                        ) from None
                    raise PreheatError(
                        code,
                        _upstream_message(ep.id, code, detail),
                        reason=reason_of(code, detail),
                    ) from None
                finally:
                    if not call.done():
                        call.cancel()
                    if attempt_first is not None:  # it decoded there until now
                        self.store.request_done(ep.id)
        except PreheatError as e:
            outcome = RouterOutcome.of_error(e.code)
            if e.code is ErrorCode.UNAVAILABLE and sent:
                outcome = RouterOutcome.FAILED
            error = e.message
            raise
        except (asyncio.CancelledError, GeneratorExit):
            outcome = RouterOutcome.CANCELLED
            if st.endpoint is not None and attempt_first is None:
                self.store.request_finished(st.endpoint.id, prep.info.priority, st.held_tokens)
            raise
        finally:
            self.settle(grant, prep, st.tokens)
            self.release(prep)
            gauge.dec()
            self.metrics.observe_outcome(api, outcome, slo_class=prep.slo_class)
            if tr is not None:
                tr.end(
                    outcome.value,
                    perf_counter(),
                    tokens=st.tokens,
                    usage=st.usage,
                    finish_reason=st.finish_reason,
                    error=error,
                )

    def charge(self, prep: Prepared, api: str) -> Grant | None:
        """Charges the request to its tenant's quota (prompt + max output tokens; give the
        unused back with :meth:`settle`). Over it: the refusal is counted (metric, outcome),
        logged and traced, and ``RateLimited`` raised (429 / RESOURCE_EXHAUSTED with the
        bucket's retry-after). The gRPC and HTTP front and the OpenAI passthrough all
        charge here."""
        traffic = self.config.traffic
        if not traffic.tenants:
            return None
        tokens = prep.info.prompt_tokens + prep.info.max_tokens
        now = asyncio.get_running_loop().time()
        try:
            return self._quotas.take(traffic, prep.request.cache_salt, tokens, now)
        except RateLimited as e:
            m = self.metrics
            m.rate_limited.labels(*m.series, _quota_entry(traffic, prep), e.limit).inc()
            m.observe_outcome(api, RouterOutcome.RATE_LIMITED, slo_class=prep.slo_class)
            log.info(
                "rate_limited",
                extra=fields(
                    request_id=prep.info.request_id,
                    tenant=prep.request.cache_salt,
                    slo_class=prep.slo_class,
                    limit=e.limit,
                    retry_after_s=_r(e.retry_after_s),
                ),
            )
            tr = prep.trace
            if tr is not None:
                t = perf_counter()
                tr.admission(False, prep.slo_class, prep.request.cache_salt, e.message, t)
                tr.end(RouterOutcome.RATE_LIMITED.value, t, error=e.message)
            raise

    def hold(self, prep: Prepared) -> None:
        """An admitted request is in flight: the pool's count and its tenant's (fair
        shares). Every path that proxies calls :meth:`release` when it ends."""
        self._in_flight += 1
        tenant = prep.request.cache_salt
        self._tenant_held[tenant] = self._tenant_held.get(tenant, 0) + 1

    def release(self, prep: Prepared) -> None:
        """The request left (whatever its outcome): counts back, and one more completion
        for the completion rate (retry-after's drain time)."""
        self._in_flight -= 1
        tenant = prep.request.cache_salt
        left = self._tenant_held.get(tenant, 1) - 1
        if left > 0:
            self._tenant_held[tenant] = left
        else:
            self._tenant_held.pop(tenant, None)
        self._completions.append(self._now())

    def settle(self, grant: Grant | None, prep: Prepared, output_tokens: int) -> None:
        """Gives a charged request's unused tokens back: it used its prompt and
        ``output_tokens`` of the ``max_tokens`` it was charged for."""
        if grant is not None:
            used = prep.info.prompt_tokens + output_tokens
            self._quotas.settle(self.config.traffic, grant, used, asyncio.get_running_loop().time())

    def _send_ids(self, prep: Prepared, ep: Endpoint) -> bool:
        return (
            self.config.forward_token_ids
            and prep.tokens is not None
            and bool(ep.tokenizer)
            and ep.tokenizer == self.tokenizer.name
        )

    def _check_clock(
        self,
        endpoint_id: str,
        st: StreamStats,
        first: float | None,
        timing: inference_pb2.Timing,
    ) -> None:
        """Feeds the endpoint's step clock from the worker's timing on the last chunk: the
        trip there and back (this router's TTFT less the worker's) and how far the clock's
        prediction of the wait for the step in progress missed the worker's queue time."""
        if first is None or st.routed_at is None or not timing.ttft_ms > 0:
            return
        self.store.upstream_lag(endpoint_id, (first - st.routed_at) * 1e3 - timing.ttft_ms)
        if st.predicted_wait_ms is not None:
            self.store.step_error(endpoint_id, timing.queue_ms - st.predicted_wait_ms)

    def _on_first_token(
        self, prep: Prepared, st: StreamStats, ep: Endpoint, decision: RouteDecision, now: float
    ) -> None:
        ttft_s = now - prep.received_pc
        upstream_s = now - (st.routed_at if st.routed_at is not None else prep.received_pc)
        # the worker's own TTFT comes only with the last chunk: 0 = unknown here
        self.store.first_token(ep.id, upstream_s, 0.0, prep.info.priority, st.held_tokens)
        # the prediction it was sent on against the TTFT it got (core/routing/calibration.py)
        self.store.prediction_miss(
            ep.id,
            decision.predicted_ttft_ms,
            upstream_s * 1e3,
            self.scheduler_config.ttft_error_half_life_s,
        )
        target = self.config.admission.default_ttft_target_ms
        if target > 0:
            self._limit = admission.observe_ttft(
                self._limit,
                ttft_s * 1e3,
                target,
                self._in_flight,
                self._snapshot(),
                self.config.admission,
                arrived_at=prep.received_pc,
                now=now,
            )
        m = self.metrics
        tr = prep.trace
        exemplar = None
        if tr is not None:
            tr.first_token(now)
            exemplar = tr.exemplar
        m.ttft.labels(*m.series, decision.reason).observe(ttft_s, exemplar)
        m.class_ttft.labels(*m.series, prep.slo_class).observe(ttft_s)
        pred_s = decision.predicted_ttft_ms / 1e3
        m.predicted_ttft.labels(*m.series).observe(pred_s)
        m.ttft_error.labels(*m.series).observe(abs(ttft_s - pred_s))
        if pred_s > 0:
            m.ttft_ratio.labels(*m.series).observe(ttft_s / pred_s)

    def _on_done(
        self, prep: Prepared, st: StreamStats, ep: Endpoint, decision: RouteDecision
    ) -> None:
        now = perf_counter()
        m = self.metrics
        exemplar = prep.trace.exemplar if prep.trace is not None else None
        m.e2e.labels(*m.series, decision.reason).observe(now - prep.received_pc, exemplar)
        actual_blocks: int | None = None
        if st.usage is not None and prep.info.block_size > 0:
            actual_blocks = st.usage.cached_tokens // prep.info.block_size
            m.predicted_cached.labels(*m.series).inc(decision.cached_blocks)
            m.actual_cached.labels(*m.series).inc(actual_blocks)
        ttft_ms = (
            None if st.first_token_at is None else (st.first_token_at - prep.received_pc) * 1e3
        )
        log.info(
            "request_done",
            extra=fields(
                request_id=prep.info.request_id,
                worker=ep.id,
                reason=decision.reason,
                slo_class=prep.slo_class,
                session=pseudonym(prep.info.session_id),
                attempts=st.attempts,
                predicted_ttft_ms=_r(decision.predicted_ttft_ms),
                observed_ttft_ms=_r(ttft_ms),
                router_ms=_r(
                    None if st.routed_at is None else (st.routed_at - prep.received_pc) * 1e3
                ),
                e2e_ms=_r((now - prep.received_pc) * 1e3),
                tokens=st.tokens,
                predicted_cached_blocks=decision.cached_blocks,
                actual_cached_blocks=actual_blocks,
            ),
        )

    def _log_routed(self, prep: Prepared, decision: RouteDecision, attempt: int) -> None:
        # DEBUG on the first attempt (request_done carries the decision once the request
        # ends; one line per request keeps logging off the TTFT path), INFO on a retry
        level = logging.INFO if attempt > 1 else logging.DEBUG
        if not log.isEnabledFor(level):
            return
        ep = decision.endpoint
        log.log(
            level,
            "request_routed",
            extra=fields(
                request_id=prep.info.request_id,
                worker=ep.id if ep is not None else None,
                reason=decision.reason,
                slo_class=prep.slo_class,
                predicted_ttft_ms=_r(decision.predicted_ttft_ms),
                cached_blocks=decision.cached_blocks,
                session=pseudonym(prep.info.session_id),
                attempt=attempt,
                explanation=decision.explanation,
            ),
        )


class _NoFirstToken(Exception):
    """The worker sent no token within the first-token timeout (a frozen worker)."""


async def _read_within(
    chunks: AsyncIterator[inference_pb2.GenerateResponse],
    left_s: float,
    worker: str,
    limit_s: float,
) -> inference_pb2.GenerateResponse | None:
    """The next chunk (None at the end), or ``_NoFirstToken`` after ``left_s``."""
    try:
        async with asyncio.timeout(max(0.0, left_s)) as cm:
            return await anext(chunks, None)
    except TimeoutError:
        if cm.expired():
            raise _NoFirstToken(
                f"worker {worker} sent no token within {limit_s:g}s (first-token timeout)"
            ) from None
        raise


def admission_passed(prep: Prepared) -> None:
    """Traces a request its quota, the pool's bound and its class's ladder let in."""
    if prep.trace is not None:
        prep.trace.admission(True, prep.slo_class, prep.request.cache_salt, "", perf_counter())


def replace_target(info: RequestInfo) -> RequestInfo:
    """``info`` without a TTFT target: the scheduler then picks the best endpoint."""
    return dataclasses.replace(info, ttft_deadline_ms=None)


def _quota_entry(traffic: Traffic, prep: Prepared) -> str:
    """The tenants-table entry a request was charged to (a bounded label value)."""
    q = traffic.quota(prep.request.cache_salt)
    return q.name if q is not None else ""


def _prompt_size(req: inference_pb2.GenerateRequest) -> int:
    """Characters (or token ids) of the request's prompt: what tokenizing it costs."""
    if req.WhichOneof("input") == "prompt_token_ids":
        return len(req.prompt_token_ids.ids)
    return len(req.prompt)


def _r(v: float | None) -> float | None:
    return None if v is None or math.isnan(v) else round(v, 3)


def _upstream_message(worker: str, code: ErrorCode, detail: str) -> str:
    if code in RETRYABLE:
        return f"worker {worker} could not take the request ({detail}); no other endpoint to try"
    return detail


def _predicted_wait(ctx: RoutingContext, decision: RouteDecision) -> float | None:
    """What the chosen endpoint's step clock predicts the request waits for the step in
    progress (trusted or not: checking it is how it earns trust); None where the queue term
    does not price that wait (no clock, nothing decoding, a prefill of ours ahead)."""
    e = decision.endpoint
    if e is None or e.decoding <= 0 or requests_ahead(e, ctx.request.priority) > 0:
        return None
    clock = ctx.step_clocks.get(e.id)
    return None if clock is None else phase_residual_ms(clock, ctx.now, untrusted=True)
