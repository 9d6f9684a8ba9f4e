"""``WorkerServer``: one engine behind gRPC (Inference, WorkerControl, health) and HTTP.

Ports: the data port serves Inference, health and the read-only WorkerControl RPCs
(Status, WatchCache); the control port, opened only with ``config.control_token``, serves
WorkerControl's state changes (Promote, Demote, Drain) to callers with that token
(:mod:`preheat.worker.services`, worker/README.md "Ports"). Given an app factory
(``openai=``, the vllm engine's), it also serves the engine's OpenAI HTTP API on
``config.openai_port`` (:mod:`preheat.worker.openai_http`): bound at start, serving once
the engine is loaded, its requests admitted, drained and counted like ``Generate``'s.

In-process use (tests, benchmarks)::

    server = WorkerServer(engine, WorkerConfig(worker_id="w-1"))
    ports = await server.start()          # binds 127.0.0.1, port 0 -> ephemeral
    await server.wait_warm()              # loading -> warming -> active (or standby)
    ...                                   # grpc at ports.grpc, /metrics at ports.http
    await server.stop()                   # drain (grace), stop gRPC, shut the engine down

Lifecycle (``preheat.core.lifecycle``): ``start()`` binds both ports at once (so probes
answer while loading) and runs ``engine.load()`` then ``engine.warm_up()`` in the
background, ending in ``config.start_as``. Only an ``active`` worker takes Generate
requests; any other state answers UNAVAILABLE naming the state, so a router retries
elsewhere. :meth:`drain` refuses new work, lets in-flight streams finish within
``drain_grace_s``, aborts what is left (finish_reason ABORT) and ends in ``stopped``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.lifecycle import WARM_STATES, LifecycleState, transition_error
from preheat.core.validation import ModelLimits
from preheat.engine.base import (
    Engine,
    EngineOutput,
    EngineRequest,
    FinishReason,
    Logprob,
    Sampling,
    StageTiming,
    TokenLogprobs,
    Usage,
)
from preheat.process.logs import fields, request_context
from preheat.process.tracing import Tracing
from preheat.proto.preheat.v1 import (
    inference_pb2,
    inference_pb2_grpc,
    worker_pb2,
    worker_pb2_grpc,
)
from preheat.wire.coalesce import CoalesceConfig, coalesce
from preheat.wire.controltls import TLSFiles, server_credentials
from preheat.wire.convert import checked_request
from preheat.wire.errors import abort
from preheat.wire.priority import engine_priority
from preheat.worker import tracing
from preheat.worker.cache_hub import CacheHub
from preheat.worker.metrics import WorkerMetrics, WorkerOutcome
from preheat.worker.openai_http import AppFactory, OpenAIHttp
from preheat.worker.sessions import DEFAULT_WINDOW_S, SessionLedger
from preheat.worker.stops import StopMatcher

log = logging.getLogger(__name__)

INFERENCE_SERVICE = "preheat.v1.Inference"
CONTROL_SERVICE = "preheat.v1.WorkerControl"
HEALTH_SERVICES = ("", INFERENCE_SERVICE)
"""Health services that are SERVING only while the worker is warm and not draining."""

ABORT_WAIT_S = 5.0
"""After the drain grace, how long aborted streams get to send their ABORT chunk."""

_STATE_PB = {
    LifecycleState.LOADING: worker_pb2.LIFECYCLE_STATE_LOADING,
    LifecycleState.WARMING: worker_pb2.LIFECYCLE_STATE_WARMING,
    LifecycleState.STANDBY: worker_pb2.LIFECYCLE_STATE_STANDBY,
    LifecycleState.ACTIVE: worker_pb2.LIFECYCLE_STATE_ACTIVE,
    LifecycleState.DRAINING: worker_pb2.LIFECYCLE_STATE_DRAINING,
    LifecycleState.STOPPED: worker_pb2.LIFECYCLE_STATE_STOPPED,
}
_FINISH_PB = {
    FinishReason.STOP: inference_pb2.FINISH_REASON_STOP,
    FinishReason.LENGTH: inference_pb2.FINISH_REASON_LENGTH,
    FinishReason.ABORT: inference_pb2.FINISH_REASON_ABORT,
}
_OUTCOME = {
    ErrorCode.INVALID_ARGUMENT: WorkerOutcome.INVALID,
    ErrorCode.RESOURCE_EXHAUSTED: WorkerOutcome.REJECTED,
    ErrorCode.UNAVAILABLE: WorkerOutcome.UNAVAILABLE,
    ErrorCode.DEADLINE_EXCEEDED: WorkerOutcome.DEADLINE,
    ErrorCode.CANCELLED: WorkerOutcome.CANCELLED,
}

#: a call cancelled with at most this much of its deadline left ended by the deadline: the
#: client cancels when its deadline passes, and the server's copy of it runs later by the
#: request's trip (gRPC sends the time left), so on a loaded machine the client's cancel
#: arrives with a little of the server's deadline left and was counted ``cancelled``
DEADLINE_SLACK_S = 0.5


@dataclass(frozen=True)
class WorkerConfig:
    worker_id: str
    host: str = "127.0.0.1"
    grpc_port: int = 0  # 0: an ephemeral port (see WorkerServer.start's return value)
    http_port: int = 0
    # WorkerControl's state changes (Promote, Demote, Drain) are served only on the control
    # port, and only to callers with ``authorization: Bearer <control_token>``. Without a
    # token the control port is not opened (the worker stays in ``start_as`` until SIGTERM).
    control_token: str = field(default="", repr=False)
    control_host: str = ""  # "": the same address as ``host``
    control_port: int = 0  # 0: an ephemeral port
    # When set, WatchCache on the data port needs ``authorization: Bearer <cache_token>``
    # (it lists the hashes of cached prompt blocks); the control token is accepted too.
    cache_token: str = field(default="", repr=False)
    control_tls: TLSFiles | None = None  # mutual TLS on the control port (with the token)
    zone: str = ""
    region: str = ""
    start_as: LifecycleState = LifecycleState.ACTIVE  # ACTIVE or STANDBY
    drain_grace_s: float = 30.0
    stop_grace_s: float = 5.0  # grpc server.stop(grace) after the drain
    # The OpenAI HTTP API's port on ``host`` (0: ephemeral), served only when the server
    # is given an app factory (WorkerServer's ``openai``; the sim engine has none).
    openai_port: int = 0
    cache_queue_size: int = 1024  # WatchCache events a subscriber may fall behind
    # A session counts in WorkerStatus.sessions while its last request is this recent
    # (the pool's routing.sessionTTL).
    session_window_s: float = DEFAULT_WINDOW_S

    def __post_init__(self) -> None:
        if self.start_as not in WARM_STATES:
            raise ValueError(f"start_as must be active or standby, got {self.start_as.value}")
        if not 0 <= self.drain_grace_s < math.inf:  # NaN too
            raise ValueError(f"drain_grace_s must be >= 0 and finite, got {self.drain_grace_s}")

    @property
    def control_address(self) -> str:
        return self.control_host or self.host


@dataclass(frozen=True)
class Ports:
    grpc: int
    http: int
    control: int = 0  # 0: no control port (no control token configured)
    openai: int = 0  # 0: no OpenAI HTTP API (sim engine, or turned off)


class _InFlight:
    """One open Generate stream; :meth:`abort` makes it finish with ABORT.

    The stream is interrupted only while it waits for the engine (``waiting``): a timeout
    fired while it is suspended at a ``yield`` would cancel gRPC's write of the chunk, not
    the stream, and the call would end without its ABORT chunk. Otherwise the stream sees
    ``abort_requested`` when it resumes, and a timeout armed just as the engine answered is
    disarmed before the stream yields.
    """

    def __init__(self, request_id: str, on_abort: Callable[[], Any] | None = None) -> None:
        self.request_id = request_id
        self.abort_requested = False
        self._on_abort = on_abort  # OpenAI HTTP requests: cancels the request's task
        self.waiting = False  # awaiting the engine's next output
        self._timeout: asyncio.Timeout | None = None

    def bind(self, timeout: asyncio.Timeout) -> None:
        self._timeout = timeout

    def abort(self) -> None:
        self.abort_requested = True
        if self._on_abort is not None:
            self._on_abort()
        if self.waiting and self._timeout is not None and not self._timeout.expired():
            self._timeout.reschedule(asyncio.get_running_loop().time())


class WorkerServer:
    def __init__(
        self,
        engine: Engine,
        config: WorkerConfig,
        *,
        metrics: WorkerMetrics | None = None,
        openai: AppFactory | None = None,
    ) -> None:
        self.engine = engine
        self.config = config
        self._openai_factory = openai
        self._openai: OpenAIHttp | None = None
        self.metrics = metrics if metrics is not None else WorkerMetrics()
        self._state = LifecycleState.LOADING
        self._target = config.start_as
        self._in_flight: dict[str, _InFlight] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self._warm = asyncio.Event()
        self._stopped = asyncio.Event()
        self._draining = asyncio.Event()  # set once the state is draining (or stopped)
        self._startup_error: BaseException | None = None
        self._health = health_aio.HealthServicer()
        self._grpc: Any = None
        self._control: Any = None  # the control port's gRPC server (None without a token)
        self._http: Any = None  # aiohttp AppRunner, see preheat.worker.http
        self._hub: CacheHub | None = None
        self._sessions = SessionLedger(self.config.session_window_s)
        self._tasks: set[asyncio.Task[None]] = set()
        self._startup_task: asyncio.Task[None] | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._stop_lock = asyncio.Lock()
        self._shut_down = False
        self.ports: Ports | None = None
        self.metrics.set_state(self._state)
        self.tracing: Tracing | None = None  # set by main when tracing is on

    # --- public surface ------------------------------------------------------------------
    @property
    def state(self) -> LifecycleState:
        return self._state

    @property
    def worker_id(self) -> str:
        return self.config.worker_id

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def hub(self) -> CacheHub:
        assert self._hub is not None, "start() first"
        return self._hub

    @property
    def startup_error(self) -> BaseException | None:
        """Why loading or warm-up failed (the worker then drains and stops)."""
        return self._startup_error

    async def start(self) -> Ports:
        """Binds gRPC and HTTP, then loads and warms the engine in the background."""
        from preheat.worker.http import start_http  # aiohttp lives in its own module
        from preheat.worker.services import ControlService, DataControlService, InferenceService

        loop = asyncio.get_running_loop()
        self._hub = CacheHub(loop, queue_size=self.config.cache_queue_size)
        self.engine.set_cache_listener(self._hub.listener)
        for svc in HEALTH_SERVICES:
            await self._health.set(svc, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self._health.set(CONTROL_SERVICE, health_pb2.HealthCheckResponse.SERVING)

        cfg = self.config
        openai_port = 0
        if self._openai_factory is not None:
            self._openai = OpenAIHttp(
                self,
                self._openai_factory,
                host=cfg.host,
                port=cfg.openai_port,
                stop_grace_s=cfg.stop_grace_s,
            )
            openai_port = self._openai.bind()
        server = grpc.aio.server()
        inference_pb2_grpc.add_InferenceServicer_to_server(InferenceService(self), server)
        cache_tokens = (cfg.cache_token, cfg.control_token) if cfg.cache_token else ()
        data_control = DataControlService(self, cache_tokens=cache_tokens)
        worker_pb2_grpc.add_WorkerControlServicer_to_server(data_control, server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        grpc_port = _bind(server, cfg.host, cfg.grpc_port, "gRPC")
        control_port = 0
        if cfg.control_token:
            control = grpc.aio.server()
            worker_pb2_grpc.add_WorkerControlServicer_to_server(
                ControlService(self, token=cfg.control_token), control
            )
            control_port = _bind(
                control, cfg.control_address, cfg.control_port, "control", cfg.control_tls
            )
            self._control = control
        else:
            log.warning(
                "control_disabled",
                extra=fields(
                    reason="no control token (--control-token-file or PREHEAT_CONTROL_TOKEN): "
                    "Promote, Demote and Drain are not served"
                ),
            )
        await server.start()
        self._grpc = server
        if self._control is not None:
            await self._control.start()
        self._http, http_port = await start_http(self, cfg.host, cfg.http_port)
        self.ports = Ports(grpc=grpc_port, http=http_port, control=control_port, openai=openai_port)
        log.info(
            "worker_listening",
            extra=fields(
                grpc_port=grpc_port,
                http_port=http_port,
                openai_port=openai_port,
                host=cfg.host,
                control_port=control_port,
                control_host=cfg.control_address if control_port else "",
            ),
        )
        self._startup_task = self.spawn(self._startup())
        return self.ports

    async def wait_warm(self) -> None:
        """Returns once the worker is warm (standby or active); raises if start-up failed."""
        warm = asyncio.ensure_future(self._warm.wait())
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait({warm, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            warm.cancel()
            stopped.cancel()
        if not self._warm.is_set():
            raise RuntimeError(f"worker stopped before it was warm: {self._startup_error!r}")

    async def wait_stopped(self) -> None:
        """Returns once a drain has finished (state ``stopped``)."""
        await self._stopped.wait()

    async def promote(self) -> None:
        await self._request_state(LifecycleState.ACTIVE)

    async def demote(self) -> None:
        await self._request_state(LifecycleState.STANDBY)

    def begin_drain(self) -> None:
        """Starts draining (idempotent) without waiting for it."""
        if self._drain_task is None:
            self._drain_task = self.spawn(self._drain())

    async def begin_drain_and_wait_draining(self) -> None:
        """Starts draining and returns once the state is draining (for the Drain RPC)."""
        self.begin_drain()
        await self._draining.wait()

    async def drain(self) -> None:
        """Drains: refuse new work, finish (or after the grace, abort) in-flight, stop."""
        self.begin_drain()
        assert self._drain_task is not None
        await asyncio.shield(self._drain_task)

    async def stop(self) -> None:
        """Drains if needed, then stops gRPC (``stop(grace)``), HTTP and the engine."""
        async with self._stop_lock:
            if self._shut_down:
                return
            if self._grpc is not None:
                await self.drain()
            if self._hub is not None:
                self._hub.close()
            if self._grpc is not None:
                await self._health.enter_graceful_shutdown()
                await self._grpc.stop(self.config.stop_grace_s)
            if self._control is not None:
                await self._control.stop(self.config.stop_grace_s)
            if self._openai is not None:
                await self._openai.stop()
            if self._http is not None:
                await self._http.cleanup()  # cancels background tasks (cleanup context)
            await self._cancel_tasks()
            self.engine.set_cache_listener(None)
            await self.engine.shutdown()
            self._shut_down = True
            log.info("worker_stopped")

    def spawn(self, coro: Any) -> asyncio.Task[None]:
        """Runs a background task owned by this server (cancelled and awaited on stop)."""
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def status(self) -> worker_pb2.WorkerStatus:
        info = self.engine.info
        stats = self.engine.stats()
        return worker_pb2.WorkerStatus(
            worker_id=self.config.worker_id,
            model=info.model,
            engine=info.kind,
            state=_STATE_PB[self._state],
            num_running=stats.num_running,
            num_waiting=stats.num_waiting,
            kv_cache_usage=stats.kv_cache_usage,
            block_size=info.block_size,
            num_gpu_blocks=info.num_gpu_blocks,
            max_num_seqs=info.max_num_seqs,
            max_model_len=info.max_model_len,
            in_flight=len(self._in_flight),
            zone=self.config.zone,
            region=self.config.region,
            tokenizer=info.tokenizer,
            openai_port=self.ports.openai if self.ports is not None else 0,
            cached_blocks=self._hub.num_blocks if self._hub is not None else 0,
            sessions=self._sessions.count(asyncio.get_running_loop().time()),
            waiting_by_priority=dict(stats.waiting_by_priority or {}),
        )

    # --- lifecycle -----------------------------------------------------------------------
    async def _set_state(self, dst: LifecycleState) -> None:
        src = self._state
        if src == dst:
            return
        reason = transition_error(src, dst)
        if reason is not None:
            raise PreheatError(ErrorCode.FAILED_PRECONDITION, reason)
        self._state = dst
        self.metrics.set_state(dst)
        log.info("state_changed", extra=fields(src=src.value, dst=dst.value))
        if dst in WARM_STATES:
            self._warm.set()
        serving = dst in WARM_STATES
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for svc in HEALTH_SERVICES:
            await self._health.set(svc, status)

    async def _request_state(self, dst: LifecycleState) -> None:
        """Promote/Demote: during loading/warming this changes where start-up ends."""
        if self._state in (LifecycleState.LOADING, LifecycleState.WARMING):
            self._target = dst
            log.info("start_target_changed", extra=fields(target=dst.value))
            return
        await self._set_state(dst)

    async def _startup(self) -> None:
        try:
            t0 = time.monotonic()
            await self.engine.load()
            if self._openai is not None:
                await self._openai.start()  # the engine's app needs the loaded engine
            self._seed_hub()
            await self._set_state(LifecycleState.WARMING)
            t1 = time.monotonic()
            await self.engine.warm_up()
            self._seed_hub()
            await self._set_state(self._target)
            log.info(
                "worker_warm",
                extra=fields(
                    load_s=round(t1 - t0, 3),
                    warm_up_s=round(time.monotonic() - t1, 3),
                    state=self._state.value,
                ),
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._startup_error = e
            log.exception("startup_failed", extra=fields(error=repr(e)))
            self.begin_drain()

    def _seed_hub(self) -> None:
        if self._hub is not None and self._hub.seq == 0:
            self._hub.seed(self.engine.cached_blocks())

    async def _drain(self) -> None:
        if self._state == LifecycleState.STOPPED:
            self._draining.set()
            self._stopped.set()
            return
        if self._startup_task is not None and not self._startup_task.done():
            self._startup_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._startup_task
        await self._set_state(LifecycleState.DRAINING)
        self._draining.set()
        grace = self.config.drain_grace_s
        log.info("drain_started", extra=fields(in_flight=len(self._in_flight), grace_s=grace))
        try:
            async with asyncio.timeout(grace):
                await self._idle.wait()
        except TimeoutError:
            left = list(self._in_flight.values())
            log.warning("drain_grace_over", extra=fields(aborting=len(left)))
            for h in left:
                h.abort()
            try:
                async with asyncio.timeout(ABORT_WAIT_S):
                    await self._idle.wait()
            except TimeoutError:
                log.error("drain_abort_timeout", extra=fields(left=len(self._in_flight)))
        await self._set_state(LifecycleState.STOPPED)
        self._stopped.set()
        log.info("drain_done")

    async def _cancel_tasks(self) -> None:
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    # --- Generate ------------------------------------------------------------------------
    def _check_active(self) -> None:
        if self._state != LifecycleState.ACTIVE:
            raise PreheatError(
                ErrorCode.UNAVAILABLE,
                f"worker is {self._state.value}; it takes requests only when active",
            )

    def admit(
        self, request_id: str, on_abort: Callable[[], Any] | None = None, session_id: str = ""
    ) -> _InFlight:
        """Admits one request (active only): it counts as in flight until :meth:`release`,
        and a drain whose grace runs out calls ``on_abort`` (the OpenAI HTTP path's hook)."""
        return self._admit(request_id, on_abort, session_id)

    def release(self, handle: _InFlight) -> None:
        self._release(handle)

    def _admit(
        self, request_id: str, on_abort: Callable[[], Any] | None = None, session_id: str = ""
    ) -> _InFlight:
        self._check_active()
        if request_id in self._in_flight:
            raise PreheatError(
                ErrorCode.INVALID_ARGUMENT, f"request id {request_id!r} is already in flight"
            )
        handle = _InFlight(request_id, on_abort)
        self._in_flight[request_id] = handle
        self._sessions.seen(session_id, asyncio.get_running_loop().time())
        self._idle.clear()
        self.metrics.in_flight.set(len(self._in_flight))
        return handle

    def _release(self, handle: _InFlight) -> None:
        if self._in_flight.get(handle.request_id) is handle:
            del self._in_flight[handle.request_id]
        self.metrics.in_flight.set(len(self._in_flight))
        if not self._in_flight:
            self._idle.set()

    def _limits(self) -> ModelLimits:
        info = self.engine.info
        return ModelLimits(
            model=info.model, max_model_len=info.max_model_len, vocab_size=info.vocab_size
        )

    def _engine_request(self, request_id: str, req: inference_pb2.GenerateRequest) -> EngineRequest:
        spec, tokens = checked_request(req, self._limits(), self.engine.tokenize)
        return EngineRequest(
            request_id=request_id,
            prompt_token_ids=tuple(tokens),
            sampling=Sampling(
                max_tokens=spec.max_tokens,
                temperature=1.0 if spec.temperature is None else spec.temperature,
                top_p=1.0 if spec.top_p is None else spec.top_p,
                stop=tuple(spec.stop),
                seed=spec.seed,
                ignore_eos=spec.ignore_eos,
                options=spec.options,
            ),
            priority=engine_priority(req.priority),
            cache_salt=req.cache_salt,
        )

    async def generate(
        self, req: inference_pb2.GenerateRequest, context: Any
    ) -> AsyncIterator[inference_pb2.GenerateResponse]:
        loop = asyncio.get_running_loop()
        received = loop.time()
        request_id = req.request_id or uuid.uuid4().hex
        outcome = WorkerOutcome.ERROR
        handle: _InFlight | None = None
        finished = False
        ended = False  # the engine's last chunk came (its outcome is the request's)
        trace = tracing.start(self.tracing, context, req)
        error = ""

        def finish() -> None:
            # Released and counted before the status goes out (a refusal's abort sends it
            # at once): a client that reads /metrics on its answer finds its request there.
            nonlocal finished
            if finished:
                return
            finished = True
            if handle is not None:
                self._release(handle)
            self.metrics.observe_outcome(outcome)
            if trace is not None:
                if outcome in _TRACE_EVENTS:
                    trace.event(_TRACE_EVENTS[outcome])
                trace.end(outcome.value, error)
            log.info(
                "request_done",
                extra=fields(
                    outcome=outcome.value, e2e_ms=round((loop.time() - received) * 1e3, 3)
                ),
            )

        with request_context(request_id):
            try:
                # State first (a non-active worker says UNAVAILABLE so a router retries
                # elsewhere, without tokenizing), then validation, then admission; no await
                # in between, so a drain cannot slip past the state check.
                self._check_active()
                engine_req = self._engine_request(request_id, req)
                coalescing = _coalesce_config(req)
                handle = self._admit(request_id, session_id=req.session_id)
                stream = self._stream(engine_req, req, handle, received)
                if coalescing is None:
                    async with contextlib.aclosing(stream):
                        async for chunk, final_outcome in stream:
                            if final_outcome is not None:
                                outcome, ended = final_outcome, True
                            if trace is not None:
                                trace.chunk(chunk)
                            yield chunk
                else:
                    outcomes: list[WorkerOutcome] = []
                    chunks = _chunks(stream, outcomes)
                    async with (
                        contextlib.aclosing(chunks),
                        contextlib.aclosing(coalesce(chunks, coalescing)) as merged,
                    ):
                        async for chunk in merged:
                            if outcomes:
                                outcome, ended = outcomes[-1], True
                            if trace is not None:
                                trace.chunk(chunk)
                            yield chunk
                    if outcomes:
                        outcome, ended = outcomes[-1], True
            except PreheatError as e:
                outcome = _OUTCOME.get(e.code, WorkerOutcome.ERROR)
                error = e.message
                log.info(
                    "request_refused",
                    extra=fields(code=e.code.value, reason=e.message),
                )
                finish()
                await abort(context, e)
            except asyncio.CancelledError:
                outcome = _gone(context)
                raise
            except GeneratorExit:
                # gRPC closed the stream at a yield: the RPC was cancelled (or its deadline
                # passed) while a chunk was being sent, an await outside this stream
                if not ended:
                    outcome = _gone(context)
                raise
            except Exception as e:
                if isinstance(e, grpc.aio.AbortError):
                    raise
                outcome = WorkerOutcome.ERROR
                # The exception's text stays in the log, under a reference the client gets:
                # it may name internals (paths, addresses, the engine's state).
                ref = uuid.uuid4().hex[:16]
                log.exception("request_failed", extra=fields(error_ref=ref))
                finish()
                message = f"internal error in the worker (reference {ref}; its log has the details)"
                await abort(context, PreheatError(ErrorCode.INTERNAL, message))
            finally:
                finish()

    async def _stream(
        self,
        engine_req: EngineRequest,
        req: inference_pb2.GenerateRequest,
        handle: _InFlight,
        received: float,
    ) -> AsyncGenerator[tuple[inference_pb2.GenerateResponse, WorkerOutcome | None], None]:
        """Chunks for one admitted request; the last one comes with its outcome."""
        loop = asyncio.get_running_loop()
        rid = engine_req.request_id
        wid = self.config.worker_id
        prompt_tokens = len(engine_req.prompt_token_ids)
        matcher = StopMatcher(engine_req.sampling.stop)
        ttft_at = received + req.ttft_deadline_ms / 1e3 if req.ttft_deadline_ms else None
        first_at: float | None = None
        last_at = received
        completion = 0

        def final(
            text: str,
            ids: tuple[int, ...],
            reason: FinishReason,
            usage: Usage | None,
            timing: StageTiming | None,
            out: EngineOutput | None = None,
        ) -> inference_pb2.GenerateResponse:
            now = loop.time()
            ttft_s = (first_at if first_at is not None else now) - received
            if timing is None:  # stopped by the worker or aborted: worker-measured
                timing = StageTiming(0.0, ttft_s, max(0.0, now - received - ttft_s))
            if usage is None:
                usage = Usage(prompt_tokens, 0, completion)
            if reason is not FinishReason.ABORT:
                self.metrics.e2e.observe(now - received)
                self.metrics.observe_timing(timing)
            return inference_pb2.GenerateResponse(
                request_id=rid,
                text=text,
                token_ids=ids,
                finish_reason=_FINISH_PB[reason],
                usage=inference_pb2.Usage(
                    prompt_tokens=usage.prompt_tokens,
                    cached_tokens=usage.cached_tokens,
                    completion_tokens=usage.completion_tokens,
                ),
                timing=inference_pb2.Timing(
                    queue_ms=timing.queue_s * 1e3,
                    prefill_ms=timing.prefill_s * 1e3,
                    decode_ms=timing.decode_s * 1e3,
                    ttft_ms=timing.ttft_s * 1e3,
                    e2e_ms=timing.e2e_s * 1e3,
                ),
                worker_id=wid,
                logprobs=_logprobs_pb(out.logprobs) if out is not None else (),
                prompt_logprobs=_logprobs_pb(out.prompt_logprobs) if out is not None else (),
            )

        gen = self.engine.generate(engine_req)
        it = aiter(gen)
        try:
            async with asyncio.timeout(None) as abort_cm:
                handle.bind(abort_cm)
                try:
                    while True:
                        if handle.abort_requested:  # asked while a chunk was being sent
                            raise TimeoutError
                        out: EngineOutput
                        handle.waiting = True
                        try:
                            if first_at is None and ttft_at is not None:
                                try:
                                    async with asyncio.timeout_at(ttft_at):
                                        out = await anext(it)
                                except TimeoutError:
                                    if handle.abort_requested:
                                        raise
                                    raise PreheatError(
                                        ErrorCode.DEADLINE_EXCEEDED,
                                        f"no first token within ttft_deadline_ms="
                                        f"{req.ttft_deadline_ms}; the request was aborted",
                                    ) from None
                            else:
                                out = await anext(it)
                        finally:
                            handle.waiting = False
                        if handle.abort_requested and not abort_cm.expired():
                            # the abort came as the engine answered: disarm its timeout, which
                            # would otherwise fire while the chunk is being sent
                            abort_cm.reschedule(None)
                            raise TimeoutError
                        now = loop.time()
                        n = len(out.token_ids)
                        if n:
                            if first_at is None:
                                first_at = now
                                self.metrics.ttft.observe(now - received)
                            else:
                                itl = (now - last_at) / n
                                for _ in range(n):
                                    self.metrics.itl.observe(itl)
                            last_at = now
                            completion += n
                        text = matcher.feed(out.text)
                        if matcher.stopped:
                            yield (
                                final(text, out.token_ids, FinishReason.STOP, None, None, out),
                                WorkerOutcome.OK,
                            )
                            return
                        if out.finish_reason is not None:
                            text += matcher.flush()
                            yield (
                                final(
                                    text,
                                    out.token_ids,
                                    out.finish_reason,
                                    out.usage,
                                    out.timing,
                                    out,
                                ),
                                WorkerOutcome.OK,
                            )
                            return
                        if text or out.token_ids:
                            yield (
                                inference_pb2.GenerateResponse(
                                    request_id=rid,
                                    text=text,
                                    token_ids=out.token_ids,
                                    worker_id=wid,
                                    logprobs=_logprobs_pb(out.logprobs),
                                    prompt_logprobs=_logprobs_pb(out.prompt_logprobs),
                                ),
                                None,
                            )
                except StopAsyncIteration:
                    log.warning("engine_stream_ended_without_finish")
                    yield (
                        final(matcher.flush(), (), FinishReason.ABORT, None, None),
                        WorkerOutcome.ERROR,
                    )
                    return
        except TimeoutError:
            if not handle.abort_requested:
                raise
            log.warning("request_aborted", extra=fields(reason="drain grace over"))
            yield final(matcher.flush(), (), FinishReason.ABORT, None, None), WorkerOutcome.ABORTED
        finally:
            aclose = getattr(gen, "aclose", None)
            if aclose is not None:
                await aclose()


def _gone(context: Any) -> WorkerOutcome:
    """The outcome of a stream its client left: the deadline's when it had passed."""
    remaining = context.time_remaining()
    expired = remaining is not None and remaining <= DEADLINE_SLACK_S
    return WorkerOutcome.DEADLINE if expired else WorkerOutcome.CANCELLED


# outcomes a trace shows as an event on worker.generate (the others end it plainly)
_TRACE_EVENTS = {
    WorkerOutcome.CANCELLED: "cancelled",
    WorkerOutcome.DEADLINE: "deadline",
    WorkerOutcome.ABORTED: "aborted",
    WorkerOutcome.REJECTED: "refused",
    WorkerOutcome.UNAVAILABLE: "refused",
    WorkerOutcome.INVALID: "refused",
}


def _logprobs_pb(items: tuple[TokenLogprobs, ...]) -> list[inference_pb2.TokenLogprobs]:
    def one(lp: Logprob) -> inference_pb2.Logprob:
        return inference_pb2.Logprob(
            token_id=lp.token_id, logprob=lp.logprob, rank=lp.rank, text=lp.text
        )

    return [
        inference_pb2.TokenLogprobs(token=one(t.token), top=[one(x) for x in t.top]) for t in items
    ]


def _coalesce_config(req: inference_pb2.GenerateRequest) -> CoalesceConfig | None:
    """The request's coalescing, or None when it asks for none."""
    if not req.HasField("coalesce") or req.coalesce.max_tokens <= 1:
        return None
    try:
        return CoalesceConfig.from_pb(req.coalesce)
    except ValueError as e:
        raise PreheatError(ErrorCode.INVALID_ARGUMENT, str(e)) from None


async def _chunks(
    stream: AsyncGenerator[tuple[inference_pb2.GenerateResponse, WorkerOutcome | None], None],
    outcomes: list[WorkerOutcome],
) -> AsyncGenerator[inference_pb2.GenerateResponse, None]:
    """The chunks of ``stream``; its final outcome is appended to ``outcomes``."""
    async with contextlib.aclosing(stream):
        async for chunk, final_outcome in stream:
            if final_outcome is not None:
                outcomes.append(final_outcome)
            yield chunk


def _bind(server: Any, host: str, port: int, what: str, tls: TLSFiles | None = None) -> int:
    address = f"{_host_port(host)}:{port}"
    if tls is None:
        bound = int(server.add_insecure_port(address))
    else:
        bound = int(server.add_secure_port(address, server_credentials(tls)))
    if bound == 0:
        raise OSError(f"could not bind {what} on {host}:{port}")
    return bound


def _host_port(host: str) -> str:
    """An IPv6 literal in brackets (``::`` -> ``[::]``), anything else as it is."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def describe(ports: Ports, worker_id: str) -> Mapping[str, Any]:
    """The ``worker_ready`` line printed at start-up (parsed by tests and the demo)."""
    return {
        "event": "worker_ready",
        "worker_id": worker_id,
        "grpc_port": ports.grpc,
        "http_port": ports.http,
        "control_port": ports.control,
        "openai_port": ports.openai,
    }
