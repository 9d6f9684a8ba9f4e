"""Everything the operator runs with, in one object built once (``preheat operator``'s
``main``, or the startup handler under ``kopf run``) and passed to the handlers through
``memo.options``. Nothing here reads the environment at import: :meth:`from_env` is called.

Environment (for ``kopf run -m preheat.operator.handlers`` and the chart):
``PREHEAT_OPERATOR_RESYNC_S`` (resync period, s), ``PREHEAT_OPERATOR_WORKER_TIMEOUT_S``
(one Promote/Demote/Drain call, s), ``PREHEAT_PROMETHEUS_URL``,
``PREHEAT_PROMETHEUS_SELECTOR``, ``PREHEAT_PROMETHEUS_ROUTER_SELECTOR`` (the routers'
``preheat_router_queue_depth`` series: requests they hold wake a pool at zero),
``PREHEAT_AUTOSCALER_INTERVAL_S``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from preheat.autoscaler.prometheus import PrometheusSource
from preheat.autoscaler.scrape import DirectScrapeSource
from preheat.autoscaler.source import MetricSource
from preheat.core.autoscaling import PolicyTuning
from preheat.core.manifests import BuildOptions

ENV_RESYNC_S = "PREHEAT_OPERATOR_RESYNC_S"
ENV_WORKER_TIMEOUT_S = "PREHEAT_OPERATOR_WORKER_TIMEOUT_S"
ENV_PROMETHEUS_URL = "PREHEAT_PROMETHEUS_URL"
ENV_PROMETHEUS_SELECTOR = "PREHEAT_PROMETHEUS_SELECTOR"
ENV_PROMETHEUS_ROUTER_SELECTOR = "PREHEAT_PROMETHEUS_ROUTER_SELECTOR"
ENV_INTERVAL_S = "PREHEAT_AUTOSCALER_INTERVAL_S"
DEFAULT_SELECTOR = 'namespace="{namespace}",service="{pool}-workers"'


def seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """``env[name]`` as seconds > 0 (unset or empty: ``default``); ValueError naming it."""
    raw = env.get(name) or ""
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"{name} must be a number of seconds > 0, got {raw!r}")
    return value


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
    def from_env(cls, env: Mapping[str, str]) -> AutoscalerOptions:
        return cls(
            interval_s=seconds(env, ENV_INTERVAL_S, 15.0),
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


@dataclass(frozen=True)
class OperatorOptions:
    """Everything ``preheat operator`` runs with (flags over the config file over the
    environment's defaults)."""

    build: BuildOptions = field(default_factory=BuildOptions)
    namespaces: tuple[str, ...] = ()  # () = the whole cluster
    service_monitor: str = "auto"  # auto | true | false
    standalone: bool = False
    health_port: int = 8080  # 0 = no health/metrics server (tests)
    kubeconfig: str | None = None
    # the workers' cache token (WatchCache), put in every pool's control Secret; "" = none
    cache_token: str = field(default="", repr=False)
    resync_s: float = 60.0  # level-based resync of every pool (children, roles, status)
    worker_timeout_s: float = 5.0  # deadline of one Promote/Demote/Drain call to a worker
    autoscaler: AutoscalerOptions = field(default_factory=AutoscalerOptions)

    def with_env(self, env: Mapping[str, str]) -> OperatorOptions:
        """These options with what the environment sets (:data:`ENV_RESYNC_S`,
        :data:`ENV_WORKER_TIMEOUT_S`, the autoscaler's)."""
        return replace(
            self,
            resync_s=seconds(env, ENV_RESYNC_S, 60.0),
            worker_timeout_s=seconds(env, ENV_WORKER_TIMEOUT_S, 5.0),
            autoscaler=AutoscalerOptions.from_env(env),
        )


__all__ = [
    "DEFAULT_SELECTOR",
    "AutoscalerOptions",
    "OperatorOptions",
    "PoolTarget",
    "SourceFactory",
]
