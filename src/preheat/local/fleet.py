"""Several pools behind one router: ``preheat up -f a.yaml -f b.yaml``.

Each pool runs as it does alone (:class:`~preheat.local.runtime.LocalPool`: its workers,
autoscaler and control loop, its run record in ``RUN_DIR/POOL/``), but none runs a router:
each publishes its endpoints to the :class:`SharedRouter`, which keeps one ``preheat router
--discovery static:RUN_DIR/endpoints.yaml`` in front of them all. That file is the router's
several-pool form (``pools:``, one entry a pool: its name, namespace, model, routing
settings and endpoints), rewritten atomically whenever any pool's set changes; the router
re-reads it and sends each request to the pool serving its ``model``.

:func:`model_clashes` (pure) refuses two pools that serve the same model before anything
starts. The router is supervised like a pool's own: restarted when it crashes, and the
whole run stops with its log's tail when it rejects its flags or keeps crashing.
Shutdown: the router drains (new requests get 503 with Retry-After), every pool drains its
workers, then the router stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from preheat.api.poolfile import PoolFile
from preheat.local.listening import RouterProbe
from preheat.local.runtime import (
    BAD_FLAGS_EXIT,
    DISCOVERY_FILE,
    LOG_DIR,
    MAX_ROUTER_CRASHES,
    ROUTER_DRAIN_MARGIN_S,
    ROUTER_STOP_MARGIN_S,
    STATE_FILE,
    LocalPool,
    UpOptions,
    atomic_write,
    exit_text,
    local_config,
    log_tail,
    router_tenant_args,
    router_tokenizer_args,
    routing_settings,
)
from preheat.process.children import Child, preheat_argv, spawn
from preheat.process.logs import fields
from preheat.process.ports import ReservedPort

log = logging.getLogger("preheat.local")


def model_clashes(pools: Sequence[PoolFile]) -> list[str]:
    """Why ``pools`` cannot share one router: a pool name given twice (each pool has its
    folder in the run folder), or a model served by two pools (the router could not tell
    which one a request means). Empty: they can. Pure."""
    problems = []
    by_name: dict[str, str] = {}
    by_model: dict[str, str] = {}
    for p in pools:
        if p.name in by_name:
            problems.append(f"pool {p.name!r} is in both {by_name[p.name]} and {p.path}")
            continue
        by_name[p.name] = p.path
        model = p.config.model.name
        if model in by_model:
            problems.append(
                f"model {model!r} is served by two pools ({by_model[model]} and "
                f"{p.name} in {p.path}): a request names a model, so each model needs one pool"
            )
        by_model.setdefault(model, f"{p.name} in {p.path}")
    return problems


@dataclass(frozen=True)
class _PoolEntry:
    name: str
    namespace: str
    model: str
    routing: dict[str, Any]


class SharedRouter:
    """One router in front of several pools, and its discovery file (the several-pool
    form). The pools publish their endpoints to it (:meth:`publish`)."""

    def __init__(self, pools: Sequence[PoolFile], options: UpOptions) -> None:
        self.out = options.out
        self.options = options
        self._ports: list[ReservedPort] = []
        self.grpc_port = options.router_grpc_port or self._reserve()
        self.http_port = options.router_http_port or self._reserve()
        # one router follows every pool's workers' WatchCache: they share its cache token
        self.cache_token = secrets.token_urlsafe(32)
        configs = [local_config(p.config, options.engine) for p in pools]
        self.entries = [
            _PoolEntry(p.name, p.namespace, c.model.name, routing_settings(c))
            for p, c in zip(pools, configs, strict=True)
        ]
        self.endpoints: dict[str, list[dict[str, Any]]] = {e.name: [] for e in self.entries}
        self.tokenizer = _common([router_tokenizer_args(c, options.router_args) for c in configs])
        self.tenant_args = router_tenant_args(configs, options.router_args)
        self.child: Child | None = None
        self.restarts = 0
        self._crashes: list[float] = []
        self._text: str | None = None

    def _reserve(self) -> int:
        reserved = ReservedPort()
        self._ports.append(reserved)
        return reserved.port

    def release_ports(self) -> None:
        for reserved in self._ports:
            reserved.release()
        self._ports.clear()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def publish(self, pool: str, endpoints: list[dict[str, Any]]) -> None:
        self.endpoints[pool] = endpoints
        self.write()

    def document(self) -> dict[str, Any]:
        """The discovery file's content (several-pool form)."""
        pools = []
        for e in self.entries:
            item: dict[str, Any] = {"pool": e.name, "model": e.model}
            if e.namespace:
                item["namespace"] = e.namespace
            item["routing"] = dict(e.routing)
            item["endpoints"] = self.endpoints[e.name]
            pools.append(item)
        return {"pools": pools}

    def write(self, *, force: bool = False) -> None:
        """The discovery file, atomically, when it changed (or ``force``)."""
        text = json.dumps(self.document(), indent=1) + "\n"
        if force or text != self._text:
            atomic_write(self.out / DISCOVERY_FILE, text)
            self._text = text

    async def start(self) -> None:
        argv = preheat_argv(
            "router",
            "--discovery",
            f"static:{self.out / DISCOVERY_FILE}",
            "--host",
            "127.0.0.1",
            "--grpc-port",
            str(self.grpc_port),
            "--http-port",
            str(self.http_port),
            "--log-format",
            "json",
            "--drain-grace-s",
            f"{self.options.drain_grace_s + ROUTER_DRAIN_MARGIN_S:g}",
            *self.tokenizer,
            *self.tenant_args,
            *self.options.router_args,
        )
        self.child = await spawn(
            "router",
            argv,
            self.out / LOG_DIR / "router.log",
            now=0.0,
            env={"PREHEAT_CACHE_TOKEN": self.cache_token, "PREHEAT_WORKER_CACHE_TOKEN_FILE": ""},
        )
        log.info("router_started", extra=fields(pid=self.child.pid, grpc=self.address))

    async def supervise(self, now: float) -> str:
        """Restarts a router that exited; why the run must stop instead ("" if not)."""
        if self.child is None or self.child.alive:
            return ""
        code = self.child.returncode or 0
        log.warning("router_crashed", extra=fields(pid=self.child.pid, exit=exit_text(code)))
        self._crashes = [t for t in self._crashes if now - t < 60.0] + [now]
        if code == BAD_FLAGS_EXIT or len(self._crashes) > MAX_ROUTER_CRASHES:
            why = "rejected its flags" if code == BAD_FLAGS_EXIT else "keeps crashing"
            return f"the router {why} (exit {code}): {log_tail(self.child.log_path)}"
        self.restarts += 1
        await self.start()
        log.info("router_restarted", extra=fields(restarts=self.restarts, pid=self.child.pid))
        return ""


class LocalFleet:
    """Several :class:`LocalPool` behind one :class:`SharedRouter`, run until :meth:`stop`."""

    def __init__(self, pools: Sequence[LocalPool], router: SharedRouter) -> None:
        self.pools = list(pools)
        self.router = router
        self.out = router.out
        self.options = router.options
        self.fatal = ""
        self._stop = asyncio.Event()
        self.t0_unix = time.time()
        self._state: str | None = None
        self._probe = RouterProbe(router.http_port)

    @property
    def router_address(self) -> str:
        return self.router.address

    def stop(self) -> None:
        """Drain every pool and stop; a second call kills every child at once."""
        again = self._stop.is_set()
        self._stop.set()
        for p in self.pools:
            p.stop()
        if again and self.router.child is not None:
            self.router.child.send(signal.SIGKILL)

    async def run(self) -> int:
        """Runs until stopped (or a pool or the router cannot go on); 0 after a clean drain."""
        tasks: list[asyncio.Task[int]] = []
        http = aiohttp.ClientSession()
        try:
            self.router.write(force=True)
            await self.router.start()
            tasks = [asyncio.create_task(p.run()) for p in self.pools]
            while not self._stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.options.tick_s)
                self.fatal = self.fatal or await self.router.supervise(time.monotonic())
                for p, t in zip(self.pools, tasks, strict=True):
                    if t.done() and not self.fatal:
                        self.fatal = p.fatal or f"pool {p.pool.name} stopped on its own"
                await self._probe.check(http, self.router.child)
                self._write_state()
                if self.fatal:
                    self.stop()
        finally:
            try:
                await self._shutdown(tasks)
            finally:
                await http.close()
        return 2 if self.fatal else 0

    async def _shutdown(self, tasks: list[asyncio.Task[int]]) -> None:
        self._stop.set()
        child = self.router.child
        if child is not None:
            # new requests get 503 + Retry-After at once; those in flight finish
            child.send(signal.SIGTERM)
        for p in self.pools:
            if not p.stopping:
                p.stop()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if child is not None:
            await child.stop(self.options.drain_grace_s + ROUTER_STOP_MARGIN_S)
        self.router.release_ports()
        self._write_state(stopped=True)

    def _write_state(self, *, stopped: bool = False) -> None:
        child = self.router.child
        state = {
            "pid": os.getpid(),
            "router": {
                "grpc": self.router.address,
                "http": f"http://127.0.0.1:{self.router.http_port}",
                "pid": child.pid if child is not None else 0,
                "restarts": self.router.restarts,
            },
            "pools": {p.pool.name: str(p.out) for p in self.pools},
            "ready": (not stopped)
            and self._probe.answered(child)
            and all(p.ready() for p in self.pools),
            "stopped": stopped,
            "t0_unix": self.t0_unix,
        }
        text = json.dumps(state, indent=1) + "\n"
        if text != self._state:
            atomic_write(self.out / STATE_FILE, text)
            self._state = text


def _common(args: Sequence[list[str]]) -> list[str]:
    """The router's tokenizer flags when every pool asks for the same ones, else none."""
    first = args[0] if args else []
    if all(a == first for a in args):
        return first
    log.warning(
        "router_tokenizer_default",
        extra=fields(reason="the pools' models want different tokenizers; the router's default"),
    )
    return []


def pool_out(out: Path, pool: PoolFile) -> Path:
    """A pool's own run folder inside the several-pool run folder."""
    return out / pool.name


__all__ = ["LocalFleet", "SharedRouter", "model_clashes", "pool_out"]
