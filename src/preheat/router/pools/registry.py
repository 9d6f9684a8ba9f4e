"""The router's pools: one endpoint store, scheduler state, routing settings and SLO
classes per pool, and the model -> pool lookup the front ends ask.

Two modes:

* **single pool** (:meth:`PoolSet.single`): the one pool of ``--discovery
  kubernetes:NS/SELECTOR`` or a single-pool static file, named by ``--pool``/``--model``;
  every request goes to it (its own validation answers a wrong model, as it always did),
  and the router is ready while it has a routable endpoint.
* **many pools** (:meth:`PoolSet.follow`): a :class:`~preheat.router.pools.spec.PoolSource`
  reports the pools (the multi-pool static file, or the InferencePools of the Kubernetes
  API); each snapshot is applied at once: a new pool gets its store and scheduler, a pool
  whose settings changed is reconfigured in place (its scheduler state kept), its endpoints
  go to its store, and a pool that is gone stops taking requests (404) while the requests
  it has in flight finish (its store stays until they have, bounded by ``retire_grace_s``).
  The router is ready once the source has reported the pools (a pool with no routable
  worker holds its requests, the scale-from-zero path, so the router must take them).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from preheat.core.routing.types import PrefillCost, StepClock
from preheat.engine.costmodel import CostModel
from preheat.process.kubeconfig import KubeConfigError
from preheat.process.logs import fields
from preheat.router.embedded import EmbeddedRouter
from preheat.router.endpoints import DiscoverySource, EndpointStore, StaticDiscovery
from preheat.router.frontend.dispatch import Dispatcher
from preheat.router.frontend.metrics import RouterMetrics, StepClockCollector, TtftMissCollector
from preheat.router.frontend.passthrough import Passthrough
from preheat.router.frontend.tokenizer import PromptTokenizer, build_tokenizer
from preheat.router.pools.lookup import ModelTable, model_table, resolve
from preheat.router.pools.spec import PoolSource, PoolSpec
from preheat.router.settings import pool_settings

if TYPE_CHECKING:
    from preheat.router.app import RouterConfig

log = logging.getLogger("preheat.router")

RETIRE_POLL_S = 0.1


class Pool:
    """One pool's routing state: its store and dispatcher (an :class:`EmbeddedRouter`), its
    OpenAI passthrough, and the spec it was last given."""

    def __init__(
        self,
        spec: PoolSpec,
        embedded: EmbeddedRouter,
        passthrough: Passthrough,
        source: StaticDiscovery | None = None,
    ) -> None:
        self.spec = spec
        self.embedded = embedded
        self.passthrough = passthrough
        self.source = source  # the endpoints it is fed (many-pools mode)

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def store(self) -> EndpointStore:
        return self.embedded.store

    @property
    def dispatcher(self) -> Dispatcher:
        return self.embedded.dispatcher

    @property
    def metrics(self) -> RouterMetrics:
        return self.embedded.metrics

    def canonical(self, model: str) -> str:
        """The model name the pool's workers serve, for a name a request gave."""
        return self.spec.model if model and model in self.spec.aliases else model

    def model_len(self) -> int | None:
        """The context window the pool's workers report (None: not known yet)."""
        limits = self.store.model_limits()
        if limits is None or limits.max_model_len >= 1 << 30:
            return None
        return limits.max_model_len

    async def stop(self) -> None:
        await self.embedded.stop()
        await self.passthrough.close()


def pool_config(base: RouterConfig, spec: PoolSpec) -> RouterConfig:
    """The router config of one pool of many: ``base`` with the pool's name, model and
    routing settings (``ValueError`` naming every problem of its settings)."""
    s = pool_settings(base.routing_base, spec.routing, spec.name)
    return dataclasses.replace(
        base,
        pool=spec.name,
        model=spec.model,
        scheduler=s.scheduler,
        traffic=s.traffic,
        admission=s.admission,
    )


class PoolSet:
    """Every pool of the router, by key, and the model table over them."""

    def __init__(
        self,
        config: RouterConfig,
        *,
        cost: PrefillCost | None = None,
        metrics: RouterMetrics | None = None,
        retire_grace_s: float | None = None,
    ) -> None:
        self.config = config
        self.cost = cost if cost is not None else CostModel.default()
        self.metrics = metrics if metrics is not None else RouterMetrics()
        self.tokenizer: PromptTokenizer = build_tokenizer(config.tokenizer)
        self.retire_grace_s = (
            retire_grace_s
            if retire_grace_s is not None
            else (config.http.request_timeout_s or config.drain_grace_s)
        )
        self._pools: dict[str, Pool] = {}
        self._table: ModelTable = model_table(())
        self._single: Pool | None = None
        self._source: PoolSource | None = None
        self._synced = False
        self._draining = False
        self._retiring: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None  # ends only if discovery fails
        self.last_error = ""  # the pools whose settings were refused, and why
        self._errors: list[str] = []
        # each endpoint's step clock, read from the pools' stores at scrape time
        self.metrics.registry.register(StepClockCollector(self._clock_views))
        self.metrics.registry.register(TtftMissCollector(self._miss_views))

    # --- building ---------------------------------------------------------------------------
    def _passthrough(self, d: Dispatcher) -> Passthrough:
        return Passthrough(d, self.config.coalesce, self.config.http.request_timeout_s or None)

    @classmethod
    def single(
        cls,
        discovery: DiscoverySource,
        config: RouterConfig,
        *,
        cost: PrefillCost | None = None,
        store: EndpointStore | None = None,
        metrics: RouterMetrics | None = None,
    ) -> PoolSet:
        """One pool over ``discovery``, configured by ``config`` as it is."""
        pools = cls(config, cost=cost, metrics=metrics)
        embedded = EmbeddedRouter(
            discovery,
            config,
            cost=pools.cost,
            store=store,
            metrics=pools.metrics,
            tokenizer=pools.tokenizer,
        )
        spec = PoolSpec(name=config.pool, model=config.model)
        pool = Pool(spec, embedded, pools._passthrough(embedded.dispatcher))
        pools._single = pool
        pools._pools = {spec.key: pool}
        pools._table = model_table((spec,))
        return pools

    @classmethod
    def follow(
        cls,
        source: PoolSource,
        config: RouterConfig,
        *,
        cost: PrefillCost | None = None,
        metrics: RouterMetrics | None = None,
    ) -> PoolSet:
        """The pools ``source`` reports, followed as they change."""
        pools = cls(config, cost=cost, metrics=metrics)
        pools._source = source
        return pools

    def _build(self, spec: PoolSpec) -> Pool:
        cfg = pool_config(self.config, spec)
        source = StaticDiscovery(spec.endpoints)
        embedded = EmbeddedRouter(
            source,
            cfg,
            cost=self.cost,
            metrics=self.metrics.for_pool(spec.name, spec.model),
            tokenizer=self.tokenizer,
        )
        embedded.dispatcher.fallback = functools.partial(self._fallback, spec.namespace)
        pt = self._passthrough(embedded.dispatcher)
        pt.fallback = functools.partial(self._fallback_passthrough, spec.namespace)
        return Pool(spec, embedded, pt, source)

    def _fallback(self, namespace: str, name: str) -> tuple[Dispatcher, str] | None:
        """The dispatcher and model of pool ``name`` of ``namespace`` (a class's fallback
        pool), None when there is no such pool."""
        pool = self._pools.get(f"{namespace}/{name}" if namespace else name)
        if pool is None or not pool.spec.model:
            return None
        return pool.dispatcher, pool.spec.model

    def _fallback_passthrough(self, namespace: str, name: str) -> Passthrough | None:
        """The OpenAI passthrough of pool ``name`` of ``namespace`` (a class's fallback pool,
        for a request on the passthrough), None when there is no such pool."""
        pool = self._pools.get(f"{namespace}/{name}" if namespace else name)
        return pool.passthrough if pool is not None else None

    # --- views ------------------------------------------------------------------------------
    def _clock_views(self) -> list[tuple[str, str, Mapping[str, StepClock]]]:
        """Each pool's metric labels (pool, model) and its endpoints' step clocks."""
        return [(p.metrics.pool, p.metrics.model, p.store.step_clocks()) for p in self.pools()]

    def _miss_views(self) -> list[tuple[str, str, Mapping[str, float]]]:
        """Each pool's metric labels (pool, model) and its endpoints' TTFT misses now."""
        return [
            (
                p.metrics.pool,
                p.metrics.model,
                p.store.ttft_misses(p.dispatcher.scheduler_config.ttft_error_half_life_s),
            )
            for p in self.pools()
        ]

    @property
    def single_pool(self) -> Pool | None:
        return self._single

    def pools(self) -> list[Pool]:
        return list(self._pools.values())

    def get(self, key: str) -> Pool | None:
        return self._pools.get(key)

    @property
    def table(self) -> ModelTable:
        return self._table

    def needs_model(self) -> bool:
        """Whether a request's model must be read to find its pool."""
        return self._table.only is None

    def resolve(self, model: str) -> Pool:
        """The pool that serves ``model``; raises the request's PreheatError (NOT_FOUND for
        a model no pool serves)."""
        return self._pools[resolve(self._table, model)]

    def models(self) -> list[tuple[str, Pool]]:
        """Every servable model name (models, then aliases, by pool) and its pool; single
        pool: ``--model``, else the model its workers report."""
        if self._single is not None:
            pool = self._single
            if pool.spec.model:
                return [(pool.spec.model, pool)]
            limits = pool.store.model_limits()
            return [(limits.model, pool)] if limits is not None else []
        return [(n, self._pools[self._table.by_name[n]]) for n in self._table.served]

    def ready(self) -> bool:
        if self._draining:
            return False
        if self._single is not None:
            return self._single.embedded.ready()
        return self._synced

    def routable(self) -> int:
        """Pools with at least one routable endpoint."""
        return sum(1 for p in self._pools.values() if p.embedded.ready())

    # --- running ----------------------------------------------------------------------------
    def start(self) -> None:
        if self.task is not None:
            return
        if self._single is not None:
            self._single.embedded.start()
            self.task = self._single.embedded.store_task
        else:
            self.task = asyncio.get_running_loop().create_task(self._follow())

    async def _follow(self) -> None:
        assert self._source is not None
        try:
            async for specs in self._source.changes():
                self.apply(specs)
        except (asyncio.CancelledError, KubeConfigError):
            raise  # no cluster: said once, by the router's discovery_failed, not a traceback
        except Exception:
            log.exception("pool_discovery_failed")
            raise
        await asyncio.Event().wait()  # a source that ends keeps its last set

    def apply(self, specs: tuple[PoolSpec, ...]) -> None:
        """Makes the pools those of ``specs`` (see the module docstring)."""
        table = model_table(specs)
        for c in set(table.conflicts) - set(self._table.conflicts):  # once, not every event
            log.warning("pool_model_conflict", extra=fields(problem=c))
        pools: dict[str, Pool] = {}
        errors: list[str] = []
        for spec in specs:
            pool = self._pools.get(spec.key)
            try:
                if pool is None:
                    pool = self._build(spec)
                    pool.embedded.start()
                    if self._draining:
                        pool.dispatcher.begin_drain()
                    log.info(
                        "pool_added",
                        extra=fields(
                            pool=spec.key, model=spec.model, endpoints=len(spec.endpoints)
                        ),
                    )
                elif spec.settings_differ(pool.spec):
                    cfg = pool_config(self.config, spec)
                    pool.embedded.config = cfg
                    pool.dispatcher.reconfigure(cfg.scheduler, cfg.dispatch_config())
                    pool.metrics.bind_pool(spec.name, spec.model)
                    log.info("pool_changed", extra=fields(pool=spec.key, model=spec.model))
            except ValueError as e:  # its routing settings: keep what it had, or skip it
                error = f"pool {spec.key}: {e}"
                if error not in self._errors:  # once, not on every event
                    log.error("bad_pool_settings", extra=fields(pool=spec.key, error=str(e)))
                errors.append(error)
                if pool is None:
                    continue
                spec = dataclasses.replace(pool.spec, endpoints=spec.endpoints)
            if pool.source is not None and spec.endpoints != pool.spec.endpoints:
                pool.source.set_endpoints(spec.endpoints)
            pool.spec = spec
            pools[spec.key] = pool
        for key, gone in self._pools.items():
            if key not in pools:
                log.info("pool_removed", extra=fields(pool=key, busy=gone.dispatcher.busy))
                task = asyncio.get_running_loop().create_task(self._retire(gone))
                self._retiring.add(task)
                task.add_done_callback(self._retiring.discard)
        self._pools = pools
        self._errors = errors
        self.last_error = "; ".join(errors)  # "" once every pool's settings are good
        self._table = model_table([p.spec for p in pools.values()])
        self._synced = True
        self._changed.set()
        self._changed = asyncio.Event()

    async def _retire(self, pool: Pool) -> None:
        """Stops a pool that is gone once its requests have finished (bounded)."""
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.retire_grace_s):
                    for _ in itertools.count():  # polled: the dispatcher keeps counts only
                        if pool.dispatcher.busy == 0:
                            break
                        await asyncio.sleep(RETIRE_POLL_S)
        finally:
            await pool.stop()
        if pool.spec.name not in {p.spec.name for p in self._pools.values()}:
            self.metrics.forget_pool(pool.spec.name)
        log.info("pool_stopped", extra=fields(pool=pool.key))

    async def wait_changed(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, timeout_s)):
                await self._changed.wait()

    async def wait_ready(self, min_endpoints: int = 1, timeout_s: float = 30.0) -> None:
        """Single pool: until ``min_endpoints`` are routable. Many pools: until every pool
        reported has ``min_endpoints`` routable."""
        if self._single is not None:
            await self._single.embedded.wait_ready(min_endpoints, timeout_s)
            return
        async with asyncio.timeout(timeout_s):
            while not self._synced:
                await self._changed.wait()
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout_s
        for pool in self.pools():
            await pool.embedded.wait_ready(min_endpoints, max(0.0, until - loop.time()))

    def begin_drain(self) -> None:
        self._draining = True
        for pool in self._pools.values():
            pool.dispatcher.begin_drain()

    @property
    def draining(self) -> bool:
        return self._draining

    async def stop(self) -> None:
        task, self.task = self.task, None
        if task is not None and self._single is None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for t in list(self._retiring):
            t.cancel()
        for t in list(self._retiring):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.stop()
