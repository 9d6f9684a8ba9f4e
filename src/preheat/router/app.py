"""The router's object graph: endpoint store + scheduler + front ends, as one server.

In-process use (tests, benchmarks)::

    router = RouterServer(StaticDiscovery(["127.0.0.1:50051", ...]), RouterConfig())
    ports = await router.start()           # binds 127.0.0.1, port 0 -> ephemeral
    await router.wait_ready()              # >= 1 routable endpoint
    ...                                    # gRPC (Inference, Router, Health) at ports.grpc,
                                           # OpenAI HTTP, /metrics, /ready at ports.http
    await router.stop()

``router.store`` is the :class:`EndpointStore` (``inject_rtt``, ``snapshot``),
``router.dispatcher`` the request path and ``router.metrics`` the ``preheat_router_*``
metrics. Two RouterServers over the same discovery agree on where a session goes without
talking to each other (the scheduler is a pure function of the same view).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from preheat.core.metric_names import ROUTER_IN_FLIGHT
from preheat.core.routing.admission import AdmissionConfig
from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.types import PrefillCost
from preheat.core.traffic.classes import Traffic
from preheat.process.logs import fields
from preheat.process.tracing import Tracing
from preheat.proto.preheat.v1 import inference_pb2_grpc, router_pb2_grpc
from preheat.router.embedded import EmbeddedRouter
from preheat.router.endpoints import DiscoverySource, EndpointStore
from preheat.router.frontend.auth import KeySet, PickAuthInterceptor
from preheat.router.frontend.dispatch import DispatchConfig, Dispatcher
from preheat.router.frontend.grpc_guard import InternalErrorGuard
from preheat.router.frontend.grpc_service import InferenceProxy, RouterService
from preheat.router.frontend.http import HttpFrontend, HttpLimits, start_http
from preheat.router.frontend.metrics import RouterMetrics
from preheat.router.pools import Pool, PoolSet, PoolSource
from preheat.router.settings import RoutingBase
from preheat.wire.coalesce import CoalesceConfig

log = logging.getLogger("preheat.router")

INFERENCE_SERVICE = "preheat.v1.Inference"
ROUTER_SERVICE = "preheat.v1.Router"
HEALTH_POLL_S = 0.25
DRAIN_POLL_S = 0.05


@dataclass(frozen=True)
class RouterConfig:
    host: str = "127.0.0.1"
    grpc_port: int = 0  # 0: ephemeral (see RouterServer.start's return value)
    http_port: int = 0
    pool: str = ""
    model: str = ""  # the served model's name for /v1/models and validation; "" = any
    region: str = ""  # the router's own; a client's when it names none
    zone: str = ""
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    tokenizer: str = "sim"  # sim, sim:VOCAB or hf:PATH
    coalesce: CoalesceConfig = field(default_factory=CoalesceConfig)
    # "worker": the router asks each worker to coalesce (fewer messages on both hops);
    # "router": the router's front ends coalesce what the worker sends one token at a time
    coalesce_at: str = "worker"
    forward_token_ids: bool = True  # see DispatchConfig.forward_token_ids
    max_retries: int = 2
    max_queue: int = 256
    queue_timeout_s: float = 10.0
    # SLO classes and tenant quotas (the pool's spec.traffic, or the routing file's)
    traffic: Traffic = field(default_factory=Traffic)
    refresh_interval_s: float = 1.0  # the store's Status poll / scrape interval
    region_rtt_ms: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    stop_grace_s: float = 2.0
    # None: open. Keys for the HTTP API / tokens for Router.Pick* (router/frontend/auth.py)
    api_keys: KeySet | None = None
    pick_tokens: KeySet | None = None
    tenant_header: str = ""  # a trusted gateway's tenant header/metadata; "" = none
    # sent on WorkerControl.WatchCache to workers started with --cache-token-file
    worker_cache_token: str = field(default="", repr=False)
    # the default TTFT target and the bound on requests in flight per pool
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    first_token_timeout_s: float = 10.0  # see DispatchConfig.first_token_timeout_s
    http: HttpLimits = field(default_factory=HttpLimits)  # body size and HTTP timeouts
    drain_grace_s: float = 30.0  # SIGTERM: in-flight requests get this long (new ones: 503)
    # what every pool's routing settings start from (the multi-pool sources' pools)
    routing_base: RoutingBase = field(default_factory=RoutingBase)
    # OpenTelemetry tracing (--tracing): every pool's dispatcher records its requests' spans
    tracing: Tracing | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.coalesce_at not in ("worker", "router"):
            raise ValueError(f"coalesce_at must be worker or router, got {self.coalesce_at!r}")

    def dispatch_config(self) -> DispatchConfig:
        return DispatchConfig(
            region=self.region,
            zone=self.zone,
            max_retries=self.max_retries,
            max_queue=self.max_queue,
            queue_timeout_s=self.queue_timeout_s,
            traffic=self.traffic,
            model=self.model,
            upstream_coalesce=self.coalesce if self.coalesce_at == "worker" else None,
            forward_token_ids=self.forward_token_ids,
            tenant_header=self.tenant_header,
            admission=self.admission,
            first_token_timeout_s=self.first_token_timeout_s,
        )

    @property
    def slo_deadlines_ms(self) -> dict[str, float]:
        """SLO class -> TTFT target: a view of :attr:`traffic`."""
        return self.traffic.deadlines_ms

    def frontend_coalesce(self) -> CoalesceConfig:
        """What the front ends do themselves: nothing when the workers coalesce."""
        return self.coalesce if self.coalesce_at == "router" else CoalesceConfig()


@dataclass(frozen=True)
class RouterPorts:
    grpc: int
    http: int


class RouterServer:
    """The router: its pools (:class:`~preheat.router.pools.PoolSet`) behind gRPC and HTTP.

    ``RouterServer(discovery, config)``: one pool over ``discovery`` (``store``,
    ``dispatcher`` and ``embedded`` are its); ``RouterServer(None, config,
    pool_source=source)``: every pool ``source`` reports, routed by the request's model.
    """

    def __init__(
        self,
        discovery: DiscoverySource | None,
        config: RouterConfig,
        *,
        cost: PrefillCost | None = None,
        store: EndpointStore | None = None,
        metrics: RouterMetrics | None = None,
        pool_source: PoolSource | None = None,
    ) -> None:
        self.config = config
        if discovery is not None:
            self.pools = PoolSet.single(discovery, config, cost=cost, store=store, metrics=metrics)
        elif pool_source is not None:
            self.pools = PoolSet.follow(pool_source, config, cost=cost, metrics=metrics)
        else:
            raise ValueError("RouterServer needs a discovery source or a pool source")
        self.metrics = self.pools.metrics
        self._health = health_aio.HealthServicer()
        self._grpc: Any = None
        self._http: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self.ports: RouterPorts | None = None

    def _only(self) -> Pool:
        pool = self.pools.single_pool
        if pool is None:
            pools = self.pools.pools()
            if len(pools) != 1:
                raise AttributeError(f"the router has {len(pools)} pools, not one")
            pool = pools[0]
        return pool

    @property
    def embedded(self) -> EmbeddedRouter:
        """The one pool's view and scheduler (single-pool use)."""
        return self._only().embedded

    @property
    def store(self) -> EndpointStore:
        return self._only().store

    @property
    def dispatcher(self) -> Dispatcher:
        return self._only().dispatcher

    @property
    def store_task(self) -> asyncio.Task[None] | None:
        """Discovery's task: it ends only if discovery fails."""
        return self.pools.task

    def ready(self) -> bool:
        return self.pools.ready()

    def in_flight(self) -> int:
        """Requests being proxied now (the ``in_flight`` gauge)."""
        return int(
            sum(
                sample.value
                for family in self.metrics.in_flight.collect()
                for sample in family.samples
                if sample.name == ROUTER_IN_FLIGHT
            )
        )

    async def drain(self, grace_s: float) -> None:
        """Stops taking work: every request not yet routed is answered at once (HTTP 503
        with ``Retry-After``, gRPC UNAVAILABLE), readiness and health turn off, and this
        returns once the requests in flight have finished, or after ``grace_s``."""
        self.pools.begin_drain()
        for svc in ("", INFERENCE_SERVICE, ROUTER_SERVICE):
            await self._health.set(svc, health_pb2.HealthCheckResponse.NOT_SERVING)
        log.info("router_draining", extra=fields(in_flight=self.in_flight(), grace_s=grace_s))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace_s):
                for _ in itertools.count():  # polled: the gauge is the one count kept
                    if self.in_flight() == 0:
                        break
                    await asyncio.sleep(DRAIN_POLL_S)
        log.info("router_drained", extra=fields(in_flight=self.in_flight()))

    def models(self) -> list[str]:
        """Every servable model name (single pool: --model, else what its workers report)."""
        return [name for name, _ in self.pools.models()]

    async def start(self) -> RouterPorts:
        """Loads the tokenizer and chat template (in a thread), starts discovery, then binds
        gRPC and HTTP; returns the bound ports. Raises :class:`TokenizerLoadError` when the
        tokenizer cannot be loaded (nothing is bound then)."""
        loop = asyncio.get_running_loop()
        frontend = HttpFrontend(
            self.pools,
            self.config.frontend_coalesce(),
            ready=self.ready,
            registries=[self.metrics.registry],
            api_keys=self.config.api_keys,
            tenant_header=self.config.tenant_header,
            limits=self.config.http,
        )
        # before listening, off the loop: a request that loaded it held the loop for the
        # load (10 s importing transformers on a loaded machine; the metrics looked stale)
        await asyncio.to_thread(frontend.ids.load)
        self.pools.start()
        for svc in ("", INFERENCE_SERVICE, ROUTER_SERVICE):
            await self._health.set(svc, health_pb2.HealthCheckResponse.NOT_SERVING)
        interceptors: list[Any] = [InternalErrorGuard()]
        if self.config.pick_tokens is not None:
            interceptors.insert(0, PickAuthInterceptor(self.config.pick_tokens))
        server = grpc.aio.server(interceptors=interceptors)
        inference_pb2_grpc.add_InferenceServicer_to_server(
            InferenceProxy(self.pools, self.config.frontend_coalesce()), server
        )
        router_pb2_grpc.add_RouterServicer_to_server(RouterService(self.pools), server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        grpc_port = server.add_insecure_port(f"{self.config.host}:{self.config.grpc_port}")
        if grpc_port == 0:
            raise OSError(f"could not bind gRPC on {self.config.host}:{self.config.grpc_port}")
        await server.start()
        self._grpc = server
        self._http, http_port = await start_http(frontend, self.config.host, self.config.http_port)
        self.ports = RouterPorts(grpc=grpc_port, http=http_port)
        self._tasks.append(loop.create_task(self._health_loop()))
        log.info(
            "router_listening",
            extra=fields(grpc_port=grpc_port, http_port=http_port, host=self.config.host),
        )
        return self.ports

    async def _health_loop(self) -> None:
        """gRPC health follows readiness: SERVING while >= 1 endpoint is routable."""
        serving: bool | None = None
        while True:
            now = self.ready()
            if now != serving:
                serving = now
                status = (
                    health_pb2.HealthCheckResponse.SERVING
                    if now
                    else health_pb2.HealthCheckResponse.NOT_SERVING
                )
                for svc in ("", INFERENCE_SERVICE, ROUTER_SERVICE):
                    await self._health.set(svc, status)
            await asyncio.sleep(HEALTH_POLL_S)

    async def wait_ready(self, min_endpoints: int = 1, timeout_s: float = 30.0) -> None:
        await self.pools.wait_ready(min_endpoints, timeout_s)

    async def stop(self) -> None:
        """Stops gRPC (``stop(grace)``), HTTP, then the store and background tasks."""
        if self._grpc is not None:
            await self._health.enter_graceful_shutdown()
            await self._grpc.stop(self.config.stop_grace_s)
            self._grpc = None
        if self._http is not None:
            await self._http.cleanup()
            self._http = None
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.pools.stop()
        log.info("router_stopped")


def describe(ports: RouterPorts) -> dict[str, Any]:
    """The ``router_ready`` line printed at start-up (parsed by tests and tools)."""
    return {"event": "router_ready", "grpc_port": ports.grpc, "http_port": ports.http}
