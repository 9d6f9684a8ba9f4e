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

Which pods get which role, and which go first, is the control loop's
(:mod:`preheat.core.control`), shared with ``preheat up`` and the simulator.

Worker drain: the worker drains itself on SIGTERM (``/ready`` flips at once, in-flight
streams get ``--drain-grace-s``). The pod's ``preStop`` hook is only a short sleep, so that
the endpoint controller and the routers drop the pod *before* SIGTERM arrives;
``terminationGracePeriodSeconds`` covers that sleep, the drain grace and a margin.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from preheat.core.autoscaling.standby import wanted
from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.pool import EnvVar, PodConfig, PoolConfig, merge_pod
from preheat.core.quantity import same_quantity

GROUP = "preheat.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "InferencePool"
PLURAL = "inferencepools"
# kopf's finalizer on every pool (operator/handlers.py; released by `preheat release-pools`)
OPERATOR_FINALIZER = f"{GROUP}/operator"

LABEL_POOL = "preheat.dev/pool"
LABEL_ROLE = "preheat.dev/role"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
ANNOTATION_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
ANNOTATION_SPEC_HASH = "preheat.dev/spec-hash"
ANNOTATION_CONTROL_TOKEN_DIGEST = "preheat.dev/control-token-digest"

WORKER_NAME = "preheat-worker"
#: every probe's timeoutSeconds (Kubernetes' default is 1): the readiness probe's period (2 s)
PROBE_TIMEOUT_S = 2
MANAGED_BY = "preheat-operator"
GPU_RESOURCE = "nvidia.com/gpu"
ZONE_LABEL = "topology.kubernetes.io/zone"
GRPC_PORT = 50051
HTTP_PORT = 8080
CONTROL_PORT = 50052  # WorkerControl's Promote/Demote/Drain, behind the control token
OPENAI_PORT = 8000  # the vllm worker's OpenAI HTTP API (vLLM's own), as vllm serve's
CONTROL_SECRET_KEY = "control-token"
CONTROL_TOKEN_ENV = "PREHEAT_CONTROL_TOKEN"
CACHE_SECRET_KEY = "cache-token"  # optional: WatchCache then needs it (routers hold it too)
CACHE_TOKEN_ENV = "PREHEAT_CACHE_TOKEN"
MODEL_MOUNT = "/models"


# --- what the operator knows about its cluster --------------------------------------------

GPU_TOLERATION: Mapping[str, str] = {
    "key": GPU_RESOURCE,
    "operator": "Exists",
    "effect": "NoSchedule",
}

DEFAULT_GPU_TYPES: Mapping[str, Mapping[str, str]] = {
    # gpuType -> node selector (NVIDIA GPU feature discovery's product label)
    "nvidia-a10g": {"nvidia.com/gpu.product": "NVIDIA-A10G"},
    "nvidia-a100": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
    "nvidia-h100": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    "nvidia-h200": {"nvidia.com/gpu.product": "NVIDIA-H200"},
    "nvidia-l4": {"nvidia.com/gpu.product": "NVIDIA-L4"},
    "nvidia-l40s": {"nvidia.com/gpu.product": "NVIDIA-L40S"},
}

# Engine spec args with a worker flag of their own (src/preheat/worker/main.py); durations
# are seconds. Every other arg (any vLLM engine argument, checked by preheat.api.engine_args)
# goes to the worker as one JSON object, --engine-args.
WORKER_FLAGS: Mapping[str, Mapping[str, str]] = {
    "sim": {
        "maxNumSeqs": "--sim-max-num-seqs",
        "maxModelLen": "--sim-max-model-len",
        "blockSize": "--sim-block-size",
        "numGpuBlocks": "--sim-num-gpu-blocks",
        "timeScale": "--sim-time-scale",
        "loadTime": "--sim-load-s",
        "warmupTime": "--sim-warmup-s",
        "seed": "--sim-seed",
    },
    "vllm": {
        "maxNumSeqs": "--vllm-max-num-seqs",
        "maxModelLen": "--vllm-max-model-len",
        "blockSize": "--vllm-block-size",
        "gpuMemoryUtilization": "--vllm-gpu-memory-utilization",
        "dtype": "--vllm-dtype",
        "enforceEager": "--vllm-enforce-eager",  # a BooleanOptionalAction: --no-... for false
        "tensorParallelSize": "--vllm-tensor-parallel-size",
    },
}


@dataclass(frozen=True)
class NetworkPolicyOptions:
    """A NetworkPolicy per pool (off by default): only the control plane reaches the
    workers' ports, and scrapers their metrics port."""

    enabled: bool = False
    # where the operator and routers run (the chart's release namespace); their pods carry
    # app.kubernetes.io/part-of: preheat
    control_plane_namespace: str = ""
    # namespaces whose pods may scrape the metrics port (8080); () = any namespace
    metrics_namespaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildOptions:
    """Cluster-wide settings of the operator (Helm values), not of one pool."""

    worker_image: str = "preheat-worker:latest"
    gpu_types: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: DEFAULT_GPU_TYPES)
    service_monitor: bool = False  # the monitoring.coreos.com/v1 API exists and is wanted
    # labels on the workers' ServiceMonitors: what a Prometheus's serviceMonitorSelector
    # matches (kube-prometheus-stack: {release: RELEASE})
    service_monitor_labels: Mapping[str, str] = field(default_factory=dict)
    # every worker pod's pull secrets, ServiceAccount, classes and extra env (a pool's
    # spec.pod wins: core.pool.merge_pod)
    worker_pod: PodConfig = field(default_factory=PodConfig)
    network_policy: NetworkPolicyOptions = field(default_factory=NetworkPolicyOptions)
    drain_grace_s: int = 30  # the worker's --drain-grace-s
    pre_stop_sleep_s: int = 5  # endpoints deregister before SIGTERM
    termination_margin_s: int = 15  # engine shutdown after the drain
    startup_budget_s: Mapping[str, int] = field(
        default_factory=lambda: {"sim": 300, "vllm": 1800}  # load + warm-up, by engine kind
    )
    log_format: str = "json"


@dataclass(frozen=True)
class Owner:
    """The pool object that owns the children (for ownerReferences)."""

    name: str
    uid: str


class BuildError(PreheatError):
    """The spec is valid but cannot be realized here (e.g. an unknown GPU type).

    The message says how to fix it; the operator shows it in a Degraded condition and an
    Event and keeps serving other pools.
    """

    def __init__(self, message: str):
        super().__init__(ErrorCode.FAILED_PRECONDITION, message)


# --- desired children --------------------------------------------------------------------


WORKERS_SUFFIX = "-workers"
POOL_NAME_MAX = 63 - len(WORKERS_SUFFIX)
"""55: the pool's Service, ``NAME-workers``, is a DNS-1035 label (at most 63 characters), and
the pool's name is also a label value (``preheat.dev/pool``, at most 63)."""
POOL_NAME_PATTERN = r"[a-z]([-a-z0-9]*[a-z0-9])?"
"""A DNS-1035 label: the Service named after the pool allows no dots and no leading digit."""


def pool_name_problem(name: str) -> str:
    """ "" when the objects named after pool ``name`` are valid Kubernetes names, else why not."""
    if len(name) <= POOL_NAME_MAX and re.fullmatch(POOL_NAME_PATTERN, name):
        return ""
    return (
        f"{name[:80]!r} cannot name a pool: its Service {name[:80] + WORKERS_SUFFIX!r} must be a "
        f"DNS-1035 label (lowercase letters, digits and '-', starting with a letter, ending "
        f"with a letter or digit), so the pool's name has at most {POOL_NAME_MAX} characters "
        f"(this one has {len(name)})"
    )


def worker_name(config: PoolConfig) -> str:
    """Name of the pool's Deployment, Service, PodDisruptionBudget and ServiceMonitor."""
    return f"{config.name}{WORKERS_SUFFIX}"


def selector_labels(config: PoolConfig) -> dict[str, str]:
    """The labels that select the pool's worker pods (never change them: selectors are fixed)."""
    return {LABEL_NAME: WORKER_NAME, LABEL_POOL: config.name}


def selector_string(config: PoolConfig) -> str:
    """``status.selector`` (the scale subresource's labelSelectorPath)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(config).items()))


def common_labels(config: PoolConfig) -> dict[str, str]:
    return {
        **selector_labels(config),
        LABEL_INSTANCE: config.name,
        LABEL_COMPONENT: "worker",
        LABEL_MANAGED_BY: MANAGED_BY,
    }


def owner_references(owner: Owner) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": owner.name,
            "uid": owner.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def _metadata(config: PoolConfig, owner: Owner) -> dict[str, Any]:
    return {
        "name": worker_name(config),
        "namespace": config.namespace,
        "labels": common_labels(config),
        "ownerReferences": owner_references(owner),
    }


def control_secret_name(config: PoolConfig) -> str:
    """The pool's Secret holding its workers' control token (the operator creates it)."""
    return f"{worker_name(config)}-control"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def build_control_secret(
    config: PoolConfig, owner: Owner, token: str, cache_token: str = ""
) -> dict[str, Any]:
    """The control-token Secret (``token`` made by the caller: this module has no I/O and
    no randomness), with the workers' ``cache_token`` when there is one. Owned by the
    pool, so it goes when the pool goes."""
    data = {CONTROL_SECRET_KEY: _b64(token)}
    if cache_token:
        data[CACHE_SECRET_KEY] = _b64(cache_token)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {**_metadata(config, owner), "name": control_secret_name(config)},
        "type": "Opaque",
        "data": data,
    }


def cache_token_patch(cache_token: str) -> dict[str, Any]:
    """The merge patch that puts ``cache_token`` in an existing control Secret."""
    return {"data": {CACHE_SECRET_KEY: _b64(cache_token)}}


def read_cache_token(secret: Mapping[str, Any]) -> str:
    """The cache token in an observed control Secret ("" when it has none or a bad one)."""
    raw = (secret.get("data") or {}).get(CACHE_SECRET_KEY)
    if not isinstance(raw, str):
        return ""
    try:
        return base64.b64decode(raw, validate=True).decode().strip()
    except (ValueError, UnicodeDecodeError):
        return ""


def read_control_secret(secret: Mapping[str, Any]) -> str:
    """The token in an observed control Secret; PreheatError(FAILED_PRECONDITION) naming
    what is wrong when it has none."""
    name = str((secret.get("metadata") or {}).get("name", ""))
    raw = (secret.get("data") or {}).get(CONTROL_SECRET_KEY)
    token = ""
    if isinstance(raw, str):
        try:
            token = base64.b64decode(raw, validate=True).decode().strip()
        except (ValueError, UnicodeDecodeError):
            token = ""
    if not token:
        raise PreheatError(
            ErrorCode.FAILED_PRECONDITION,
            f"Secret {name} has no usable {CONTROL_SECRET_KEY!r} (a non-empty base64 "
            "value); fix it, or delete it and the operator makes a new token",
        )
    return token


def control_token_digest(token: str, cache_token: str = "") -> str:
    """What the pod template carries of the tokens: a change rolls the workers."""
    text = f"{token}\n{cache_token}" if cache_token else token
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def worker_args(config: PoolConfig, options: BuildOptions) -> list[str]:
    """The worker's command-line flags (after the image's ``preheat worker`` entry point).

    In a pod the data ports bind every address (the pod IP, for the Service and routers),
    and so does the control port (the operator calls it at the pod IP with the token).
    """
    model = MODEL_MOUNT if config.model.source.kind != "none" else config.model.name
    args = [
        "--host",
        "0.0.0.0",
        "--control-host",
        "0.0.0.0",
        "--control-port",
        str(CONTROL_PORT),
        "--engine",
        config.engine.kind,
        "--model",
        model,
        "--start-as",
        "standby",  # the operator promotes: see preheat.core.control.roles
        "--drain-grace-s",
        str(options.drain_grace_s),
        "--log-format",
        options.log_format,
    ]
    if config.engine.kind == "vllm":
        # vLLM's OpenAI API on its named port, under the pool's model name (not the mount)
        args += ["--openai-port", str(OPENAI_PORT), "--served-model-name", config.model.name]
    flags = WORKER_FLAGS[config.engine.kind]
    rest = {k: v for k, v in config.engine.args if k not in flags}
    for key, value in config.engine.args:
        flag = flags.get(key)
        if flag is None:
            continue
        if isinstance(value, bool):
            args.append(flag if value else flag.replace("--", "--no-", 1))
        elif isinstance(value, float):
            args += [flag, f"{value:g}"]
        else:
            args += [flag, str(value)]
    if config.engine.kind == "sim" and config.traffic.classes:
        # the pool's classes carry priorities: the sim engine schedules by them, as the
        # vLLM engine always does (engine/vllm.py: --scheduling-policy priority)
        args += ["--sim-opt", "scheduling_policy=priority"]
    if rest:
        # every other engine arg (vLLM's, in the pool's camelCase): the worker checks them
        # against the same table the operator did (preheat.api.engine_args) before starting
        args += ["--engine-args", json.dumps(rest, sort_keys=True, separators=(",", ":"))]
    return args


def _node_selector(config: PoolConfig, options: BuildOptions) -> dict[str, str]:
    gpu_type = config.resources.gpu_type
    if not gpu_type:
        return {}
    if gpu_type not in options.gpu_types:
        known = ", ".join(sorted(options.gpu_types)) or "none"
        raise BuildError(
            f"unknown resources.gpuType {gpu_type!r}: this operator knows {known}; use one of "
            "them, leave gpuType empty for any GPU node, or add it to the operator's gpuTypes "
            "(Helm value operator.gpuTypes)"
        )
    return dict(options.gpu_types[gpu_type])


def _resources(config: PoolConfig) -> dict[str, Any]:
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    r = config.resources
    if r.cpu:
        requests["cpu"] = r.cpu
    if r.memory:
        requests["memory"] = limits["memory"] = r.memory
    if r.gpus > 0:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(r.gpus)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _env_var(e: EnvVar) -> dict[str, Any]:
    if not e.secret_name:
        return {"name": e.name, "value": e.value}
    ref: dict[str, Any] = {"name": e.secret_name, "key": e.secret_key}
    if e.optional:
        ref["optional"] = True
    return {"name": e.name, "valueFrom": {"secretKeyRef": ref}}


WORKER_SECURITY_CONTEXT: Mapping[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
"""The restrictive settings vLLM runs under. Not set, and why: ``runAsNonRoot`` (vLLM's
official image runs as root and writes its caches under /root), ``readOnlyRootFilesystem``
(vLLM, torch.compile and Triton write caches under $HOME and /tmp at start-up)."""


def _volumes(config: PoolConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts) for the model and, for vLLM, shared memory."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    src = config.model.source
    if src.kind == "pvc":
        volumes.append(
            {"name": "model", "persistentVolumeClaim": {"claimName": src.claim, "readOnly": True}}
        )
        mount = {"name": "model", "mountPath": MODEL_MOUNT, "readOnly": True}
        if src.path:
            mount["subPath"] = src.path
        mounts.append(mount)
    elif src.kind == "hostPath":
        volumes.append({"name": "model", "hostPath": {"path": src.path, "type": "Directory"}})
        mounts.append({"name": "model", "mountPath": MODEL_MOUNT, "readOnly": True})
    if config.engine.kind == "vllm":
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return volumes, mounts


def _scheduling(config: PoolConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    zones = config.topology.zones
    if zones:
        out["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": ZONE_LABEL, "operator": "In", "values": list(zones)}
                            ]
                        }
                    ]
                }
            }
        }
    if config.topology.spread != "none":
        # hard only across zones the pool names: on nodes without zone labels (kind, most
        # on-premises GPU clusters) a DoNotSchedule spread on the zone key leaves every
        # worker Pending
        hard = config.topology.spread == "balanced" and len(zones) >= 2
        out["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE_LABEL,
                "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
                "labelSelector": {"matchLabels": selector_labels(config)},
            },
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": selector_labels(config)},
            },
        ]
    return out


def startup_failure_threshold(config: PoolConfig, options: BuildOptions, period_s: int) -> int:
    """Startup probe attempts that cover model load and warm-up (sim: its own load times)."""
    budget = float(options.startup_budget_s.get(config.engine.kind, 1800))
    args = dict(config.engine.args)
    sim_time = sum(
        float(v) for k in ("loadTime", "warmupTime") if isinstance(v := args.get(k, 0), int | float)
    )
    budget = max(budget, 3 * sim_time)
    return max(1, math.ceil(budget / period_s))


def termination_grace_s(options: BuildOptions) -> int:
    """> preStop sleep + drain grace: the kubelet's SIGKILL never cuts a drain short."""
    return options.pre_stop_sleep_s + options.drain_grace_s + options.termination_margin_s


def build_deployment(
    config: PoolConfig,
    owner: Owner,
    options: BuildOptions,
    *,
    active: int | None = None,
    control_token_digest: str = "",
) -> dict[str, Any]:
    """The worker Deployment: replicas = active + the warm standby that count keeps
    (:func:`preheat.core.autoscaling.standby.wanted`: none at zero); warming pods fill either.

    ``active`` is the autoscaler's current target (``status.desiredReplicas``); by default
    ``replicas.desired`` from the spec. New pods start as standby and are promoted by the
    operator (:func:`preheat.core.control.step`); rolling updates never take a pod down before its
    replacement is warm (``maxUnavailable: 0``). The worker reads its control token from
    the pool's Secret (:func:`control_secret_name`); ``control_token_digest`` (when given)
    goes on the pod template, so a new token rolls the workers.
    """
    want_active = config.replicas.desired if active is None else active
    want_active = min(max(want_active, config.replicas.min), config.replicas.max)
    volumes, mounts = _volumes(config)
    image = config.engine.image or options.worker_image
    pod = merge_pod(options.worker_pod, config.pod)

    def ready_probe() -> dict[str, Any]:
        # Kubernetes' default timeoutSeconds is 1: a worker busy with a long prefill (or a
        # loaded node) answering its probe a little late would flap out of Ready / be killed
        return {"httpGet": {"path": "/ready", "port": "http"}, "timeoutSeconds": PROBE_TIMEOUT_S}

    container: dict[str, Any] = {
        "name": "worker",
        "image": image,
        "args": worker_args(config, options),
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "PREHEAT_POOL", "value": config.name},
            {
                "name": CONTROL_TOKEN_ENV,
                "valueFrom": {
                    "secretKeyRef": {
                        "name": control_secret_name(config),
                        "key": CONTROL_SECRET_KEY,
                    }
                },
            },
            {
                "name": CACHE_TOKEN_ENV,
                "valueFrom": {
                    "secretKeyRef": {
                        "name": control_secret_name(config),
                        "key": CACHE_SECRET_KEY,
                        "optional": True,
                    }
                },
            },
            *(_env_var(e) for e in pod.env),
        ],
        "ports": [
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "control", "containerPort": CONTROL_PORT, "protocol": "TCP"},
            *(
                [{"name": "openai", "containerPort": OPENAI_PORT, "protocol": "TCP"}]
                if config.engine.kind == "vllm"
                else []
            ),
        ],
        "startupProbe": {
            **ready_probe(),
            "periodSeconds": 5,
            "failureThreshold": startup_failure_threshold(config, options, 5),
        },
        "readinessProbe": {**ready_probe(), "periodSeconds": 2, "failureThreshold": 1},
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "periodSeconds": 10,
            "timeoutSeconds": PROBE_TIMEOUT_S,
            "failureThreshold": 3,
        },
        "lifecycle": {"preStop": {"sleep": {"seconds": options.pre_stop_sleep_s}}},
        "securityContext": dict(WORKER_SECURITY_CONTEXT),
        # a worker that refuses to start (bad engine args...) says why on stderr: that tail
        # becomes the termination message the pool's Degraded condition quotes
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if pod.env_from_secrets:
        container["envFrom"] = [{"secretRef": {"name": n}} for n in pod.env_from_secrets]
    resources = _resources(config)
    if resources:
        container["resources"] = resources
    if mounts:
        container["volumeMounts"] = mounts
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "terminationGracePeriodSeconds": termination_grace_s(options),
        "containers": [container],
    }
    if pod.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in pod.image_pull_secrets]
    for key, value in (
        ("serviceAccountName", pod.service_account),
        ("runtimeClassName", pod.runtime_class),
        ("priorityClassName", pod.priority_class),
    ):
        if value:
            pod_spec[key] = value
    node_selector = _node_selector(config, options)
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if config.resources.gpus > 0:
        pod_spec["tolerations"] = [dict(GPU_TOLERATION)]
    pod_spec.update(_scheduling(config))
    if volumes:
        pod_spec["volumes"] = volumes
    template_meta: dict[str, Any] = {"labels": {**common_labels(config), LABEL_ROLE: "standby"}}
    if control_token_digest:
        template_meta["annotations"] = {ANNOTATION_CONTROL_TOKEN_DIGEST: control_token_digest}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(config, owner),
        "spec": {
            "replicas": want_active + wanted(config.replicas, want_active),
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(config)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": template_meta,
                "spec": pod_spec,
            },
        },
    }


def build_service(config: PoolConfig, owner: Owner) -> dict[str, Any]:
    """A headless Service: DNS lists every ready worker; routers watch pods for roles."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(config, owner),
        "spec": {
            "clusterIP": "None",
            "selector": selector_labels(config),
            "ports": [
                {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"},
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    }


def build_pdb(config: PoolConfig, owner: Owner) -> dict[str, Any]:
    """Voluntary disruptions (node drains) take one worker at a time; pods that never got
    warm do not block a drain."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _metadata(config, owner),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(config)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def _meta_label(kind: str, label: str) -> str:
    """Prometheus's discovery meta label for a Kubernetes label (``.``/``/`` become ``_``)."""
    return f"__meta_kubernetes_{kind}_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)


SERIES_LABELS = (("service", LABEL_POOL, "pool"), ("pod", LABEL_ROLE, "role"))
"""(object, Kubernetes label, series label): what every worker series carries, so the
dashboard's and the autoscaler's ``pool="..."`` selectors find the workers' metrics."""


def build_service_monitor(
    config: PoolConfig, owner: Owner, options: BuildOptions | None = None
) -> dict[str, Any]:
    """Prometheus Operator scrape config for the workers' /metrics: labelled with
    ``options.service_monitor_labels`` (so a kube-prometheus-stack Prometheus selects it),
    every series labelled ``pool`` and ``role`` (:data:`SERIES_LABELS`)."""
    meta = _metadata(config, owner)
    extra = dict((options or BuildOptions()).service_monitor_labels)
    if extra:
        meta["labels"] = {**extra, **meta["labels"]}
    relabel = [
        {"action": "replace", "sourceLabels": [_meta_label(kind, k)], "targetLabel": target}
        for kind, k, target in SERIES_LABELS
    ]
    endpoint = {"port": "http", "path": "/metrics", "interval": "15s", "relabelings": relabel}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": selector_labels(config)},
            "namespaceSelector": {"matchNames": [config.namespace]},
            "endpoints": [endpoint],
        },
    }


PART_OF_LABEL = "app.kubernetes.io/part-of"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace


def build_network_policy(
    config: PoolConfig, owner: Owner, options: NetworkPolicyOptions
) -> dict[str, Any]:
    """Ingress to the pool's workers: every worker port from the control plane's pods (the
    router: gRPC and the OpenAI port; the operator: the control port and /metrics), the
    metrics port from the scrapers' namespaces; nothing else. Egress is left open (model
    downloads, the hub)."""

    def port(n: int) -> dict[str, Any]:
        return {"protocol": "TCP", "port": n}

    worker_ports = [GRPC_PORT, HTTP_PORT, CONTROL_PORT]
    if config.engine.kind == "vllm":
        worker_ports.append(OPENAI_PORT)
    control_plane: dict[str, Any] = {"podSelector": {"matchLabels": {PART_OF_LABEL: "preheat"}}}
    if options.control_plane_namespace:
        control_plane["namespaceSelector"] = {
            "matchLabels": {NAMESPACE_NAME_LABEL: options.control_plane_namespace}
        }
    scrapers: dict[str, Any] = {"namespaceSelector": {}}
    if options.metrics_namespaces:
        scrapers["namespaceSelector"] = {
            "matchExpressions": [
                {
                    "key": NAMESPACE_NAME_LABEL,
                    "operator": "In",
                    "values": list(options.metrics_namespaces),
                }
            ]
        }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(config, owner),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(config)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [control_plane], "ports": [port(n) for n in worker_ports]},
                {"from": [scrapers], "ports": [port(HTTP_PORT)]},
            ],
        },
    }


def desired_children(
    config: PoolConfig,
    owner: Owner,
    options: BuildOptions,
    *,
    active: int | None = None,
    control_token_digest: str = "",
) -> list[dict[str, Any]]:
    """Every object the pool should own, in apply order. Raises :class:`BuildError`.

    The control-token Secret is not among them: its token is random, made once
    (:func:`build_control_secret`) and never patched back.
    """
    bad_name = pool_name_problem(config.name)
    if bad_name:
        raise BuildError(f"metadata.name: {bad_name}; recreate the pool under a shorter name")
    children = [
        build_deployment(
            config, owner, options, active=active, control_token_digest=control_token_digest
        ),
        build_service(config, owner),
        build_pdb(config, owner),
    ]
    if options.service_monitor:
        children.append(build_service_monitor(config, owner, options))
    if options.network_policy.enabled:
        children.append(build_network_policy(config, owner, options.network_policy))
    return children


# --- needs update ------------------------------------------------------------------------

EXACT_MAPS = frozenset({"nodeSelector", "requests", "limits", "matchLabels"})
"""Maps we own entirely: a key we no longer set must go, so they compare exactly."""
QUANTITY_MAPS = frozenset({"requests", "limits"})
"""Maps of resource quantities: compared by value (``0.5`` == ``500m``, as the API server
stores them canonically; :mod:`preheat.core.quantity`)."""


def diff(desired: Any, observed: Any, path: str = "") -> list[str]:
    """Paths where ``observed`` differs from ``desired`` in a field that we set.

    Fields only the observed object has (``status``, ``uid``, ``resourceVersion``, fields
    the API server defaulted) are ignored, except inside :data:`EXACT_MAPS`. Lists compare
    item by item. Scalars compare as text, so a quantity sent as ``1`` equals ``"1"``; in
    ``requests`` and ``limits`` by value, so ``cpu: "0.5"`` equals the stored ``500m``.
    """
    if isinstance(desired, Mapping):
        if not isinstance(observed, Mapping):
            return [path or "<root>"]
        out = []
        key = path.rsplit(".", 1)[-1]
        if key in EXACT_MAPS:
            out += [f"{path}.{k}" for k in observed if k not in desired]
        for k, v in desired.items():
            sub = f"{path}.{k}" if path else str(k)
            if k not in observed:
                out.append(sub)
            elif key in QUANTITY_MAPS and same_quantity(v, observed[k]):
                continue
            else:
                out += diff(v, observed[k], sub)
        return out
    if isinstance(desired, list):
        if not isinstance(observed, list) or len(desired) != len(observed):
            return [path]
        out = []
        for i, (d, o) in enumerate(zip(desired, observed, strict=True)):
            out += diff(d, o, f"{path}[{i}]")
        return out
    if desired == observed or (
        not isinstance(desired, bool)
        and not isinstance(observed, bool)
        and str(desired) == str(observed)
    ):
        return []
    return [path]


def needs_update(desired: Mapping[str, Any], observed: Mapping[str, Any] | None) -> bool:
    """True when ``observed`` is missing or differs from ``desired`` where we set a field."""
    return observed is None or bool(diff(desired, observed))
