"""Everything the operator runs with, in one object built once (``preheat operator``'s
``main``, or the startup handler under ``kopf run``) and passed to the handlers through
``memo.options``. Nothing here reads the environment at import: :func:`options_from_env`
and :meth:`OperatorOptions.with_env` are called.

The config file (``--config``, the Helm chart's ConfigMap) holds cluster-wide settings::

    workerImage: preheat-worker:0.1.0
    watchNamespaces: [serving]          # [] = the whole cluster
    gpuTypes: {nvidia-h100: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
    drainGraceSeconds: 30
    preStopSleepSeconds: 5
    workerServiceMonitor: "auto"        # auto (when monitoring.coreos.com/v1 exists), true, false

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
from pathlib import Path
from typing import Any

from preheat.api.pool import read_pod
from preheat.autoscaler.prometheus import PrometheusSource
from preheat.autoscaler.scrape import DirectScrapeSource
from preheat.autoscaler.source import MetricSource
from preheat.core.autoscaling import PolicyTuning
from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.manifests import DEFAULT_GPU_TYPES, BuildOptions, NetworkPolicyOptions
from preheat.process import yamlfile
from preheat.wire.tokens import read_token

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
    # seconds since the epoch: status.policyHistory's times (they outlive the process)
    wall_clock: Callable[[], float] = time.time

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


CONFIG_ENV = "PREHEAT_OPERATOR_CONFIG"

_CONFIG_KEYS = frozenset(
    {
        "workerImage",
        "watchNamespaces",
        "gpuTypes",
        "drainGraceSeconds",
        "preStopSleepSeconds",
        "workerServiceMonitor",
        "workerServiceMonitorLabels",
        "workerPod",
        "workerNetworkPolicy",
        "autoscaler",
    }
)

# The config file's ``autoscaler`` keys and the environment variables they stand for (the
# file wins over the environment: the chart renders the file, so a change rolls the pod).
_AUTOSCALER_KEYS = {
    "prometheusUrl": ENV_PROMETHEUS_URL,
    "selector": ENV_PROMETHEUS_SELECTOR,
    "routerSelector": ENV_PROMETHEUS_ROUTER_SELECTOR,
    "intervalSeconds": ENV_INTERVAL_S,
}


def autoscaler_env(doc: Mapping[str, Any]) -> dict[str, str]:
    """The config file's ``autoscaler`` section as the environment variables it sets
    (``""`` values are left out: the environment's, or the default, hold)."""
    raw = doc.get("autoscaler") or {}
    out: dict[str, str] = {}
    if isinstance(raw, Mapping):
        for key, env_name in _AUTOSCALER_KEYS.items():
            value = raw.get(key)
            if value is not None and value != "":
                out[env_name] = str(value)
    return out


def _autoscaler_problems(raw: Any) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        return [f"autoscaler must be a mapping, got {raw!r:.60}"]
    problems = [
        f"autoscaler: unknown key {k!r} (known: {', '.join(_AUTOSCALER_KEYS)})"
        for k in raw
        if k not in _AUTOSCALER_KEYS
    ]
    for key in ("prometheusUrl", "selector", "routerSelector"):
        if not isinstance(raw.get(key, ""), str):
            problems.append(f"autoscaler.{key} must be a string, got {raw[key]!r:.60}")
    url = raw.get("prometheusUrl") or ""
    if isinstance(url, str) and url and not url.startswith(("http://", "https://")):
        problems.append(f"autoscaler.prometheusUrl must be an http(s) URL, got {url!r:.80}")
    interval = raw.get("intervalSeconds", 15)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
        problems.append(f"autoscaler.intervalSeconds must be a number > 0, got {interval!r:.40}")
    return problems


class OperatorConfigError(PreheatError):
    def __init__(self, message: str):
        super().__init__(ErrorCode.INVALID_ARGUMENT, message)


def parse_config(doc: Mapping[str, Any]) -> tuple[BuildOptions, tuple[str, ...], str]:
    """(BuildOptions, watchNamespaces, workerServiceMonitor) from the config file's mapping."""
    problems = [f"unknown key {k!r}" for k in doc if k not in _CONFIG_KEYS]
    gpu_types = doc.get("gpuTypes", DEFAULT_GPU_TYPES)
    if not isinstance(gpu_types, Mapping) or not all(
        isinstance(v, Mapping) for v in gpu_types.values()
    ):
        problems.append("gpuTypes must map a type name to a node selector (a mapping)")
        gpu_types = DEFAULT_GPU_TYPES
    namespaces = doc.get("watchNamespaces") or []
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        problems.append("watchNamespaces must be a list of names")
        namespaces = []
    monitor = str(doc.get("workerServiceMonitor", "auto")).lower()
    if monitor not in ("auto", "true", "false"):
        problems.append(f"workerServiceMonitor must be auto, true or false, got {monitor!r}")
    monitor_labels = doc.get("workerServiceMonitorLabels") or {}
    if not isinstance(monitor_labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in monitor_labels.items()
    ):
        problems.append(
            "workerServiceMonitorLabels must map label names to string values, got "
            f"{monitor_labels!r:.80}"
        )
        monitor_labels = {}
    worker_pod, pod_problems = read_pod(doc.get("workerPod"), "workerPod")
    problems += pod_problems
    network_policy, policy_problems = _network_policy(doc.get("workerNetworkPolicy"))
    problems += policy_problems
    problems += _autoscaler_problems(doc.get("autoscaler"))
    ints: dict[str, int] = {}
    for key, default in (("drainGraceSeconds", 30), ("preStopSleepSeconds", 5)):
        value = doc.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.append(f"{key} must be a whole number of seconds >= 0, got {value!r}")
            value = default
        ints[key] = value
    if problems:
        raise OperatorConfigError("operator config: " + "; ".join(problems))
    build = BuildOptions(
        worker_image=str(doc.get("workerImage") or BuildOptions().worker_image),
        gpu_types={str(k): {str(a): str(b) for a, b in v.items()} for k, v in gpu_types.items()},
        service_monitor=monitor == "true",
        service_monitor_labels=dict(monitor_labels),
        worker_pod=worker_pod,
        network_policy=network_policy,
        drain_grace_s=ints["drainGraceSeconds"],
        pre_stop_sleep_s=ints["preStopSleepSeconds"],
    )
    return build, tuple(namespaces), monitor


def _network_policy(raw: Any) -> tuple[NetworkPolicyOptions, list[str]]:
    """``workerNetworkPolicy: {enabled, controlPlaneNamespace, metricsNamespaces}``."""
    if raw is None:
        return NetworkPolicyOptions(), []
    where = "workerNetworkPolicy"
    if not isinstance(raw, Mapping):
        return NetworkPolicyOptions(), [f"{where} must be a mapping, got {raw!r:.60}"]
    problems = [
        f"{where}: unknown key {k!r}"
        for k in raw
        if k not in ("enabled", "controlPlaneNamespace", "metricsNamespaces")
    ]
    enabled = raw.get("enabled", False)
    if not isinstance(enabled, bool):
        problems.append(f"{where}.enabled must be true or false, got {enabled!r:.60}")
    namespace = raw.get("controlPlaneNamespace") or ""
    if not isinstance(namespace, str):
        problems.append(f"{where}.controlPlaneNamespace must be a namespace name")
    scrapers = raw.get("metricsNamespaces") or []
    if not isinstance(scrapers, list) or not all(isinstance(n, str) for n in scrapers):
        problems.append(f"{where}.metricsNamespaces must be a list of namespace names")
    if problems:
        return NetworkPolicyOptions(), problems
    return NetworkPolicyOptions(enabled, namespace, tuple(scrapers)), []


def options_from_env(env: Mapping[str, str]) -> OperatorOptions:
    """The options under ``kopf run -m preheat.operator.handlers``: the config file
    (``PREHEAT_OPERATOR_CONFIG``), the cache token (``PREHEAT_WORKER_CACHE_TOKEN_FILE`` or
    ``PREHEAT_CACHE_TOKEN``) and the rest of :meth:`OperatorOptions.with_env`."""
    path = env.get(CONFIG_ENV, "")
    doc = (yamlfile.load(Path(path).read_text()) or {}) if path else {}
    return OperatorOptions(
        build=parse_config(doc)[0],
        cache_token=read_token(
            env.get("PREHEAT_WORKER_CACHE_TOKEN_FILE", ""), "PREHEAT_CACHE_TOKEN"
        ),
    ).with_env({**env, **autoscaler_env(doc)})


__all__ = [
    "DEFAULT_SELECTOR",
    "AutoscalerOptions",
    "OperatorConfigError",
    "OperatorOptions",
    "PoolTarget",
    "SourceFactory",
    "autoscaler_env",
    "options_from_env",
    "parse_config",
]
