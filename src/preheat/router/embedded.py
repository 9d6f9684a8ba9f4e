"""The router without its servers: the endpoint view and the scheduler in the caller's
process, a router replica that a gateway or front end embeds.

``preheat router`` is this plus a gRPC and an HTTP server (:class:`~preheat.router.app.
RouterServer` builds on it). Embedded, a decision is a function call, not a round trip:
the caller asks :meth:`EmbeddedRouter.pick`, then sends Generate straight to the worker it
names, so the router adds no hop to the time to first token.

    async with EmbeddedRouter(StaticDiscovery(endpoints), RouterConfig()) as router:
        await router.wait_ready()
        answer = await router.pick(router_pb2.PickRequest(request=req))
        stub_for(answer.endpoint.address).Generate(req)

It keeps the same view a router process does (discovery, each worker's Status, metrics,
WatchCache and RTT), decides with the same code (``preheat.core.routing``), and answers
what ``Router/Pick`` answers, refusals included (:class:`~preheat.core.errors.PreheatError`
with the status Pick would return). Several embedded replicas with the same view place a
session on the same worker, as router processes do (rendezvous hashing), but each sees only
its own requests in flight and its own routing history. Every replica polls every worker,
so embed it in a handful of gateways, not in thousands of application clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType
from typing import TYPE_CHECKING

from preheat.engine.costmodel import CostModel
from preheat.proto.preheat.v1 import router_pb2
from preheat.router.endpoints import DiscoverySource, EndpointStore
from preheat.router.frontend.dispatch import Dispatcher
from preheat.router.frontend.grpc_service import pick_response
from preheat.router.frontend.metrics import RouterMetrics
from preheat.router.frontend.tokenizer import PromptTokenizer, build_tokenizer

if TYPE_CHECKING:
    from preheat.core.routing.types import PrefillCost
    from preheat.router.app import RouterConfig

log = logging.getLogger("preheat.router")


class EmbeddedRouter:
    def __init__(
        self,
        discovery: DiscoverySource,
        config: RouterConfig,
        *,
        cost: PrefillCost | None = None,
        store: EndpointStore | None = None,
        metrics: RouterMetrics | None = None,
        tokenizer: PromptTokenizer | None = None,
    ) -> None:
        self.config = config
        self.store = (
            store
            if store is not None
            else EndpointStore(
                discovery,
                pool=config.pool,
                refresh_interval_s=config.refresh_interval_s,
                region_rtt_ms=config.region_rtt_ms,
                watch_token=config.worker_cache_token,
            )
        )
        self.metrics = metrics if metrics is not None else RouterMetrics()
        self.metrics.bind_pool(self.store.pool, config.model)  # the labels of its series
        self.dispatcher = Dispatcher(
            self.store,
            config.scheduler,
            cost if cost is not None else CostModel.default(),
            tokenizer if tokenizer is not None else build_tokenizer(config.tokenizer),
            config.dispatch_config(),
            self.metrics,
        )
        self.dispatcher.tracing = config.tracing
        self.store_task: asyncio.Task[None] | None = None  # ends only if discovery fails

    def ready(self) -> bool:
        return bool(self.store.snapshot())

    def start(self) -> None:
        """Starts keeping the view (discovery, polls, watches) on the running loop."""
        if self.store_task is None:
            self.store_task = asyncio.get_running_loop().create_task(self._run_store())

    async def _run_store(self) -> None:
        try:
            await self.store.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("endpoint_store_failed")
            raise

    async def wait_ready(self, min_endpoints: int = 1, timeout_s: float = 30.0) -> None:
        """Until ``min_endpoints`` are routable; TimeoutError says which are known."""
        await self.store.wait_ready(min_endpoints, timeout_s)

    async def pick(
        self,
        request: router_pb2.PickRequest,
        *,
        timeout_s: float | None = None,
        metadata: dict[str, str] | None = None,
    ) -> router_pb2.PickResponse:
        """What ``Router/Pick`` answers for ``request``; PreheatError when it would refuse.
        ``timeout_s`` bounds the wait for a routable endpoint (None: the queue timeout);
        ``metadata`` is what a gRPC caller would send (``x-session-id``, ...)."""
        if self.store_task is None:
            raise RuntimeError("EmbeddedRouter.pick before start()")
        deadline = None
        if timeout_s is not None:
            deadline = asyncio.get_running_loop().time() + timeout_s
        return await pick_response(self.dispatcher, request, metadata or {}, deadline)

    async def stop(self) -> None:
        task, self.store_task = self.store_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.dispatcher.close()

    async def __aenter__(self) -> EmbeddedRouter:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
