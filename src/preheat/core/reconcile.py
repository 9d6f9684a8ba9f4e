"""Desired state of an ``InferencePool``: pure builders, no I/O, no Kubernetes client.

Everything here is a plain function of a frozen :class:`PoolConfig` (what
``preheat.api.pool.to_config`` makes from a validated spec) and of :class:`BuildOptions`
(what the operator knows about its cluster). Objects come out as plain ``dict``s shaped
like the Kubernetes API objects, so the kopf handlers only send them, and tests compare
them with golden YAML files.

- :func:`desired_children`: the worker Deployment, Service, PodDisruptionBudget and
  (when that API exists) ServiceMonitor of a pool, each owned by the pool.
- :func:`needs_update` / :func:`diff`: does an observed object differ from the desired
  one in a field we own? Fields the API server fills in (``status``, ``uid``,
  ``resourceVersion``, defaulted fields we did not set, ...) are ignored.
- :func:`deletion_cost` and :func:`choose_victims`: which pods scale-down removes (the
  least cache value and fewest sessions first, never one with work in flight).
- :func:`assign_roles`: which pods become ``active`` / ``standby`` for a new desired count,
  promoting warm standbys first, and how many new pods to start behind them.

Worker drain: the worker drains itself on SIGTERM (``/ready`` flips at once, in-flight
streams get ``--drain-grace-s``). The pod's ``preStop`` hook is only a short sleep, so that
the endpoint controller and the routers drop the pod *before* SIGTERM arrives;
``terminationGracePeriodSeconds`` covers that sleep, the drain grace and a margin.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

GROUP = "preheat.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferencePool"
PLURAL = "inferencepools"

LABEL_POOL = "preheat.dev/pool"
LABEL_ROLE = "preheat.dev/role"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
ANNOTATION_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
ANNOTATION_SPEC_HASH = "preheat.dev/spec-hash"

WORKER_NAME = "preheat-worker"
MANAGED_BY = "preheat-operator"
GPU_RESOURCE = "nvidia.com/gpu"
ZONE_LABEL = "topology.kubernetes.io/zone"
GRPC_PORT = 50051
HTTP_PORT = 8080
MODEL_MOUNT = "/models"


# --- the pool's internal config (frozen, no Optionals) ------------------------------------


class Signal(enum.Enum):
    """What an autoscaling objective watches."""

    TTFT = "ttft"  # time to first token, ms, at a percentile
    ITL = "itl"  # inter-token latency, ms, at a percentile
    E2E = "e2e"  # end-to-end request latency, ms, at a percentile
    QUEUE_DEPTH = "queueDepth"  # waiting requests per active replica
    KV_CACHE_USAGE = "kvCacheUsage"  # fraction of KV cache blocks in use, 0..1

    @property
    def is_latency(self) -> bool:
        return self in (Signal.TTFT, Signal.ITL, Signal.E2E)


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


@dataclass(frozen=True)
class EngineConfig:
    kind: str  # "vllm" | "sim"
    image: str  # "" = the operator's default worker image
    args: tuple[tuple[str, str | int | float | bool], ...]  # only the args set, by spec key


@dataclass(frozen=True)
class ResourcesConfig:
    gpus: int
    gpu_type: str  # "" = any node with the GPU resource
    cpu: str  # Kubernetes quantity, "" = not requested
    memory: str  # Kubernetes quantity, "" = not requested


@dataclass(frozen=True)
class TopologyConfig:
    zones: tuple[str, ...]  # () = wherever the scheduler puts them
    spread: str  # "balanced" (hard, maxSkew 1) | "bestEffort" | "none"


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
    target: float  # ms (latency), requests per replica (queueDepth), fraction (kvCacheUsage)


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


@dataclass(frozen=True)
class AutoscalingConfig:
    objectives: tuple[Objective, ...]  # () = no autoscaling: replicas.desired rules
    window_s: float
    scale_up: ScaleRule
    scale_down: ScaleRule
    tolerance: float
    panic: PanicConfig


@dataclass(frozen=True)
class RoutingConfig:
    session_ttl_s: float
    hotspot_margin_ms: float


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
