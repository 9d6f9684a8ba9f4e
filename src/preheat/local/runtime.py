"""The local runtime: an InferencePool as local processes, reconciled like the operator.

One loop, every ``tick_s``:

1. **observe**: each worker's ``Status`` over gRPC (its lifecycle state and load) and
   whether its process is still running;
2. **supervise**: a worker that exited without being told to is recorded (``crash``) and
   restarted (``restart``) under the same name, with back-off if it keeps crashing; the
   router likewise;
3. **autoscale** (every ``interval_s``): the pool's signals from the metric source
   (:class:`~preheat.autoscaler.scrape.DirectScrapeSource` on the warm workers' /metrics,
   or :class:`~preheat.autoscaler.prometheus.PrometheusSource`) into
   :func:`preheat.core.control.step` (``core.autoscaling.decide``) for the active target;
4. **reconcile**: :func:`preheat.core.control.step` again, without signals
   (``core.control.roles.assign_roles``), and :func:`preheat.local.workers.actions` into
   actions: Promote/Demote over gRPC (:func:`preheat.wire.workerctl.set_role`), drain
   (out of the router's set, then SIGTERM: the worker finishes its streams and exits),
   start new workers (they come up as standby);
5. **publish**: the router's static discovery file (rewritten atomically when it
   changes), the state file, the run record (events, replicas by state), the view.

Shutdown (SIGINT, SIGTERM): nothing routable in the discovery file, SIGTERM to every worker
(each drains within ``drain_grace_s``, SIGKILL after), then the router.
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
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import yaml
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from preheat.api.poolfile import PoolFile
from preheat.api.traffic import traffic_mapping
from preheat.autoscaler.describe import describe_signals
from preheat.autoscaler.prometheus import PrometheusSource
from preheat.autoscaler.scrape import DirectScrapeSource
from preheat.autoscaler.source import MetricSource
from preheat.core.autoscaling import Decision, Direction, PolicyTuning, ReplicaCounts, Signals
from preheat.core.autoscaling.standby import wanted
from preheat.core.control import ControlState, signal_query, step
from preheat.core.manifests import BuildOptions, startup_failure_threshold, worker_args
from preheat.core.pool import EngineConfig, PoolConfig, Signal
from preheat.local import workers
from preheat.local.listening import RouterProbe
from preheat.local.stats import LiveStats, TrafficView, scrape_into
from preheat.process.children import Child, preheat_argv, spawn
from preheat.process.logs import fields
from preheat.process.poolmetrics import PoolGauges
from preheat.process.ports import ReservedPort
from preheat.report.record import ReplicaSample, RunMeta, RunWriter, ScaleEvent, read_meta
from preheat.wire import workerctl

log = logging.getLogger("preheat.local")

STATE_FILE = "up.json"
DISCOVERY_FILE = "endpoints.yaml"
ROUTING_FILE = "routing.yaml"
PROMETHEUS_TARGETS_FILE = "prometheus-targets.json"
LOG_DIR = "logs"
_ROUTER_PORTS = "<router>"  # the owner of the router's reserved ports (workers are w-N)


@dataclass(frozen=True)
class UpOptions:
    """How ``preheat up`` runs a pool (the pool itself is in the :class:`PoolFile`)."""

    out: Path  # run folder: record, logs, discovery file, state file
    engine: str = "sim"  # the workers' engine: sim, or vllm when asked
    host: str = "127.0.0.1"
    router_grpc_port: int = 0  # 0: a free port
    router_http_port: int = 0
    interval_s: float = 2.0  # autoscaler evaluation period
    tick_s: float = 0.5  # observe/reconcile period
    drain_grace_s: float = 10.0  # a draining worker's in-flight streams get this long
    status_timeout_s: float = 1.0
    worker_args: tuple[str, ...] = ()  # extra `preheat worker` flags for every worker
    router_args: tuple[str, ...] = ()  # extra `preheat router` flags
    prometheus_url: str = ""  # "": direct scrape
    stale_after_s: float = 30.0
    restart_backoff_s: tuple[float, ...] = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0)
    sample_every_s: float = 1.0  # replicas.jsonl cadence
    startup_budget_s: float = 0.0  # a worker not warm this long is restarted; 0: the operator's
    command: str = ""  # the command line (for the record)
    max_starting: int = 2  # workers starting (not warm yet) at once; 0: no bound
    max_workers: int = 0  # worker processes alive at once, draining ones included; 0: no bound
    # a demoted worker leaves the router's set this long before its Demote RPC (the router
    # re-reads the discovery file every second)
    handoff_s: float = 1.5


@dataclass
class LocalWorker:
    """One worker process and what the runtime knows of it."""

    name: str
    grpc_port: int
    http_port: int
    child: Child
    state: str = workers.STARTING
    leaving: bool = False  # drained or stopping: out of the router's set
    answered: bool = False  # its Status answered at least once
    in_flight: int = 0
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    cached_blocks: int = 0
    sessions: int = 0
    restarts: int = 0
    ready_seen: bool = False
    ready_after: float | None = None  # seconds from its start to first seen warm
    control_port: int = 0  # WorkerControl's Promote/Demote/Drain, with the run's token
    role_error: str = ""
    killed_because: str = ""  # why the runtime SIGKILLed it (not warm in time)
    demote_at: float | None = None  # out of the router's set; Demote RPC due at this time

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def control_address(self) -> str:
        return f"127.0.0.1:{self.control_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/metrics"

    def view(self) -> workers.WorkerView:
        return workers.WorkerView(
            name=self.name,
            # a demotion under way counts as done: it is out of the router's set already
            state=workers.STANDBY if self.demote_at is not None else self.state,
            leaving=self.leaving,
            in_flight=self.in_flight,
            cached_blocks=self.cached_blocks,
            sessions=self.sessions,
            started_at=self.child.started_at,
            ready_after=self.ready_after,
        )


@dataclass(frozen=True)
class EventLine:
    """A recorded event as the view shows it."""

    t_s: float
    kind: str
    worker: str
    reason: str
    pool: str = ""


@dataclass(frozen=True)
class PoolSnapshot:
    """Everything the view shows, at one tick."""

    pool: str
    engine: str
    t_s: float
    desired: int
    standby_wanted: int
    counts: ReplicaCounts
    workers: tuple[dict[str, Any], ...]
    traffic: TrafficView
    signals: str
    decision: str
    source: str
    router: str
    router_http: str
    out: str
    events: tuple[EventLine, ...]
    stopping: bool


class View(Protocol):
    def update(self, snapshot: PoolSnapshot) -> None: ...

    def event(self, line: EventLine) -> None: ...


class RouterHost(Protocol):
    """A router in front of several pools (:class:`preheat.local.fleet.SharedRouter`): a
    pool it hosts publishes its endpoints to it instead of running a router of its own."""

    @property
    def grpc_port(self) -> int: ...

    @property
    def http_port(self) -> int: ...

    @property
    def cache_token(self) -> str: ...

    def publish(self, pool: str, endpoints: list[dict[str, Any]]) -> None: ...


class LocalPool:
    """Runs one pool until :meth:`stop` (or a signal) and drains it. With ``host``, the pool
    is one of several behind a router it does not run: it publishes its endpoints to
    ``host``, and reads only its own series from the router's metrics."""

    def __init__(
        self,
        pool: PoolFile,
        options: UpOptions,
        view: View,
        *,
        clock: Callable[[], float] = time.monotonic,
        host: RouterHost | None = None,
    ) -> None:
        self.pool = pool
        self.config: PoolConfig = local_config(pool.config, options.engine)
        self.options = options
        self.view = view
        self.clock = clock
        self.out = options.out
        self.workers: dict[str, LocalWorker] = {}
        self.router: Child | None = None
        # Ports are reserved, not picked and let go: each stays held (see preheat.process.ports)
        # while its child may bind it, so nothing else on the machine can take it first.
        self._ports: dict[str, list[ReservedPort]] = {}
        self.host = host
        # the control plane's own /metrics (preheat_pool_*, as the operator serves them):
        # listed in the Prometheus targets with the workers and the router
        self.registry = CollectorRegistry()
        self.pool_gauges = PoolGauges(self.registry)
        self.control_metrics_port = 0
        self._control_runner: web.AppRunner | None = None
        if host is not None:
            self.router_grpc, self.router_http = host.grpc_port, host.http_port
        else:
            self.router_grpc = options.router_grpc_port or self._reserve_port(_ROUTER_PORTS)
            self.router_http = options.router_http_port or self._reserve_port(_ROUTER_PORTS)
        # this run's control token: its workers get it in their environment, and only
        # this runtime can change their role (Promote/Demote/Drain on the control port)
        self.control_token = secrets.token_urlsafe(32)
        # and its cache token: only its router may follow the workers' WatchCache
        self.cache_token = secrets.token_urlsafe(32) if host is None else host.cache_token
        self.desired = self.config.replicas.desired
        # the operator's startup probe budget for this engine (load + warm-up, seconds)
        self.startup_budget_s = float(
            options.startup_budget_s or startup_failure_threshold(self.config, BuildOptions(), 1)
        )
        self.control = ControlState()
        self.tuning = PolicyTuning(stale_after_s=options.stale_after_s)
        self.decision: Decision | None = None
        self.signals = Signals()
        self.source: MetricSource | None = None
        self.source_name = ""
        self.stats = LiveStats(window_s=self.config.autoscaling.window_s)
        self.events: deque[EventLine] = deque(maxlen=12)
        self.pids: list[int] = []
        self.started = clock()
        self.t0_unix = time.time()
        self._stop = asyncio.Event()
        self.fatal = ""  # why the pool cannot run (a worker rejected its flags): exit 2
        self._counter = 0
        self._crashes: dict[str, list[float]] = {}
        self._restart_at: dict[str, tuple[float, int]] = {}  # name -> (when, restarts)
        self._router_restarts = 0
        self._router_crashes: list[float] = []
        self._discovery: str | None = None
        self._demote_reason: dict[str, str] = {}
        self._state: str | None = None
        self._targets: str | None = None
        self._next_decide = 0.0
        self._next_sample = 0.0
        self._http: aiohttp.ClientSession | None = None
        # up.json's `ready` waits for the router to listen (see preheat.local.listening)
        self._router_probe = RouterProbe(self.router_http)
        self.writer = RunWriter(
            self.out,
            RunMeta(
                name=self.out.name,
                started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.t0_unix)),
                pool=f"{pool.name} ({pool.path})",
                target=f"127.0.0.1:{self.router_grpc}",
                ttft_objective_ms=_ttft_objective(self.config),
                command=options.command,
                extra={"engine": options.engine, "producer": "preheat up"},
                t0_unix=self.t0_unix,
            ),
            parts=("events.jsonl", "replicas.jsonl"),
        )

    # --- public --------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop: drain and exit (the running tick is cancelled at once). Called again while
        stopping (a second Ctrl-C): SIGKILL every child now."""
        if self._stop.is_set():
            self._kill_all("asked to stop again")
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def ready(self) -> bool:
        """At least its desired count of active workers (one at least) is serving, and its
        router, where it runs one, has answered on its HTTP port."""
        router_up = self.host is not None or self._router_probe.answered(self.router)
        return router_up and workers.counts(self._views()).active >= max(self.desired, 1)

    def _kill_all(self, why: str) -> None:
        children = [w.child for w in self.workers.values()]
        if self.router is not None:
            children.append(self.router)
        alive = [c for c in children if c.alive]
        if alive:
            log.warning("killing_children", extra=fields(reason=why, count=len(alive)))
        for c in alive:
            c.send(signal.SIGKILL)

    def t_s(self) -> float:
        return round(self.clock() - self.started, 3)

    async def run(self) -> int:
        """Runs until stopped; returns 0 after a clean drain."""
        self._http = aiohttp.ClientSession()
        try:
            if self.options.prometheus_url and self.host is None:
                await self._serve_control_metrics()
            if self.host is None:
                self._write_routing()
            self._write_discovery(force=True)
            if self.host is not None or await self._unless_stopped(self._start_router()):
                self.source = self._make_source()
                while await self._unless_stopped(self._tick()):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), self.options.tick_s)
        finally:
            try:
                await self._shutdown()
            finally:
                self._release_ports(keep=lambda _owner: False)
        return 2 if self.fatal else 0

    async def _unless_stopped(self, step: Coroutine[Any, Any, None]) -> bool:
        """Runs ``step`` unless a stop comes first: then ``step`` is cancelled (a status
        poll, a role RPC, a start under way: a child being spawned is killed) and False
        comes back at once. True: ``step`` finished and no stop was asked."""
        if self._stop.is_set():
            step.close()
            return False
        task = asyncio.ensure_future(step)
        stopper = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if not task.cancelled():
            task.result()  # a step's own failure is not swallowed
        return not self._stop.is_set()

    # --- the loop ------------------------------------------------------------------------

    async def _tick(self) -> None:
        now = self.clock()
        await self._observe()
        await self._supervise(now)
        if now >= self._next_decide:
            self._next_decide = now + self.options.interval_s
            await self._autoscale(now)
        await self._reconcile(now)
        self._write_discovery()
        if self.host is None and self._http is not None:
            await self._router_probe.check(self._http, self.router)
        self._write_state()
        if self.options.prometheus_url:
            self.write_prometheus_targets()
        await self._scrape_view(now)
        if now >= self._next_sample:
            self._next_sample = now + self.options.sample_every_s
            self._sample()
        self.view.update(self.snapshot())

    async def _observe(self) -> None:
        live = [w for w in self.workers.values() if w.child.alive]
        answers = await asyncio.gather(
            *(workerctl.status(w.address, timeout_s=self.options.status_timeout_s) for w in live),
            return_exceptions=True,
        )
        for w, answer in zip(live, answers, strict=True):
            if isinstance(answer, BaseException):
                if w.answered and w.state not in (workers.DRAINING, workers.STOPPED):
                    w.state = workers.UNREACHABLE
                continue
            w.answered = True
            w.state = workerctl.state_name(answer.state)
            if w.state in (workers.DRAINING, workers.STOPPED) and not w.leaving:
                # drained from outside (SIGTERM, a Drain RPC): on its way out, as if told to
                w.leaving = True
                w.demote_at = None
                self._event("drain", w.name, f"pid {w.child.pid} draining: stopped from outside")
            w.in_flight = answer.in_flight
            w.running = answer.num_running
            w.waiting = answer.num_waiting
            w.kv_usage = answer.kv_cache_usage
            w.cached_blocks = answer.cached_blocks
            w.sessions = answer.sessions
            if w.state in workers.WARM and not w.ready_seen:
                w.ready_seen = True
                w.ready_after = max(0.0, self.clock() - w.child.started_at)
                self._event("ready", w.name, f"warm as {w.state} (pid {w.child.pid})")

    async def _supervise(self, now: float) -> None:
        for w in list(self.workers.values()):
            code = w.child.returncode
            cold = w.state in workers.COLD and not w.ready_seen and not w.leaving
            late = now - w.child.started_at > self.startup_budget_s
            if code is None and cold and late and not w.killed_because:
                # as a startup probe would: a worker not warm in time is restarted
                w.killed_because = f"not warm {self.startup_budget_s:g} s after start"
                w.child.send(signal.SIGKILL)
            if code is None:
                continue
            del self.workers[w.name]
            if w.leaving:
                self._event("stop", w.name, f"exited ({code}) after draining")
                continue
            kind = workers.exit_kind(code, told_to_stop=False, killed_because=w.killed_because)
            if kind == workers.STOP:
                # stopped from outside (SIGTERM, a Drain RPC): it drained and exited; not a
                # crash, and not restarted under its name: the reconcile replaces it
                self._event(
                    "stop", w.name, f"pid {w.child.pid} {exit_text(code)}: stopped from outside"
                )
                continue
            how = exit_text(code)
            if w.killed_because:
                how = f"{how}: {w.killed_because}"
            self._event("crash", w.name, f"pid {w.child.pid} {how} while {w.state}")
            if code == BAD_FLAGS_EXIT and not w.answered:
                # a worker that rejects its flags will reject them again: say why and stop
                tail = log_tail(w.child.log_path)
                self.fatal = self.fatal or f"worker {w.name} could not start (exit {code}): {tail}"
                self._stop.set()
                continue
            recent = [t for t in self._crashes.get(w.name, []) if now - t < 60.0]
            recent.append(now)
            self._crashes[w.name] = recent
            steps = self.options.restart_backoff_s
            delay = steps[min(len(recent) - 1, len(steps) - 1)]
            self._restart_at[w.name] = (now + delay, w.restarts + 1)
        for name, (when, restarts) in list(self._restart_at.items()):
            if now >= when and not self._stop.is_set() and self._starts_allowed(1):
                del self._restart_at[name]
                w = await self._start_worker(name, restarts=restarts)
                self._event("restart", name, f"restart #{restarts} as pid {w.child.pid}")
        if self.router is not None and not self.router.alive and not self._stop.is_set():
            code = self.router.returncode or 0
            self._event("crash", "router", f"router pid {self.router.pid} {exit_text(code)}")
            self._router_crashes = [t for t in self._router_crashes if now - t < 60.0] + [now]
            if code == BAD_FLAGS_EXIT or len(self._router_crashes) > MAX_ROUTER_CRASHES:
                why = "rejected its flags" if code == BAD_FLAGS_EXIT else "keeps crashing"
                tail = log_tail(self.router.log_path)
                self.fatal = self.fatal or f"the router {why} (exit {code}): {tail}"
                self._stop.set()
                return
            self._router_restarts += 1
            await self._start_router()
            self._event("restart", "router", f"restart #{self._router_restarts}")

    async def _autoscale(self, now: float) -> None:
        """An evaluation: signals -> :func:`preheat.core.control.step` -> the new target
        (the roles follow in :meth:`_reconcile`, the same tick)."""
        assert self.source is not None
        if self.config.autoscaling.objectives:
            self.signals = await self.source.read(signal_query(self.config.autoscaling))
        obs = workers.observe(now, self.config, self.desired, self._views(), self.signals)
        decision, _, self.control = step(obs, self.control, tuning=self.tuning)
        assert decision is not None
        self.decision = decision
        if decision.active != self.desired:
            up = decision.direction is Direction.UP or decision.active > self.desired
            self._event(
                "scale_up" if up else "scale_down",
                "",
                decision.reason,
                from_replicas=self.desired,
                to_replicas=decision.active,
            )
            self.desired = decision.active

    def _views(self) -> list[workers.WorkerView]:
        views = [w.view() for w in self.workers.values()]
        # a crashed worker waiting for its restart still holds its slot (as a pod would)
        views += [
            workers.WorkerView(name=n, state=workers.STARTING, started_at=when)
            for n, (when, _) in self._restart_at.items()
        ]
        return views

    def _standby_wanted(self) -> int:
        return wanted(self.config.replicas, self.desired)

    async def _reconcile(self, now: float) -> None:
        """Roles: :func:`preheat.core.control.step` (no signals) -> actions on the workers."""
        if self._stop.is_set():
            return
        views = self._views()
        _, role_plan, _ = step(workers.observe(now, self.config, self.desired, views), self.control)
        actions = workers.actions(views, role_plan)
        for name in actions.drain:
            await self._drain(name, actions.plan.reason)
        for name in actions.demote:
            # out of the router's set first; the Demote RPC once the router has re-read it
            self.workers[name].demote_at = now + self.options.handoff_s
            self._demote_reason[name] = actions.plan.reason
        if actions.demote:
            self._write_discovery()
        due = [
            n
            for n, w in self.workers.items()
            if w.demote_at is not None and now >= w.demote_at and not w.leaving
        ]
        jobs = [(n, "active") for n in actions.promote] + [(n, "standby") for n in due]
        results = await asyncio.gather(
            *(self._set_role(n, role) for n, role in jobs), return_exceptions=True
        )
        for (name, role), result in zip(jobs, results, strict=True):
            if isinstance(result, BaseException):
                w = self.workers.get(name)
                if w is not None and w.role_error != str(result):
                    w.role_error = str(result)
                    log.warning(
                        "worker_role_failed", extra=fields(worker=name, role=role, error=result)
                    )
                continue
            kind = "promote" if role == "active" else "demote"
            was = "standby" if role == "active" else "active"
            why = self._demote_reason.pop(name, "") if role == "standby" else ""
            self._event(kind, name, f"{was} -> {role}: {why or actions.plan.reason}")
        for _ in range(self._starts_allowed(actions.start)):
            if self._stop.is_set():
                return
            w = await self._start_worker(self._new_name())
            self._event("start", w.name, f"pid {w.child.pid}: {actions.plan.reason}")

    def _starts_allowed(self, want: int) -> int:
        """``want`` bounded by --max-starting and the worker process cap."""
        alive = [w for w in self.workers.values() if w.child.alive]
        starting = sum(1 for w in alive if w.state in workers.COLD and not w.leaving)
        return workers.starts_allowed(
            want,
            starting=starting,
            alive=len(alive),
            max_starting=self.options.max_starting,
            max_workers=self.options.max_workers,
        )

    async def _set_role(self, name: str, role: str) -> None:
        w = self.workers[name]
        if role == "active":
            w.demote_at = None  # promoted again before its Demote went out
        await workerctl.set_role(
            w.control_address,
            role,
            timeout_s=self.options.status_timeout_s * 2,
            token=self.control_token,
        )
        w.state = role
        w.demote_at = None
        w.role_error = ""
        self._write_discovery()

    async def _drain(self, name: str, reason: str) -> None:
        if name in self._restart_at:  # not running: just do not restart it
            del self._restart_at[name]
            self._event("stop", name, f"not restarted: {reason}")
            return
        w = self.workers.get(name)
        if w is None or w.leaving:
            return
        w.leaving = True
        self._write_discovery()  # out of the router's set before it stops taking work
        w.child.send(signal.SIGTERM)
        self._event("drain", name, f"SIGTERM pid {w.child.pid}: {reason}")

    # --- processes -----------------------------------------------------------------------

    def _new_name(self) -> str:
        # behind a shared router, a worker's name says its pool (the router's ids stay unique)
        prefix = "w" if self.host is None else f"{self.pool.name}-w"
        while True:
            self._counter += 1
            name = f"{prefix}-{self._counter}"
            if name not in self.workers and name not in self._restart_at:
                return name

    def _reserve_port(self, owner: str) -> int:
        reserved = ReservedPort()
        self._ports.setdefault(owner, []).append(reserved)
        return reserved.port

    def _release_ports(self, keep: Callable[[str], bool]) -> None:
        for owner in [o for o in self._ports if not keep(o)]:
            for reserved in self._ports.pop(owner):
                reserved.release()

    async def _start_worker(self, name: str, *, restarts: int = 0) -> LocalWorker:
        # the ports of workers that exited go back (a restart gets new ones), then three new
        self._release_ports(keep=lambda owner: owner == _ROUTER_PORTS or owner in self.workers)
        grpc_port, http_port, control_port = (self._reserve_port(name) for _ in range(3))
        argv = worker_argv(
            self.config,
            name,
            grpc_port=grpc_port,
            http_port=http_port,
            control_port=control_port,
            drain_grace_s=self.options.drain_grace_s,
            extra=self.options.worker_args,
        )
        child = await spawn(
            name,
            argv,
            self.out / LOG_DIR / f"{name}.log",
            now=self.clock(),
            env={
                "PREHEAT_POOL": self.pool.name,
                "PREHEAT_CONTROL_TOKEN": self.control_token,
                "PREHEAT_CONTROL_TOKEN_FILE": "",
                "PREHEAT_CACHE_TOKEN": self.cache_token,
                "PREHEAT_CACHE_TOKEN_FILE": "",
            },
        )
        self.pids.append(child.pid)
        w = LocalWorker(
            name, grpc_port, http_port, child, restarts=restarts, control_port=control_port
        )
        self.workers[name] = w
        log.info(
            "worker_started",
            extra=fields(worker=name, pid=child.pid, grpc=w.address, restarts=restarts),
        )
        return w

    async def _start_router(self) -> None:
        argv = preheat_argv(
            "router",
            "--discovery",
            f"static:{self.out / DISCOVERY_FILE}",
            "--pool",
            self.pool.name,
            "--model",
            self.config.model.name,
            "--routing-config",
            str(self.out / ROUTING_FILE),
            "--host",
            "127.0.0.1",
            "--grpc-port",
            str(self.router_grpc),
            "--http-port",
            str(self.router_http),
            "--log-format",
            "json",
            "--drain-grace-s",
            f"{self.options.drain_grace_s + ROUTER_DRAIN_MARGIN_S:g}",
            *router_tokenizer_args(self.config, self.options.router_args),
            *router_tenant_args([self.config], self.options.router_args),
            *self.options.router_args,
        )
        self.router = await spawn(
            "router",
            argv,
            self.out / LOG_DIR / "router.log",
            now=0.0,
            env={"PREHEAT_CACHE_TOKEN": self.cache_token, "PREHEAT_WORKER_CACHE_TOKEN_FILE": ""},
        )
        self.pids.append(self.router.pid)
        log.info("router_started", extra=fields(pid=self.router.pid, grpc=self.router_address))

    @property
    def router_address(self) -> str:
        return f"127.0.0.1:{self.router_grpc}"

    def _make_source(self) -> MetricSource:
        url = self.options.prometheus_url
        if url:
            self.source_name = f"prometheus {url}"
            pool = f'pool="{self.pool.name}"'
            assert self.host is None, "several pools behind one router: no --prometheus"
            return PrometheusSource(
                url,
                selector=f'{pool},component="worker"',
                router_selector=f'{pool},component="router"',
                clock=self.clock,
                stale_after_s=self.options.stale_after_s,
            )
        self.source_name = "direct scrape"
        return DirectScrapeSource(
            self._metric_targets,
            clock=self.clock,
            stale_after_s=self.options.stale_after_s,
            routers=lambda: [f"http://127.0.0.1:{self.router_http}"],
            pool=None if self.host is None else self.pool.name,
        )

    def _metric_targets(self) -> list[str]:
        return sorted(
            f"http://127.0.0.1:{w.http_port}"
            for w in self.workers.values()
            if w.state in workers.WARM and not w.leaving and w.child.alive
        )

    async def _shutdown(self) -> None:
        self._event("shutdown", "", "stopping: draining every worker, then the router")
        for w in self.workers.values():
            w.leaving = True
        self._restart_at.clear()
        self._write_discovery(force=True)
        if self.router is not None:
            # the router drains: new requests get 503 / UNAVAILABLE with Retry-After at once
            # while those in flight finish on the draining workers
            self.router.send(signal.SIGTERM)
        grace = self.options.drain_grace_s + 5.0
        stops = [w.child.stop(grace) for w in self.workers.values()]
        codes = await asyncio.gather(*stops, return_exceptions=True)
        for w, code in zip(list(self.workers.values()), codes, strict=True):
            self._event("stop", w.name, f"exited ({code}) at shutdown")
        self.workers.clear()
        if self.router is not None:
            await self.router.stop(self.options.drain_grace_s + ROUTER_STOP_MARGIN_S)
        if self.source is not None:
            with contextlib.suppress(Exception):
                await self.source.close()
        if self._http is not None:
            await self._http.close()
        self._sample()
        if self._control_runner is not None:
            await self._control_runner.cleanup()
        self._write_state(stopped=True)
        # `preheat load` may have joined this folder and added to meta.json: keep its fields
        joined = read_meta(self.out)
        if joined is not None and joined.t0_unix == self.t0_unix:
            self.writer.meta = joined
        self.writer.meta.duration_s = max(self.writer.meta.duration_s, self.t_s())
        self.writer.close()
        self.view.update(self.snapshot(stopping=True))

    # --- publishing ----------------------------------------------------------------------

    def _write_routing(self) -> None:
        text = yaml.safe_dump(routing_settings(self.config), sort_keys=False)
        atomic_write(self.out / ROUTING_FILE, text)

    def _write_discovery(self, *, force: bool = False) -> None:
        entries = []
        for w in sorted(self.workers.values(), key=lambda w: w.name):
            if not w.child.alive:
                continue
            role = "draining" if w.leaving else w.state
            if w.demote_at is not None and not w.leaving:
                role = workers.STANDBY  # out of the router's set before its Demote RPC
            entries.append(
                {
                    "address": w.address,
                    "id": w.name,
                    "ready": w.state in workers.WARM and not w.leaving,
                    "role": role,
                    "metrics_url": w.metrics_url,
                }
            )
        if self.host is not None:
            self.host.publish(self.pool.name, entries)
            return
        text = json.dumps(entries, indent=1) + "\n"
        if force or text != self._discovery:
            atomic_write(self.out / DISCOVERY_FILE, text)
            self._discovery = text

    def write_prometheus_targets(self) -> None:
        """``prometheus-targets.json`` (file_sd): the warm workers and the router, labelled
        ``pool`` and ``component`` (worker, router)."""
        worker_targets = [t.removeprefix("http://") for t in self._metric_targets()]
        groups = [
            {"targets": worker_targets, "labels": {"pool": self.pool.name, "component": "worker"}},
            {
                "targets": [f"127.0.0.1:{self.router_http}"],
                "labels": {"pool": self.pool.name, "component": "router"},
            },
        ]
        if self.control_metrics_port:
            groups.append(
                {
                    "targets": [f"127.0.0.1:{self.control_metrics_port}"],
                    "labels": {"component": "control"},  # its series name their pool
                }
            )
        text = json.dumps(groups) + "\n"
        if text != self._targets:
            atomic_write(self.out / PROMETHEUS_TARGETS_FILE, text)
            self._targets = text

    def _write_state(self, *, stopped: bool = False) -> None:
        counts = workers.counts(self._views())
        state = {
            "pid": os.getpid(),
            "pool": self.pool.name,
            "router": {
                "grpc": self.router_address,
                "http": f"http://127.0.0.1:{self.router_http}",
                "pid": self.router.pid if self.router is not None else 0,
            },
            "ready": (not stopped) and self.ready(),
            "stopped": stopped,
            "desired": self.desired,
            "counts": asdict(counts),
            "metrics": self.source_name,
            "workers": {
                w.name: {"pid": w.child.pid, "state": w.state, "grpc": w.address}
                for w in self.workers.values()
            },
            "pids": self.pids,
            "t0_unix": self.t0_unix,
        }
        text = json.dumps(state, indent=1) + "\n"
        if text != self._state:
            atomic_write(self.out / STATE_FILE, text)
            self._state = text

    def _event(
        self,
        kind: str,
        worker: str,
        reason: str,
        *,
        from_replicas: int = 0,
        to_replicas: int = 0,
    ) -> None:
        t = self.t_s()
        self.writer.event(
            ScaleEvent(
                t_s=t,
                kind=kind,
                reason=reason,
                pool=self.pool.name,
                worker=worker,
                from_replicas=from_replicas,
                to_replicas=to_replicas,
            )
        )
        self.writer.flush()
        line = EventLine(t, kind, worker, reason, self.pool.name)
        self.events.append(line)
        self.view.event(line)

    async def _serve_control_metrics(self) -> None:
        """``/metrics`` of this control plane on an ephemeral loopback port."""

        async def metrics(_: web.Request) -> web.Response:
            body = generate_latest(self.registry)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self._control_runner = runner
        self.control_metrics_port = int(runner.addresses[0][1])

    def _sample(self) -> None:
        c = workers.counts(self._views())
        self.pool_gauges.set_pool(
            self.config.namespace,
            self.pool.name,
            {
                "active": c.active,
                "standby": c.standby,
                "warming": c.warming,
                "draining": c.draining,
            },
            self.desired,
            bool(self.fatal),
        )
        self.writer.replicas(
            ReplicaSample(
                t_s=self.t_s(),
                active=c.active,
                standby=c.standby,
                starting=c.warming,
                draining=c.draining,
            )
        )
        self.writer.flush()

    async def _scrape_view(self, now: float) -> None:
        if self._http is None:
            return
        targets = {
            w.name: w.metrics_url
            for w in self.workers.values()
            if w.answered and w.child.alive and w.state not in (workers.STOPPED,)
        }
        targets["router"] = f"http://127.0.0.1:{self.router_http}/metrics"
        pool = None if self.host is None else self.pool.name
        await scrape_into(self.stats, self._http, targets, now, pool=pool)

    def snapshot(self, *, stopping: bool = False) -> PoolSnapshot:
        rows = tuple(
            {
                "name": w.name,
                "state": "draining" if w.leaving and w.state in workers.WARM else w.state,
                "pid": w.child.pid,
                "in_flight": w.in_flight,
                "running": w.running,
                "waiting": w.waiting,
                "kv": w.kv_usage,
                "restarts": w.restarts,
            }
            for w in sorted(self.workers.values(), key=lambda w: _name_key(w.name))
        )
        decision = self.decision
        return PoolSnapshot(
            pool=self.pool.name,
            engine=self.options.engine,
            t_s=self.t_s(),
            desired=self.desired,
            standby_wanted=self._standby_wanted(),
            counts=workers.counts(self._views()),
            workers=rows,
            traffic=self.stats.view(self.clock()),
            signals=describe_signals(self.config.autoscaling, self.signals)
            if self.config.autoscaling.objectives
            else "",
            decision="" if decision is None else decision.reason,
            source=self.source_name,
            router=self.router_address,
            router_http=f"http://127.0.0.1:{self.router_http}",
            out=str(self.out),
            events=tuple(self.events),
            stopping=stopping or self._stop.is_set(),
        )


def _name_key(name: str) -> tuple[int, str]:
    head, _, num = name.rpartition("-")
    return (int(num), head) if num.isdigit() else (0, name)


BAD_FLAGS_EXIT = 2  # `preheat worker|router`: bad flags or config (the engine not built)
MAX_ROUTER_CRASHES = 5  # within a minute: then `preheat up` stops and says why
ROUTER_DRAIN_MARGIN_S = 5.0  # the router's --drain-grace-s: the workers' plus this
ROUTER_STOP_MARGIN_S = 15.0  # SIGKILL the router this long past the workers' drain grace


def log_tail(path: Path | None, lines: int = 3) -> str:
    if path is None:
        return "(no log)"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def routing_settings(config: PoolConfig) -> dict[str, Any]:
    """The router's settings for the pool (its routing config file, or its ``routing`` in a
    several-pool discovery file): the hotspot margin, the TTFT objective as the target
    of requests that name no deadline, and the pool's traffic classes and tenants."""
    out: dict[str, Any] = {"hotspotMarginMs": config.routing.hotspot_margin_ms}
    ttft = [o.target for o in config.autoscaling.objectives if o.signal is Signal.TTFT]
    if ttft:
        out["defaultTtftTargetMs"] = min(ttft)
    traffic = traffic_mapping(config.traffic)
    if traffic:
        out["traffic"] = traffic
    return out


def _ttft_objective(config: PoolConfig) -> float:
    for o in config.autoscaling.objectives:
        if o.signal.value == "ttft":
            return o.target
    return 0.0


def worker_argv(
    config: PoolConfig,
    name: str,
    *,
    grpc_port: int,
    http_port: int,
    drain_grace_s: float,
    control_port: int = 0,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """``preheat worker`` for one local replica: the operator's flags for the pool
    (:func:`preheat.core.manifests.worker_args`: engine, model, ``--start-as standby``, the
    engine args), every port on loopback, a hostPath model read in place. The control
    token comes in the environment (``PREHEAT_CONTROL_TOKEN``), never on the command line."""
    build = BuildOptions(drain_grace_s=max(0, round(drain_grace_s)), log_format="json")
    args = _without(
        worker_args(config, build), ("--host", "--control-host", "--control-port", "--openai-port")
    )
    src = config.model.source
    if src.kind == "hostPath":
        args[args.index("--model") + 1] = src.path
    return preheat_argv(
        "worker",
        *args,
        "--host",
        "127.0.0.1",
        "--grpc-port",
        str(grpc_port),
        "--http-port",
        str(http_port),
        "--control-host",
        "127.0.0.1",
        "--control-port",
        str(control_port),
        "--worker-id",
        name,
        "--openai-port",
        "0",  # a vllm worker's OpenAI API on an ephemeral port (its Status says which)
        *extra,
    )


def router_tokenizer_args(config: PoolConfig, router_args: Sequence[str]) -> list[str]:
    """``--tokenizer hf:PATH`` for the router of a vLLM pool whose model is a local folder
    (hostPath): the router then routes on the ids vLLM sees (the model's tokenizer, its chat
    template for chat), so its prefix hashes are the engine's. Nothing when ``router_args``
    name a tokenizer, for the sim engine (the router's default ``sim`` is its tokenizer), or
    for a model that is not a local folder."""
    if "--tokenizer" in router_args or config.engine.kind != "vllm":
        return []
    src = config.model.source
    if src.kind != "hostPath" or not src.path:
        return []
    return ["--tokenizer", f"hf:{src.path}"]


LOCAL_TENANT_HEADER = "x-tenant"


def router_tenant_args(configs: Sequence[PoolConfig], router_args: Sequence[str]) -> list[str]:
    """``--tenant-header x-tenant`` when a pool lists tenants (so a user of ``preheat up``
    can name one with a header), unless ``router_args`` name a tenant header or API keys
    (then the key's tenant or that header is the word on the tenant)."""
    if any(a.startswith(("--tenant-header", "--api-keys-file")) for a in router_args):
        return []
    if not any(c.traffic.tenants for c in configs):
        return []
    return ["--tenant-header", LOCAL_TENANT_HEADER]


def _without(args: list[str], flags: tuple[str, ...]) -> list[str]:
    """``args`` less each of ``flags`` and its value (the pod's bind addresses)."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in flags:
            skip = True
        else:
            out.append(a)
    return out


def local_config(config: PoolConfig, engine: str) -> PoolConfig:
    """The pool as it runs here: ``engine`` (sim unless asked), keeping only the engine
    args that apply to it (a cluster pool's vLLM args mean nothing to the sim)."""
    if engine == config.engine.kind:
        return config
    from preheat.api.engine_args import SIM_VLLM_ARGS
    from preheat.api.pool import engine_arg_problems
    from preheat.core.manifests import WORKER_FLAGS

    def applies(key: str, value: object) -> bool:
        if engine == "sim":  # its own flags and the vLLM args it models as they are given
            if key in WORKER_FLAGS["sim"]:
                return True
            return key in SIM_VLLM_ARGS and not engine_arg_problems("sim", {key: value})
        return key not in WORKER_FLAGS["sim"] or key in WORKER_FLAGS["vllm"]

    keep = tuple((k, v) for k, v in config.engine.args if applies(k, v))
    dropped = sorted(k for k, v in config.engine.args if not applies(k, v))
    if dropped:
        log.info(
            "engine_args_dropped",
            extra=fields(engine=engine, spec_engine=config.engine.kind, args=",".join(dropped)),
        )
    return replace(config, engine=EngineConfig(kind=engine, image="", args=keep))


def describe_counts(c: ReplicaCounts) -> str:
    return f"{c.active} active, {c.standby} standby, {c.warming} starting, {c.draining} draining"


__all__ = [
    "DISCOVERY_FILE",
    "STATE_FILE",
    "EventLine",
    "LocalPool",
    "PoolSnapshot",
    "RouterHost",
    "UpOptions",
    "View",
    "atomic_write",
    "describe_counts",
    "exit_text",
    "local_config",
    "log_tail",
    "routing_settings",
    "worker_argv",
]
