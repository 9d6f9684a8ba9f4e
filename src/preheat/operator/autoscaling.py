"""The autoscaler in the operator: one kopf daemon per pool runs the policy's loop.

Every evaluation interval, for a pool with objectives:

1. read :class:`~preheat.core.autoscaling.Signals` from the pool's
   :class:`~preheat.autoscaler.source.MetricSource` (``PrometheusSource`` when a Prometheus
   URL is configured, with a selector for the pool's workers; else ``DirectScrapeSource``
   over the ready worker pods' ``http`` port);
2. count the pool's pods by state (role label and readiness, as the status does);
3. call :func:`~preheat.core.autoscaling.decide` with the pool's ``PolicyState`` (kept here,
   in memory: a restarted operator starts with fresh windows and no cooldown);
4. when the decision changes the active count, merge-patch ``spec.replicas.desired`` (the
   scale subresource's field): the level-based :func:`~preheat.operator.handlers.reconcile`
   does the rest (roles, promotion, the Deployment's replicas); write ``status.lastScale``
   and emit ``ScaledUp`` / ``ScaledDown``;
5. write the ``Autoscaling`` condition (the decision's reason, the signals seen, desired vs.
   current), a ``MetricsStale`` Warning event when it starts holding on missing or stale
   data, and the ``preheat_autoscaler_*`` metrics.

A manual ``kubectl scale`` (a ``spec.replicas.desired`` we did not write) is the size the
policy starts from: it stands until a decision changes the size (see the README).

Options (:class:`AutoscalerOptions`) come from the environment (``PREHEAT_PROMETHEUS_URL``,
``PREHEAT_PROMETHEUS_SELECTOR``, ``PREHEAT_PROMETHEUS_ROUTER_SELECTOR`` (the routers'
``preheat_router_queue_depth`` series: requests they hold wake a pool at zero replicas),
``PREHEAT_AUTOSCALER_INTERVAL_S``), or from
``memo.autoscaler_options`` when whoever builds the memo sets it, or from :func:`configure`
(the injection point for tests: a ``source_factory`` returning a fake source).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from preheat.api.pool import PoolSpecError, to_config
from preheat.autoscaler.describe import describe_signals, signal_label, signals_seen
from preheat.autoscaler.prometheus import PrometheusSource
from preheat.autoscaler.scrape import DirectScrapeSource
from preheat.autoscaler.source import MetricSource
from preheat.core.autoscaling import Cause, Decision, Direction, PolicyTuning
from preheat.core.control import ControlState, signal_query, step
from preheat.core.manifests import GROUP, HTTP_PORT, PLURAL, VERSION
from preheat.core.pool import AutoscalingConfig, PoolConfig
from preheat.operator.kube import POOLS
from preheat.operator.metrics import AutoscalerMetrics
from preheat.operator.observe import observation
from preheat.operator.status import observe_pod, replica_counts

log = logging.getLogger("preheat.operator.autoscaling")

PoolKey = tuple[str, str]  # (namespace, name)

ENV_PROMETHEUS_URL = "PREHEAT_PROMETHEUS_URL"
ENV_PROMETHEUS_SELECTOR = "PREHEAT_PROMETHEUS_SELECTOR"
ENV_PROMETHEUS_ROUTER_SELECTOR = "PREHEAT_PROMETHEUS_ROUTER_SELECTOR"
ENV_INTERVAL_S = "PREHEAT_AUTOSCALER_INTERVAL_S"
DEFAULT_SELECTOR = 'namespace="{namespace}",service="{pool}-workers"'
CONDITION = "Autoscaling"

_REASONS: Mapping[Cause, str] = {
    Cause.SCALE_UP: "ScaledUp",
    Cause.SCALE_DOWN: "ScaledDown",
    Cause.PANIC: "Panic",
    Cause.WAKE: "Woken",
    Cause.SCALE_TO_ZERO: "ScaledToZero",
    Cause.WITHIN_TOLERANCE: "WithinTolerance",
    Cause.STEADY: "Steady",
    Cause.STABILIZING: "Stabilizing",
    Cause.COOLDOWN: "CoolingDown",
    Cause.WARMING: "WaitingForWarmingPods",
    Cause.BOUNDS: "AtBounds",
    Cause.STALE: "MetricsStale",
    Cause.IDLE: "Idle",
    Cause.NO_OBJECTIVES: "NoObjectives",
}


@dataclass(frozen=True)
class PoolTarget:
    """What a source factory is told about the pool it reads for."""

    namespace: str
    name: str
    targets: Callable[[], Sequence[str]]  # base URLs of the pool's ready workers, now


SourceFactory = Callable[[PoolTarget], MetricSource]


@dataclass(frozen=True)
class AutoscalerOptions:
    interval_s: float = 15.0
    prometheus_url: str = ""  # "": direct scrape of the workers
    prometheus_selector: str = DEFAULT_SELECTOR  # {namespace} and {pool} are filled in
    # the routers' queue-depth series for this pool ({namespace}, {pool} filled in); "": none,
    # and then a pool at zero replicas cannot be woken from Prometheus
    prometheus_router_selector: str = ""
    tuning: PolicyTuning = field(default_factory=PolicyTuning)
    source_factory: SourceFactory | None = None  # overrides both (tests, ``preheat up``)
    clock: Callable[[], float] = time.monotonic  # the policy's and the sources' clock

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AutoscalerOptions:
        env = os.environ if env is None else env
        return cls(
            interval_s=float(env.get(ENV_INTERVAL_S) or 15.0),
            prometheus_url=env.get(ENV_PROMETHEUS_URL, ""),
            prometheus_selector=env.get(ENV_PROMETHEUS_SELECTOR) or DEFAULT_SELECTOR,
            prometheus_router_selector=env.get(ENV_PROMETHEUS_ROUTER_SELECTOR, ""),
        )

    def source_for(self, target: PoolTarget) -> MetricSource:
        if self.source_factory is not None:
            return self.source_factory(target)
        stale = self.tuning.stale_after_s
        if self.prometheus_url:
            fill = {"namespace": target.namespace, "pool": target.name}
            routers = self.prometheus_router_selector.format(**fill)
            return PrometheusSource(
                self.prometheus_url,
                selector=self.prometheus_selector.format(**fill),
                router_selector=routers or None,
                clock=self.clock,
                stale_after_s=stale,
            )
        return DirectScrapeSource(target.targets, clock=self.clock, stale_after_s=stale)


_configured: AutoscalerOptions | None = None


def configure(options: AutoscalerOptions | None) -> None:
    """Options for operators started after this in this process (None: from the env)."""
    global _configured
    _configured = options


@dataclass
class PoolLoop:
    """One pool's autoscaler state, in memory."""

    control: ControlState = field(default_factory=ControlState)
    source: MetricSource | None = None
    stale: bool = False
    # our last spec write the pool body may not show yet: (resourceVersion before, desired)
    written: tuple[str, int] | None = None


@dataclass
class Autoscaler:
    options: AutoscalerOptions
    pools: dict[PoolKey, PoolLoop] = field(default_factory=dict)
    closing: bool = False  # the operator is stopping (its API client may be closed)
    _metrics: AutoscalerMetrics | None = None

    def metrics(self, runtime: Any) -> AutoscalerMetrics:
        """``preheat_autoscaler_*`` in the operator's registry (made once)."""
        if self._metrics is None:
            self._metrics = AutoscalerMetrics(runtime.metrics.registry)
        return self._metrics


@kopf.on.startup()
async def autoscaler_startup(memo: kopf.Memo, **_: Any) -> None:
    """The shared :class:`Autoscaler` (its metrics are made on first use: kopf may run this
    before ``handlers.startup`` has made ``memo.runtime``)."""
    if getattr(memo, "autoscaler", None) is None:
        options = (
            getattr(memo, "autoscaler_options", None) or _configured or AutoscalerOptions.from_env()
        )
        memo.autoscaler = Autoscaler(options)


@kopf.on.cleanup()
async def autoscaler_cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Loops stop before their next API call (``handlers.cleanup`` closes the client)."""
    auto: Autoscaler | None = getattr(memo, "autoscaler", None)
    if auto is not None:
        auto.closing = True


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10.0)
async def autoscale(
    stopped: kopf.DaemonStopped,
    namespace: str | None,
    name: str,
    body: kopf.Body,
    memo: Any,
    **kwargs: Any,
) -> None:
    """The pool's loop: ``body`` is kopf's live view of the pool (latest event)."""
    auto: Autoscaler = memo.autoscaler
    key = (namespace or "", name)
    index = kwargs["pods_index"]

    def pods() -> list[Mapping[str, Any]]:
        return [p for p in index.get(key, [])]

    loop = auto.pools.setdefault(key, PoolLoop())
    try:
        while not stopped and not auto.closing:
            try:
                await evaluate(memo.runtime, auto, body, pods, loop)
            except (kopf.TemporaryError, kopf.PermanentError) as e:
                if auto.closing:
                    break
                log.warning("autoscaler_write_failed pool=%s/%s error=%s", *key, e)
            except Exception:
                if auto.closing:
                    break
                log.exception("autoscaler_evaluation_failed pool=%s/%s", *key)
            # Short sleeps that look at ``stopped`` (kopf waits for a deleted pool's daemon
            # to exit), not ``await stopped.wait(n)``, whose timeout leaks TimeoutErrors
            # into kopf's shutdown.
            deadline = time.monotonic() + auto.options.interval_s
            while not stopped and not auto.closing and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    finally:
        auto.pools.pop(key, None)
        auto.metrics(memo.runtime).forget_pool(*key)
        if loop.source is not None:
            await asyncio.shield(loop.source.close())


# --- one evaluation ---------------------------------------------------------------------


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_targets(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """``http://ip:port`` of every ready, not terminating worker pod (its ``http`` port)."""
    out = []
    for pod in pods:
        seen = observe_pod(pod)
        ip = (pod.get("status") or {}).get("podIP")
        if not seen.ready or seen.terminating or not ip:
            continue
        port = HTTP_PORT
        for c in (pod.get("spec") or {}).get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("name") == "http" and p.get("containerPort"):
                    port = int(p["containerPort"])
        out.append(f"http://{ip}:{port}")
    return sorted(out)


def condition_for(decision: Decision, config: AutoscalingConfig, active: int) -> dict[str, str]:
    stale = decision.cause is Cause.STALE
    message = (
        f"desired {decision.active} active, current {active} active; "
        f"signals (observed/target): {describe_signals(config, decision.signals)}; "
        f"{decision.reason}"
    )
    return {
        "type": CONDITION,
        "status": "False" if stale else "True",
        "reason": _REASONS.get(decision.cause, "Evaluated"),
        "message": message[:4096],
    }


def _desired_now(pool: Mapping[str, Any], config: PoolConfig, loop: PoolLoop) -> int:
    """``spec.replicas.desired`` (clamped), or our last write when the body predates it."""
    if loop.written is not None:
        before, value = loop.written
        if str((pool.get("metadata") or {}).get("resourceVersion")) == before:
            return value
        loop.written = None
    return config.replicas.desired


async def evaluate(
    runtime: Any,
    auto: Autoscaler,
    pool: Mapping[str, Any],
    pods: Callable[[], Sequence[Mapping[str, Any]]],
    loop: PoolLoop,
) -> Decision | None:
    """One evaluation of one pool; None when it has no objectives (or an unusable spec)."""
    meta = pool.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    if meta.get("deletionTimestamp"):
        return None
    try:
        config = to_config(pool.get("spec") or {}, name=name, namespace=namespace)
    except PoolSpecError:
        return None  # the reconcile reports it (Degraded)
    auto_cfg = config.autoscaling
    if not auto_cfg.objectives:
        if loop.source is not None:
            await loop.source.close()
            loop.source = None
        loop.control, loop.stale = ControlState(), False
        return None

    if loop.source is None:
        target = PoolTarget(namespace, name, lambda: ready_targets(pods()))
        loop.source = auto.options.source_for(target)
    signals = await loop.source.read(signal_query(auto_cfg))

    current = _desired_now(pool, config, loop)
    decided = loop.control.decided
    if decided is not None and current != decided:
        log.info(
            "autoscaler_manual_scale pool=%s/%s desired=%d (ours was %d): honoured",
            namespace,
            name,
            current,
            decided,
        )
    now = auto.options.clock()
    obs = observation(config, pods(), now=now, desired=current, signals=signals)
    decision, _, loop.control = step(obs, loop.control, tuning=auto.options.tuning)
    assert decision is not None
    counts = replica_counts([observe_pod(p) for p in pods()])
    stale = decision.cause is Cause.STALE
    auto.metrics(runtime).observe(
        namespace,
        name,
        desired=decision.active,
        current=counts["active"],
        cause=decision.cause.value,
        stale=stale,
        signals=signals_seen(auto_cfg, decision.signals),
    )

    status: dict[str, Any] = {}
    if decision.active != current:
        await runtime.kube.patch(
            POOLS, namespace, name, {"spec": {"replicas": {"desired": decision.active}}}
        )
        loop.written = (str(meta.get("resourceVersion")), decision.active)
        status["lastScale"] = {
            "time": _now_rfc3339(),
            "from": current,
            "to": decision.active,
            "reason": decision.reason[:1024],
        }
        up = decision.direction is Direction.UP or decision.active > current
        _event(pool, "Normal", "ScaledUp" if up else "ScaledDown", decision.reason)
        log.info(
            "autoscaler_scaled pool=%s/%s from=%d to=%d reason=%s",
            namespace,
            name,
            current,
            decision.active,
            decision.reason,
        )
    if stale and not loop.stale:
        _event(pool, "Warning", "MetricsStale", decision.reason)
    elif loop.stale and not stale:
        _event(pool, "Normal", "MetricsAvailable", f"metrics fresh again: {decision.reason}")
    loop.stale = stale

    await _write_status(
        runtime, namespace, name, pool, status, condition_for(decision, auto_cfg, counts["active"])
    )
    return decision


def _event(pool: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    kopf.event(pool, type=type_, reason=reason, message=message[:1024])  # type: ignore[arg-type]


async def _write_status(
    runtime: Any,
    namespace: str,
    name: str,
    pool: Mapping[str, Any],
    status: dict[str, Any],
    cond: Mapping[str, str],
) -> None:
    """``lastScale`` and the ``Autoscaling`` condition, only when something changed.

    Conditions are a list, which a merge patch replaces whole: under the pool's lock (the
    reconcile writes the others), the pool is read fresh and only ours is replaced.
    """
    previous = ((pool.get("status") or {}).get("conditions")) or []
    if not status and _same_condition(previous, cond):
        return
    async with runtime.lock((namespace, name)):
        fresh = await runtime.kube.get(POOLS, namespace, name)
        if fresh is None:
            return
        conditions = list(((fresh.get("status") or {}).get("conditions")) or [])
        if status or not _same_condition(conditions, cond):
            before: Mapping[str, Any] = next(
                (c for c in conditions if c.get("type") == CONDITION), {}
            )
            since = (
                before.get("lastTransitionTime") if before.get("status") == cond["status"] else None
            )
            mine = {
                **cond,
                "lastTransitionTime": since or _now_rfc3339(),
                "observedGeneration": int((fresh.get("metadata") or {}).get("generation") or 0),
            }
            others = [c for c in conditions if c.get("type") != CONDITION]
            status = {**status, "conditions": [*others, mine]}
            await runtime.kube.patch_status(namespace, name, status)
            runtime.metrics.actions.labels("autoscaler-status").inc()


def _same_condition(conditions: Sequence[Mapping[str, Any]], cond: Mapping[str, str]) -> bool:
    for c in conditions:
        if c.get("type") == CONDITION:
            return all(c.get(k) == v for k, v in cond.items())
    return False


__all__ = [
    "CONDITION",
    "AutoscalerOptions",
    "PoolTarget",
    "SourceFactory",
    "configure",
    "describe_signals",
    "evaluate",
    "ready_targets",
    "signal_label",
    "signals_seen",
]
