"""An ``InferencePool``'s internal configuration: frozen, complete, no Optionals.

``preheat.api.pool.to_config`` makes one from a validated spec (external schema, defaults,
every error reported at once); the reconciler (:mod:`preheat.core.manifests`) and the
autoscaling policy read it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from preheat.core.traffic.classes import Traffic

# --- the pool's internal config (frozen, no Optionals) ------------------------------------


class Signal(enum.Enum):
    """What an autoscaling objective watches."""

    TTFT = "ttft"  # time to first token, ms, at a percentile
    ITL = "itl"  # inter-token latency, ms, at a percentile
    E2E = "e2e"  # end-to-end request latency, ms, at a percentile
    QUEUE_DEPTH = "queueDepth"  # waiting requests per active replica
    CONCURRENCY = "concurrency"  # requests running or waiting per active replica
    KV_CACHE_USAGE = "kvCacheUsage"  # fraction of KV cache blocks in use, 0..1

    @property
    def is_latency(self) -> bool:
        return self in (Signal.TTFT, Signal.ITL, Signal.E2E)

    @property
    def is_per_replica(self) -> bool:
        """A pool-wide count whose target is per active replica (queueDepth, concurrency)."""
        return self in (Signal.QUEUE_DEPTH, Signal.CONCURRENCY)


@dataclass(frozen=True)
class ModelSource:
    """Where the weights come from: a PVC, a node path, or nothing (the engine fetches by name)."""

    kind: str  # "pvc" | "hostPath" | "none"
    claim: str = ""  # pvc: the claim's name
    path: str = ""  # pvc: sub-path inside the claim ("" = its root); hostPath: absolute path


@dataclass(frozen=True)
class ModelConfig:
    name: str
    source: ModelSource


EngineArgValue: TypeAlias = str | int | float | bool | list[Any] | dict[str, Any]
"""An engine arg's value: a scalar, or a list / object (vLLM's nested configs), as JSON."""


@dataclass(frozen=True)
class EngineConfig:
    kind: str  # "vllm" | "sim"
    image: str  # "" = the operator's default worker image
    args: tuple[tuple[str, EngineArgValue], ...]  # only the args set, by spec key


@dataclass(frozen=True)
class ResourcesConfig:
    gpus: int
    gpu_type: str  # "" = any node with the GPU resource
    cpu: str  # Kubernetes quantity, "" = not requested
    memory: str  # Kubernetes quantity, "" = not requested


@dataclass(frozen=True)
class TopologyConfig:
    zones: tuple[str, ...]  # () = wherever the scheduler puts them
    spread: str  # "balanced" (hard across 2+ named zones) | "bestEffort" | "none"


@dataclass(frozen=True)
class ReplicasConfig:
    min: int
    max: int
    warm_standby: int
    desired: int  # active replicas wanted now: spec.replicas.desired clamped to [min, max]


@dataclass(frozen=True)
class Objective:
    signal: Signal
    percentile: float  # latency signals only; 0 for the others
    target: float  # ms (latency), requests per replica (queueDepth, concurrency), fraction (kv)


@dataclass(frozen=True)
class ScaleRule:
    stabilization_s: float
    cooldown_s: float
    max_step: int


@dataclass(frozen=True)
class PanicConfig:
    enabled: bool
    threshold: float  # observed/target ratio that enters panic mode
    window_s: float


DEFAULT_HORIZON_S = 60.0  # the forecast's horizon until a pod's cold start is measured


@dataclass(frozen=True)
class PredictiveConfig:
    """``autoscaling.predictive``: size for the forecast arrival rate :meth:`horizon` ahead
    (the pool's measured cold start when ``horizon_measured``, else or until one is measured
    ``horizon_s``), trusting ``trust`` of the predicted rise; the forecast's season is
    ``period_s`` long (a day), with a weekly one of seven periods if ``weekly``. With
    ``headroom`` (a percentile, 0: none), at least the forecast corrected by that
    percentile of its own shortfall at the horizon (:func:`~preheat.core.autoscaling.
    forecast.shortfall`); with ``headroom_keeps``, the headroom only keeps pods the pool
    already has (a scale-down stops at it) and never starts one."""

    enabled: bool = False
    horizon_s: float = DEFAULT_HORIZON_S
    horizon_measured: bool = True  # False: ``horizon`` is set in the spec
    trust: float = 0.5
    period_s: float = 86_400.0
    weekly: bool = False
    headroom: float = 0.0  # percentile of the forecast's shortfall to size for; 0 = none
    headroom_keeps: bool = False  # the headroom keeps pods, never starts one

    def horizon(self, cold_start_s: float | None) -> float:
        """How far ahead to forecast: the pool's measured cold start (a pod's creation to
        warm) when ``horizon_measured`` and one is measured, else ``horizon_s``."""
        if self.horizon_measured and cold_start_s is not None:
            return cold_start_s
        return self.horizon_s


@dataclass(frozen=True)
class AutoscalingConfig:
    objectives: tuple[Objective, ...]  # () = no autoscaling: replicas.desired rules
    window_s: float
    scale_up: ScaleRule
    scale_down: ScaleRule
    tolerance: float
    panic: PanicConfig
    predictive: PredictiveConfig = field(default_factory=PredictiveConfig)


@dataclass(frozen=True)
class RoutingConfig:
    session_ttl_s: float
    hotspot_margin_ms: float


@dataclass(frozen=True)
class EnvVar:
    """One environment variable of the worker container: a literal value, or one key of a
    Secret (a model hub's token)."""

    name: str
    value: str = ""
    secret_name: str = ""  # set: the value is this Secret's key ``secret_key``
    secret_key: str = ""
    optional: bool = False  # the Secret (or its key) may be missing


@dataclass(frozen=True)
class PodConfig:
    """What a worker pod runs with besides the engine: from the operator's config for every
    pool, and from a pool's ``spec.pod`` (:func:`merge_pod`)."""

    image_pull_secrets: tuple[str, ...] = ()
    service_account: str = ""  # "" = the namespace's default ServiceAccount
    runtime_class: str = ""  # "" = the cluster's default runtime
    priority_class: str = ""  # "" = the cluster's default priority
    env: tuple[EnvVar, ...] = ()
    env_from_secrets: tuple[str, ...] = ()  # every key of these Secrets becomes a variable


def merge_pod(defaults: PodConfig, pool: PodConfig) -> PodConfig:
    """The pool's settings over the operator's: a name the pool sets wins, pull secrets and
    env-from Secrets are both kept (the operator's first), variables merge by name."""
    env = {e.name: e for e in defaults.env}
    env.update((e.name, e) for e in pool.env)
    return PodConfig(
        image_pull_secrets=tuple(
            dict.fromkeys(defaults.image_pull_secrets + pool.image_pull_secrets)
        ),
        service_account=pool.service_account or defaults.service_account,
        runtime_class=pool.runtime_class or defaults.runtime_class,
        priority_class=pool.priority_class or defaults.priority_class,
        env=tuple(env.values()),
        env_from_secrets=tuple(dict.fromkeys(defaults.env_from_secrets + pool.env_from_secrets)),
    )


@dataclass(frozen=True)
class PoolConfig:
    """One pool, validated and with every default applied."""

    name: str
    namespace: str
    model: ModelConfig
    engine: EngineConfig
    resources: ResourcesConfig
    topology: TopologyConfig
    replicas: ReplicasConfig
    autoscaling: AutoscalingConfig
    routing: RoutingConfig
    pod: PodConfig = field(default_factory=PodConfig)
    traffic: Traffic = field(default_factory=Traffic)  # SLO classes and tenant quotas
