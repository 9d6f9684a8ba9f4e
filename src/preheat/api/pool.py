"""The ``InferencePool`` custom resource (``preheat.dev/v1alpha1``, short name ``ipool``).

Three stages, as for every external schema in Preheat:

1. **External schema**: :class:`InferencePoolSpec` / :class:`InferencePoolStatus`, pydantic
   models with camelCase aliases and ``extra="forbid"``. The CRD in ``crds/`` is generated
   from them (``scripts/gen_crd.py``, :func:`crd`), so the OpenAPI schema, its defaults and
   its ``x-kubernetes-validations`` (CEL) rules come from here and nowhere else.
2. **Defaults and validation** that report *every* problem at once: :func:`validate_spec`
   returns a list of sentences that say what is wrong ("replicas.min (5) must be <=
   replicas.max (3)"); the cross-field checks are the same rules the CEL expressions state,
   with the same messages, so a pool the API server accepted passes here too.
3. **Internal config**: :func:`to_config` makes a frozen
   :class:`preheat.core.manifests.PoolConfig` (durations in seconds, no ``Optional``) or
   raises :class:`PoolSpecError` listing every problem.

Durations are strings like ``"500ms"``, ``"60s"``, ``"10m"`` or ``"1h30m"``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic.alias_generators import to_camel

from preheat.api import engine_args
from preheat.api.traffic import TrafficSpec, to_traffic
from preheat.api.traffic import cross_problems as traffic_problems
from preheat.core.autoscaling.forecast import SHORTFALL_EDGES
from preheat.core.blocks import MAX_GPU_BLOCKS
from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.manifests import GROUP, KIND, PLURAL, VERSION
from preheat.core.pool import (
    DEFAULT_HORIZON_S,
    AutoscalingConfig,
    EngineArgValue,
    EngineConfig,
    EnvVar,
    ModelConfig,
    ModelSource,
    Objective,
    PanicConfig,
    PodConfig,
    PoolConfig,
    PredictiveConfig,
    ReplicasConfig,
    ResourcesConfig,
    RoutingConfig,
    ScaleRule,
    Signal,
    TopologyConfig,
)

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
# pvc://CLAIM[/SUB/PATH] or hostpath:///ABSOLUTE/PATH
SOURCE_PATTERN = r"^(pvc://[a-z0-9]([-a-z0-9.]*[a-z0-9])?(/[^/]+)*/?|hostpath:///.*)$"
LATENCY_SIGNALS = ("ttft", "itl", "e2e")
PER_REPLICA_SIGNALS = ("queueDepth", "concurrency")
SIM_ONLY_ARGS = ("numGpuBlocks", "timeScale", "loadTime", "warmupTime", "seed", "modelSize")
VLLM_ONLY_ARGS = ("gpuMemoryUtilization", "dtype", "enforceEager", "tensorParallelSize")
DURATION_ARGS = ("loadTime", "warmupTime")

Duration = str  # validated by DURATION_PATTERN; parse with parse_duration


def parse_duration(text: str) -> float:
    """Seconds in a duration string such as ``"1h30m"`` or ``"250ms"``; ValueError if bad."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{text!r} is not a duration like 500ms, 60s, 10m or 1h30m")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))


def _duration(default: str | None, description: str) -> Any:
    """A duration field (None: optional, no default value)."""
    return Field(default=default, pattern=DURATION_PATTERN, max_length=32, description=description)


def _cel(
    rule: str, message_expression: str, *, reason: str = "FieldValueInvalid"
) -> dict[str, str]:
    return {"rule": rule, "messageExpression": message_expression, "reason": reason}


def _validations(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        strict=True,
    )


# --- spec -----------------------------------------------------------------------------


class ModelSpec(_Model):
    """The model a pool serves."""

    name: str = Field(
        min_length=1, max_length=256, description="Model name, e.g. meta-llama/Llama-3.1-8B."
    )
    source: str | None = Field(
        default=None,
        max_length=1024,
        pattern=SOURCE_PATTERN,
        description=(
            "Where the weights are: pvc://CLAIM[/SUB/PATH] or hostpath:///PATH, mounted at "
            "/models. Unset: the engine fetches the model by name."
        ),
    )


def _engine_args_schema(schema: dict[str, Any]) -> None:
    """Adds every vLLM engine argument of the pinned vLLM (the generated table,
    :mod:`preheat.api.engine_args`) beside the typed fields, which keep their own schema."""
    props = schema.setdefault("properties", {})
    for key, prop in engine_args.crd_properties().items():
        props.setdefault(key, prop)
    schema["properties"] = dict(sorted(props.items()))
    schema.pop("additionalProperties", None)


class EngineArgs(_Model):
    """Engine settings. The typed fields below are Preheat's own (the worker's flags; the
    sim's); any other key is a vLLM engine argument of the pinned vLLM in camelCase
    (``maxNumBatchedTokens``, ``quantization``, ``speculativeConfig``, ...), checked against
    vLLM's own definitions (:func:`preheat.api.engine_args.problems`). Unset means the
    engine's default."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_engine_args_schema)

    max_num_seqs: int | None = Field(
        default=None, ge=1, le=65536, description="Max running sequences."
    )
    max_model_len: int | None = Field(
        default=None, ge=1, le=10_000_000, description="Context window."
    )
    block_size: int | None = Field(default=None, ge=1, le=1024, description="Tokens per KV block.")
    gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1, description="vllm only: fraction of GPU memory to use."
    )
    dtype: Literal["auto", "float16", "bfloat16", "float32"] | None = Field(
        default=None, description="vllm only: weight and activation dtype."
    )
    enforce_eager: bool | None = Field(
        default=None, description="vllm only: skip CUDA graph capture."
    )
    tensor_parallel_size: int | None = Field(
        default=None, ge=1, le=64, description="vllm only: GPUs per replica for one model."
    )
    num_gpu_blocks: int | None = Field(
        default=None, ge=1, le=MAX_GPU_BLOCKS, description="sim only: KV blocks."
    )
    time_scale: float | None = Field(
        default=None, gt=0, description="sim only: multiplies every simulated duration."
    )
    load_time: Duration | None = _duration(None, "sim only: load time.")
    warmup_time: Duration | None = _duration(None, "sim only: warm-up.")
    seed: int | None = Field(default=None, ge=0, description="sim only: seed for the sim's text.")
    model_size: Literal["8b", "32b"] | None = Field(
        default=None,
        description=(
            "sim only: the measured model shape whose H100 costs the sim engine uses (8b: "
            "Llama-3-8B, the default; 32b: Qwen2.5-32B-like)."
        ),
    )


ENGINE_SIM_ONLY_RULE = _cel(
    "self.kind == 'sim' || !has(self.args) || !("
    + " || ".join(f"has(self.args.{a})" for a in SIM_ONLY_ARGS)
    + ")",
    "'engine.args " + ", ".join(SIM_ONLY_ARGS) + " apply to engine kind sim only'",
)
ENGINE_VLLM_ONLY_RULE = _cel(
    "self.kind == 'vllm' || !has(self.args) || !("
    + " || ".join(f"has(self.args.{a})" for a in VLLM_ONLY_ARGS)
    + ")",
    "'engine.args " + ", ".join(VLLM_ONLY_ARGS) + " apply to engine kind vllm only'",
)


class EngineSpec(_Model):
    model_config = ConfigDict(
        json_schema_extra=_validations(ENGINE_SIM_ONLY_RULE, ENGINE_VLLM_ONLY_RULE)
    )

    kind: Literal["vllm", "sim"] = Field(
        default="vllm", description="vllm (GPUs) or sim (a simulated engine for CPU nodes)."
    )
    image: str = Field(
        default="",
        max_length=512,
        description="Worker image. Empty: the operator's default worker image.",
    )
    args: EngineArgs | None = Field(default=None, description="Engine settings.")


RESOURCES_GPU_TYPE_RULE = _cel(
    "!has(self.gpuType) || self.gpuType == '' || !has(self.gpus) || self.gpus >= 1",
    "'resources.gpuType (' + self.gpuType + ') needs resources.gpus >= 1'",
)

QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$"


class ResourcesSpec(_Model):
    model_config = ConfigDict(json_schema_extra=_validations(RESOURCES_GPU_TYPE_RULE))

    gpus: int | None = Field(
        default=None,
        ge=0,
        le=16,
        description=(
            "GPUs per replica. Unset: 1 for engine vllm (or tensorParallelSize), 0 for sim."
        ),
    )
    gpu_type: str = Field(
        default="",
        max_length=63,
        description="GPU type (e.g. nvidia-h100): selects nodes. Empty: any GPU node.",
    )
    cpu: str = Field(
        default="", pattern=r"^$|" + QUANTITY_PATTERN, max_length=32, description="CPU request."
    )
    memory: str = Field(
        default="", pattern=r"^$|" + QUANTITY_PATTERN, max_length=32, description="Memory request."
    )


class TopologySpec(_Model):
    zones: list[Annotated[str, StringConstraints(min_length=1, max_length=63)]] = Field(
        default_factory=list,
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Zones the replicas may run in (topology.kubernetes.io/zone). Empty: any.",
    )
    spread: Literal["balanced", "bestEffort", "none"] = Field(
        default="balanced",
        description=(
            "balanced: across two or more named zones, zones differ by at most one replica "
            "(pods wait otherwise); with fewer zones named, as bestEffort (nodes may carry "
            "no zone label); bestEffort: prefer balance; none: no spreading."
        ),
    )


REPLICAS_MIN_MAX_RULE = _cel(
    "self.min <= self.max",
    "'replicas.min (' + string(self.min) + ') must be <= replicas.max (' + string(self.max) + ')'",
)


class ReplicasSpec(_Model):
    model_config = ConfigDict(json_schema_extra=_validations(REPLICAS_MIN_MAX_RULE))

    min: int = Field(default=1, ge=0, le=1000, description="Fewest active replicas.")
    max: int = Field(ge=1, le=1000, description="Most active replicas.")
    warm_standby: int = Field(
        default=0, ge=0, le=100, description="Loaded, warmed replicas kept out of traffic."
    )
    desired: int | None = Field(
        default=None,
        ge=0,
        le=1000,
        description=(
            "Active replicas wanted now (the scale subresource: kubectl scale, the "
            "autoscaler). Clamped to [min, max]. Unset: min."
        ),
    )


def _objective_rule(signals: tuple[str, ...], needs: tuple[str, ...], label: str) -> dict[str, str]:
    others = [f for f in ("percentile", "targetMs", "perReplica", "targetRatio") if f not in needs]
    cond = " && ".join([f"has(self.{f})" for f in needs] + [f"!has(self.{f})" for f in others])
    member = "[" + ", ".join(f"'{s}'" for s in signals) + "]"
    return _cel(
        f"!(self.signal in {member}) || ({cond})",
        f"'objective ' + self.signal + ': {label}'",
    )


OBJECTIVE_LATENCY_RULE = _objective_rule(
    LATENCY_SIGNALS,
    ("percentile", "targetMs"),
    "a latency signal needs percentile and targetMs (and no perReplica or targetRatio)",
)
OBJECTIVE_QUEUE_RULE = _objective_rule(
    PER_REPLICA_SIGNALS,
    ("perReplica",),
    "a per-replica signal needs perReplica (and no percentile, targetMs or targetRatio)",
)
OBJECTIVE_KV_RULE = _objective_rule(
    ("kvCacheUsage",),
    ("targetRatio",),
    "kvCacheUsage needs targetRatio (and no percentile, targetMs or perReplica)",
)


class ObjectiveSpec(_Model):
    """One target: {signal: ttft, percentile: 95, targetMs: 400}, {signal: queueDepth,
    perReplica: 4} (requests waiting), {signal: concurrency, perReplica: 48} (requests
    running or waiting) or {signal: kvCacheUsage, targetRatio: 0.8}."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            OBJECTIVE_LATENCY_RULE, OBJECTIVE_QUEUE_RULE, OBJECTIVE_KV_RULE
        )
    )

    signal: Literal["ttft", "itl", "e2e", "queueDepth", "concurrency", "kvCacheUsage"] = Field(
        description=(
            "What is measured: a latency (ttft, itl, e2e: with percentile and targetMs), "
            "requests per replica (queueDepth: waiting, concurrency: running or waiting; "
            "with perReplica) or the KV cache's use (kvCacheUsage: with targetRatio)."
        )
    )
    percentile: float | None = Field(
        default=None, ge=50, le=99.99, description="Latency signals: which percentile (50-99.99)."
    )
    target_ms: float | None = Field(
        default=None,
        gt=0,
        le=3_600_000,
        description="Latency signals: the percentile's target in milliseconds.",
    )
    per_replica: float | None = Field(
        default=None,
        gt=0,
        le=100_000,
        description="queueDepth and concurrency: the requests one replica should hold.",
    )
    target_ratio: float | None = Field(
        default=None, gt=0, le=1, description="kvCacheUsage: the fraction of KV blocks in use."
    )


class ScaleUpSpec(_Model):
    stabilization: Duration = _duration("0s", "Use the lowest recommendation over this window.")
    cooldown: Duration = _duration("15s", "Wait at least this long after a scale-up.")
    max_step: int = Field(default=4, ge=1, le=1000, description="Add at most this many at once.")


class ScaleDownSpec(_Model):
    stabilization: Duration = _duration(
        "300s",
        "Use the highest recommendation over this window (with autoscaling.predictive on and "
        "a season learned: at most the pods for the forecast's peak over the window ahead, "
        "over its p90 shortfall).",
    )
    cooldown: Duration = _duration("120s", "Wait at least this long after any scaling.")
    max_step: int = Field(default=1, ge=1, le=1000, description="Remove at most this many at once.")


class PanicSpec(_Model):
    threshold: float = Field(
        default=2.0, gt=1, le=100, description="Observed/target ratio that enters panic mode."
    )
    window: Duration = _duration("10s", "Short window that panic mode looks at.")


PREDICTIVE_PERIOD_MIN = "1m"
PREDICTIVE_PERIOD_RULE = _cel(
    f"!has(self.period) || duration(self.period) >= duration('{PREDICTIVE_PERIOD_MIN}')",
    "'autoscaling.predictive.period (' + self.period + ') must be at least "
    f"{PREDICTIVE_PERIOD_MIN}'",
)


class PredictiveSpec(_Model):
    model_config = ConfigDict(json_schema_extra=_validations(PREDICTIVE_PERIOD_RULE))

    enabled: bool = Field(
        default=False,
        description="Scale for the forecast arrival rate (Holt-Winters on the pool's own "
        "history: level, trend, daily season) as well as the observed one.",
    )
    horizon: Duration | None = _duration(
        None,
        "How far ahead to size for. Default: the pool's measured cold start (the median, over "
        "its pods, of creation to Ready) plus the evaluation interval and half the demand "
        "window (the observed rate is the window's mean), 60s until a pod has been measured.",
    )
    trust: float = Field(
        default=0.5, ge=0, le=1, description="Share of a predicted rise to act on (0-1)."
    )
    period: Duration = _duration(
        "24h",
        "The forecast's season: traffic repeats with this period (a day). Learned in 24 "
        "slots of it (an hour of a day), used once the history covers one period.",
    )
    weekly: bool = Field(
        default=False,
        description="A second, weekly season: what each day of the week adds to the daily "
        "one, by the slot (168 offsets: an hour of a week), used once the history covers "
        "seven periods.",
    )
    headroom: float = Field(
        default=0,
        ge=0,
        lt=100,
        description="Size for this percentile of the forecast's own shortfall: how far the "
        "arrival rate a horizon later ran above the forecast (negative where it ran under "
        "it), over about the last period (90: the rise that 9 in 10 of the horizons stayed "
        "within; 50 with keep: the forecast without its median bias). 0: none.",
    )
    headroom_mode: Literal["size", "keep"] = Field(
        default="size",
        description="What the headroom does. size: the pool is sized for the forecast over "
        "its shortfall (scales up for it). keep: the headroom only keeps pods the pool "
        "already has (a scale-down stops at it) and never starts one.",
    )


class AutoscalingSpec(_Model):
    objectives: list[ObjectiveSpec] = Field(
        default_factory=list,
        max_length=8,
        description="Targets to hold. Empty: no autoscaling (replicas.desired, else min).",
    )
    window: Duration = _duration("60s", "Window over which percentiles are computed.")
    scale_up: ScaleUpSpec = Field(
        default_factory=ScaleUpSpec,
        json_schema_extra={"default": {}},
        description="How fast the pool grows: step size and cooldown.",
    )
    scale_down: ScaleDownSpec = Field(
        default_factory=ScaleDownSpec,
        json_schema_extra={"default": {}},
        description="How fast the pool shrinks: step size, cooldown and stabilization window.",
    )
    tolerance: float = Field(
        default=0.1, ge=0, lt=1, description="No change while within this ratio of target."
    )
    panic: PanicSpec | None = Field(
        default=None, description="Scale up fast on a short window when far over target."
    )
    predictive: PredictiveSpec | None = Field(
        default=None,
        description="Forecast capacity: scale up ahead of a predicted rise. Off by default.",
    )


class RoutingSpec(_Model):
    session_ttl: Duration = Field(
        default="10m",
        alias="sessionTTL",
        pattern=DURATION_PATTERN,
        max_length=32,
        description="How long a session stays bound to its pod after its last request.",
    )
    hotspot_margin_ms: float = Field(
        default=150.0,
        ge=0,
        le=600_000,
        description="A session leaves its pod when another is predicted this much faster.",
    )


SPEC_TENSOR_PARALLEL_RULE = _cel(
    "!has(self.engine) || !has(self.engine.args) || !has(self.engine.args.tensorParallelSize)"
    " || !has(self.resources) || !has(self.resources.gpus)"
    " || self.engine.args.tensorParallelSize <= self.resources.gpus",
    "'engine.args.tensorParallelSize (' + string(self.engine.args.tensorParallelSize)"
    " + ') must be <= resources.gpus (' + string(self.resources.gpus) + ')'",
)


RESERVED_ENV = ("POD_NAME", "PREHEAT_POOL", "PREHEAT_CONTROL_TOKEN", "PREHEAT_CACHE_TOKEN")
"""Variables the operator sets on every worker (core/manifests.py): a pool may not set them."""
_K8S_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
_ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
ENV_RESERVED_RULE = _cel(
    "!(self.name in " + "[" + ", ".join(f"'{n}'" for n in RESERVED_ENV) + "])",
    "'pod.env: ' + self.name + ' is set by the operator; choose another name'",
)
ENV_ONE_SOURCE_RULE = _cel(
    "has(self.value) != has(self.valueFrom)",
    "'pod.env ' + self.name + ': set exactly one of value and valueFrom'",
)


class LocalObjectRef(_Model):
    name: str = Field(max_length=253, pattern=_K8S_NAME, description="The object's name.")


class SecretKeyRef(_Model):
    name: str = Field(max_length=253, pattern=_K8S_NAME, description="The Secret's name.")
    key: str = Field(max_length=253, min_length=1, description="The key within the Secret.")
    optional: bool = Field(default=False, description="The Secret or its key may be missing.")


class EnvValueFrom(_Model):
    secret_key_ref: SecretKeyRef = Field(description="One key of a Secret in the namespace.")


class EnvVarSpec(_Model):
    model_config = ConfigDict(
        json_schema_extra=_validations(ENV_RESERVED_RULE, ENV_ONE_SOURCE_RULE)
    )

    name: str = Field(max_length=256, pattern=_ENV_NAME, description="The variable's name.")
    value: str | None = Field(default=None, max_length=32768, description="A literal value.")
    value_from: EnvValueFrom | None = Field(
        default=None, description="The value from a Secret (a model hub's token, say)."
    )


class EnvFromSpec(_Model):
    secret_ref: LocalObjectRef = Field(
        description="A Secret in the namespace: each of its keys becomes a variable."
    )


class PodSpec(_Model):
    """The worker pod's settings besides the engine; the operator's config
    (``workerPod``) gives every pool's defaults, these win."""

    image_pull_secrets: list[LocalObjectRef] = Field(
        default_factory=list,
        max_length=16,
        description="Secrets to pull the worker image with (added to the operator's).",
    )
    service_account_name: str = Field(
        default="",
        max_length=253,
        description="The workers' ServiceAccount. Empty: the operator's, else the default.",
    )
    runtime_class_name: str = Field(
        default="", max_length=253, description="A RuntimeClass (e.g. nvidia). Empty: default."
    )
    priority_class_name: str = Field(
        default="", max_length=253, description="A PriorityClass for the workers. Empty: default."
    )
    env: list[EnvVarSpec] = Field(
        default_factory=list,
        max_length=64,
        description="Extra environment variables of the worker container (by name over the "
        "operator's).",
    )
    env_from: list[EnvFromSpec] = Field(
        default_factory=list,
        max_length=16,
        description="Secrets whose every key becomes a variable (added to the operator's).",
    )


def _env_problems(env: Any, where: str) -> list[str]:
    """The env rules the CEL rules of :class:`EnvVarSpec` state, on the raw list."""
    problems = []
    for e in env if isinstance(env, list) else []:
        name = e.get("name") if isinstance(e, Mapping) else None
        if not isinstance(name, str):
            continue
        if name in RESERVED_ENV:
            problems.append(f"{where}.env: {name} is set by the operator; choose another name")
        has_from = e.get("valueFrom", e.get("value_from")) is not None
        if (e.get("value") is not None) == has_from:
            problems.append(f"{where}.env {name}: set exactly one of value and valueFrom")
    return problems


def read_pod(raw: Any, where: str) -> tuple[PodConfig, list[str]]:
    """A ``pod`` section outside a pool (the operator config's ``workerPod``): its config
    and every problem, each prefixed with ``where``."""
    if raw is None:
        return PodConfig(), []
    if not isinstance(raw, Mapping):
        return PodConfig(), [f"{where}: must be a mapping (got {type(raw).__name__})"]
    problems = _env_problems(raw.get("env"), where)
    try:
        spec = PodSpec.model_validate(raw)
    except ValidationError as e:
        return PodConfig(), [f"{where}.{p}" for p in _pydantic_problems(e)] + problems
    return (PodConfig(), problems) if problems else (pod_config(spec), [])


def pod_config(spec: PodSpec) -> PodConfig:
    """The internal form of a ``pod`` section (the pool's, or the operator's ``workerPod``)."""
    return PodConfig(
        image_pull_secrets=tuple(r.name for r in spec.image_pull_secrets),
        service_account=spec.service_account_name,
        runtime_class=spec.runtime_class_name,
        priority_class=spec.priority_class_name,
        env=tuple(
            EnvVar(e.name, value=e.value or "")
            if e.value_from is None
            else EnvVar(
                e.name,
                secret_name=e.value_from.secret_key_ref.name,
                secret_key=e.value_from.secret_key_ref.key,
                optional=e.value_from.secret_key_ref.optional,
            )
            for e in spec.env
        ),
        env_from_secrets=tuple(e.secret_ref.name for e in spec.env_from),
    )


class InferencePoolSpec(_Model):
    """What a platform team writes."""

    model_config = ConfigDict(json_schema_extra=_validations(SPEC_TENSOR_PARALLEL_RULE))

    model: ModelSpec
    engine: EngineSpec = Field(
        default_factory=EngineSpec,
        json_schema_extra={"default": {}},
        description="The inference engine each worker runs (vllm or sim) and its settings.",
    )
    resources: ResourcesSpec = Field(
        default_factory=ResourcesSpec,
        json_schema_extra={"default": {}},
        description="What one worker pod asks for: GPUs, their type, CPU and memory.",
    )
    topology: TopologySpec = Field(
        default_factory=TopologySpec,
        json_schema_extra={"default": {}},
        description="Where workers may run (zones) and how they spread across them.",
    )
    replicas: ReplicasSpec = Field(
        description="Bounds of the pool's active replicas, its warm standby and desired size."
    )
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec,
        json_schema_extra={"default": {}},
        description="The objectives the autoscaler sizes the pool on, and how fast it moves.",
    )
    routing: RoutingSpec = Field(
        default_factory=RoutingSpec,
        json_schema_extra={"default": {}},
        description="How the router picks a worker for each request of this pool.",
    )
    pod: PodSpec = Field(
        default_factory=PodSpec,
        json_schema_extra={"default": {}},
        description="The worker pod's pull secrets, ServiceAccount, runtime and priority "
        "classes and extra environment, over the operator's defaults.",
    )
    traffic: TrafficSpec = Field(
        default_factory=TrafficSpec,
        json_schema_extra={"default": {}},
        description="SLO classes (TTFT target, priority, sheddable, degradation) and "
        "tenant quotas; the router serves requests by them.",
    )


# --- status ---------------------------------------------------------------------------


class ReplicaStatus(_Model):
    active: int = Field(default=0, ge=0, description="Warm workers taking traffic.")
    standby: int = Field(default=0, ge=0, description="Warm workers held ready for promotion.")
    warming: int = Field(default=0, ge=0, description="Loading or warming up.")
    draining: int = Field(default=0, ge=0, description="Finishing their requests before they stop.")


class Condition(_Model):
    type: str = Field(max_length=64, description="Ready, Scaling or Degraded.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(
        default="", max_length=128, description="A CamelCase word for the last transition."
    )
    message: str = Field(default="", max_length=4096, description="What happened, for people.")
    last_transition_time: str = Field(default="", description="RFC 3339.")
    observed_generation: int = Field(
        default=0, ge=0, description="The pool's metadata.generation the condition is about."
    )


class LastScale(_Model):
    time: str = Field(description="RFC 3339.")
    from_replicas: int = Field(alias="from", ge=0, description="Active replicas before.")
    to_replicas: int = Field(alias="to", ge=0, description="Active replicas after.")
    reason: str = Field(
        default="", max_length=1024, description="Why: the objective and figures that decided."
    )


class RecommendationEntry(_Model):
    time: str = Field(description="RFC 3339.")
    replicas: int = Field(ge=0, description="Active replicas the policy recommended then.")


# the shortfall histogram's bucket edges as the status schema describes them
_SHORTFALL_EDGES = ", ".join(f"{e:g}" for e in SHORTFALL_EDGES)


class ForecastState(_Model):
    time: str = Field(description="RFC 3339: the forecast's last observation.")
    since: str = Field(
        description="RFC 3339: its first observation (the season is used after a period)."
    )
    season_start: str = Field(
        description="RFC 3339: a period's start (the first seasonal slot begins there)."
    )
    period_seconds: float = Field(
        gt=0, description="The autoscaling.predictive.period (seconds) it learned its season for."
    )
    level: float = Field(description="Smoothed arrival rate, req/s.")
    trend: float = Field(description="Trend of the arrival rate, req/s per second.")
    base: float = Field(description="The arrival rate's mean over about a period, req/s.")
    season: list[float] = Field(
        default_factory=list,
        max_length=168,
        description="Seasonal offsets above base, req/s, one per slot of the period (24: an "
        "hour of a day).",
    )
    week_since: str | None = Field(
        default=None,
        description="RFC 3339: the weekly season's first observation (autoscaling.predictive."
        "weekly; it is used after seven periods).",
    )
    week: list[float] = Field(
        default_factory=list,
        max_length=168,
        description="Weekly offsets, req/s: what the day of the week adds to the season, one "
        "per slot of seven periods (168: an hour of a week).",
    )
    error: float | None = Field(
        default=None, ge=0, description="|forecast - observed| / observed of its last checked one."
    )
    shortfalls: list[float] = Field(
        default_factory=list,
        max_length=32,
        description="How far the observed rate ran above each checked forecast, as a share of "
        "the observed (negative: under it): counts per bucket (upper edges "
        f"{_SHORTFALL_EDGES}), decayed over about "
        "a period (autoscaling.predictive.headroom).",
    )


class PolicyHistory(_Model):
    """What the autoscaling policy needs to go on after an operator restart
    (``preheat.operator.policy_history``)."""

    since: str = Field(description="RFC 3339: the policy's first evaluation of the pool.")
    recommendations: list[RecommendationEntry] = Field(
        default_factory=list,
        max_length=100,
        description="The recommendations over the stabilization windows, oldest first "
        "(consecutive repeats dropped): scale-down follows their highest.",
    )
    last_scale_time: str | None = Field(
        default=None, description="RFC 3339: the last scale event (the cooldowns run from it)."
    )
    last_scale_direction: Literal["up", "down"] | None = Field(
        default=None, description="The last scale event's direction."
    )
    forecast: ForecastState | None = Field(
        default=None,
        description="The arrival-rate forecast (autoscaling.predictive), so that its season, "
        "learned over a whole period, survives a restart.",
    )
    cold_start_seconds: float | None = Field(
        default=None,
        gt=0,
        description="The pool's last measured cold start (a pod's creation to warm): the "
        "predictive horizon unless autoscaling.predictive.horizon is set, kept for when the "
        "pods that measured it have gone.",
    )


class InferencePoolStatus(_Model):
    """What the operator observed; never desired state."""

    replicas: ReplicaStatus = Field(
        default_factory=ReplicaStatus, description="The pool's workers by lifecycle state."
    )
    desired_replicas: int = Field(default=0, ge=0, description="Active replicas being aimed at.")
    selector: str = Field(default="", description="Label selector of the pool's worker pods.")
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        description="Ready, Scaling and Degraded, one of each at most.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    last_scale: LastScale | None = Field(
        default=None, description="The autoscaler's last change of the active count, and why."
    )
    policy_history: PolicyHistory | None = Field(
        default=None,
        description="The autoscaler's recent recommendations and last scale, so that a "
        "restarted operator keeps the scale-down window instead of starting it again.",
    )
    observed_generation: int = Field(
        default=0, ge=0, description="The pool's metadata.generation the operator last acted on."
    )


# --- validation and the internal config -------------------------------------------------


class PoolSpecError(PreheatError):
    """An invalid pool spec; ``problems`` has one sentence per problem."""

    def __init__(self, problems: list[str]):
        super().__init__(
            ErrorCode.INVALID_ARGUMENT, "invalid InferencePool: " + "; ".join(problems)
        )
        self.problems = problems


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "spec"


def _pydantic_problems(err: ValidationError) -> list[str]:
    problems = []
    for e in err.errors(include_url=False):
        path = _path(tuple(e["loc"]))
        if e["type"] == "extra_forbidden":
            problems.append(f"{path}: unknown field")
        elif e["type"] == "missing":
            problems.append(f"{path}: required field is missing")
        else:
            msg = e["msg"][0].lower() + e["msg"][1:]
            problems.append(f"{path}: {msg} (got {e['input']!r})")
    return problems


_ABSENT: Any = object()  # a field neither set nor defaulted


def _lookup(raw: Mapping[str, Any], model: type[BaseModel], name: str) -> Any:
    """The value ``raw`` gives field ``name`` of ``model`` (by alias or by name; pydantic
    accepts both), else the field's default, else :data:`_ABSENT`. None counts as unset."""
    info = model.model_fields[name]
    for key in (info.alias or name, name):
        if key in raw and raw[key] is not None:
            return raw[key]
    if info.is_required():
        return _ABSENT
    default = info.get_default(call_default_factory=True)
    if isinstance(default, BaseModel):
        return default.model_dump(by_alias=True)
    return _ABSENT if default is None else default


def _section(raw: Mapping[str, Any], model: type[BaseModel], name: str) -> Mapping[str, Any] | None:
    """A nested mapping of ``raw`` ({} when unset); None when it is not a mapping (its own
    problem is reported by the field-level parse, and the rules that need it are skipped)."""
    value = _lookup(raw, model, name)
    if value is _ABSENT:
        return {}
    return value if isinstance(value, Mapping) else None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _set_aliases(raw: Mapping[str, Any], model: type[BaseModel]) -> set[str]:
    """The aliases of the fields of ``model`` that ``raw`` sets (to something not None)."""
    out: set[str] = set()
    for name, info in model.model_fields.items():
        alias = info.alias or name
        if any(k in raw and raw[k] is not None for k in (alias, name)):
            out.add(alias)
    return out


_ENGINE_ARG_ALIASES = tuple(i.alias or n for n, i in EngineArgs.model_fields.items())
_ENGINE_ARG_NAMES = frozenset((*_ENGINE_ARG_ALIASES, *EngineArgs.model_fields))


def engine_arg_problems(kind: str, args: Mapping[str, Any]) -> list[str]:
    """The problems with the keys of ``args`` (a spec's ``engine.args``) that are not
    :class:`EngineArgs`' typed fields: each must be a vLLM engine argument that engine
    ``kind`` takes (:func:`preheat.api.engine_args.problems`). The worker runs the same
    check on its ``--engine-args``, so it refuses with the same sentences."""
    rest = {k: v for k, v in args.items() if k not in _ENGINE_ARG_NAMES}
    return engine_args.problems(kind, rest, skip=_ENGINE_ARG_ALIASES)


def _cross_field_problems(raw: Mapping[str, Any]) -> list[str]:
    """The checks the CEL rules state, with the same messages (plus what CEL cannot say).

    They read the raw spec, not the parsed model, so that they run and report even when
    other fields are wrong (pydantic's after-validators run only once every field parsed):
    each rule is checked when the fields it compares have the right type, and skipped
    otherwise (those fields' own problems are reported by the field-level parse).
    """
    problems: list[str] = []
    spec = InferencePoolSpec
    replicas = _section(raw, spec, "replicas")
    if replicas is not None:
        lo, hi = _lookup(replicas, ReplicasSpec, "min"), _lookup(replicas, ReplicasSpec, "max")
        if _is_int(lo) and _is_int(hi) and lo > hi:
            problems.append(f"replicas.min ({lo}) must be <= replicas.max ({hi})")
    engine = _section(raw, spec, "engine")
    resources = _section(raw, spec, "resources")
    gpus = _lookup(resources, ResourcesSpec, "gpus") if resources is not None else _ABSENT
    if engine is not None:
        kind = _lookup(engine, EngineSpec, "kind")
        args = _section(engine, EngineSpec, "args")
        if args is not None:
            set_args = _set_aliases(args, EngineArgs)
            if kind == "vllm" and set_args & set(SIM_ONLY_ARGS):
                problems.append(
                    f"engine.args {', '.join(SIM_ONLY_ARGS)} apply to engine kind sim only"
                )
            if kind == "sim" and set_args & set(VLLM_ONLY_ARGS):
                problems.append(
                    f"engine.args {', '.join(VLLM_ONLY_ARGS)} apply to engine kind vllm only"
                )
            problems += engine_arg_problems(kind if kind in ("vllm", "sim") else "vllm", args)
            tp = _lookup(args, EngineArgs, "tensor_parallel_size")
            if _is_int(tp) and _is_int(gpus) and tp > gpus:
                problems.append(
                    f"engine.args.tensorParallelSize ({tp}) must be <= resources.gpus ({gpus})"
                )
    autoscaling = _section(raw, spec, "autoscaling")
    predictive = (
        _section(autoscaling, AutoscalingSpec, "predictive") if autoscaling is not None else None
    )
    if predictive is not None:
        period = _lookup(predictive, PredictiveSpec, "period")
        least = parse_duration(PREDICTIVE_PERIOD_MIN)
        valid = isinstance(period, str) and re.match(DURATION_PATTERN, period)
        if valid and parse_duration(period) < least:
            problems.append(
                f"autoscaling.predictive.period ({period}) must be at least {PREDICTIVE_PERIOD_MIN}"
            )
    if resources is not None:
        gpu_type = _lookup(resources, ResourcesSpec, "gpu_type")
        if isinstance(gpu_type, str) and gpu_type and _is_int(gpus) and gpus < 1:
            problems.append(f"resources.gpuType ({gpu_type}) needs resources.gpus >= 1")
    autoscaling = _section(raw, spec, "autoscaling")
    objectives = _lookup(autoscaling, AutoscalingSpec, "objectives") if autoscaling else []
    seen: set[tuple[str, float | None]] = set()
    for i, o in enumerate(objectives if isinstance(objectives, list) else []):
        signal = o.get("signal") if isinstance(o, Mapping) else None
        if not isinstance(o, Mapping) or signal not in _SIGNALS:
            continue
        have = _set_aliases(o, ObjectiveSpec) - {"signal"}
        rule = _objective_needs(signal)
        if have != set(rule[0]):
            problems.append(f"autoscaling.objectives[{i}]: objective {signal}: {rule[1]}")
        percentile = _lookup(o, ObjectiveSpec, "percentile")
        if percentile is _ABSENT:
            percentile = None
        elif not _is_number(percentile):
            continue
        key = (signal, percentile)
        if key in seen:
            problems.append(
                f"autoscaling.objectives[{i}]: a second {signal} objective"
                + (f" at percentile {percentile:g}" if percentile is not None else "")
                + "; keep one"
            )
        seen.add(key)
    pod = _section(raw, spec, "pod")
    problems += _env_problems(_lookup(pod, PodSpec, "env") if pod is not None else [], "pod")
    topology = _section(raw, spec, "topology")
    zones = _lookup(topology, TopologySpec, "zones") if topology is not None else []
    if isinstance(zones, list):
        names = [z for z in zones if isinstance(z, str)]
        dupes = sorted({z for z in names if names.count(z) > 1})
        if dupes:
            problems.append(f"topology.zones lists {', '.join(dupes)} more than once")
    traffic = _section(raw, spec, "traffic")
    if traffic is not None:
        problems += traffic_problems(traffic)
    return problems


_SIGNALS = (*LATENCY_SIGNALS, *PER_REPLICA_SIGNALS, "kvCacheUsage")


def _objective_needs(signal: str) -> tuple[tuple[str, ...], str]:
    if signal in LATENCY_SIGNALS:
        return (
            ("percentile", "targetMs"),
            "a latency signal needs percentile and targetMs (and no perReplica or targetRatio)",
        )
    if signal in PER_REPLICA_SIGNALS:
        return (
            ("perReplica",),
            "a per-replica signal needs perReplica (and no percentile, targetMs or targetRatio)",
        )
    return (
        ("targetRatio",),
        "kvCacheUsage needs targetRatio (and no percentile, targetMs or perReplica)",
    )


def validate_spec(raw: Mapping[str, Any]) -> tuple[InferencePoolSpec | None, list[str]]:
    """The parsed spec (None when a field is wrong) and every problem with it: each field's
    own, then the cross-field rules, which are checked even when some field is wrong."""
    if not isinstance(raw, Mapping):
        return None, [f"spec: must be a mapping (got {type(raw).__name__})"]
    try:
        spec = InferencePoolSpec.model_validate(raw)
    except ValidationError as e:
        return None, _pydantic_problems(e) + _cross_field_problems(raw)
    return spec, _cross_field_problems(spec.model_dump(by_alias=True))


def _source(text: str | None) -> ModelSource:
    if not text:
        return ModelSource(kind="none")
    if text.startswith("pvc://"):
        claim, _, path = text.removeprefix("pvc://").partition("/")
        return ModelSource(kind="pvc", claim=claim, path=path.strip("/"))
    return ModelSource(kind="hostPath", path="/" + text.removeprefix("hostpath://").lstrip("/"))


def config_from_spec(spec: InferencePoolSpec, *, name: str, namespace: str) -> PoolConfig:
    """The internal config of a spec that :func:`validate_spec` found no problem with."""
    args: dict[str, EngineArgValue] = {}
    if spec.engine.args is not None:
        for key, value in spec.engine.args.model_dump(by_alias=True, exclude_none=True).items():
            args[key] = parse_duration(value) if key in DURATION_ARGS else value
    tp = spec.engine.args.tensor_parallel_size if spec.engine.args else None
    gpus = spec.resources.gpus
    if gpus is None:
        gpus = (tp or 1) if spec.engine.kind == "vllm" else 0
    r = spec.replicas
    desired = r.min if r.desired is None else min(max(r.desired, r.min), r.max)
    a = spec.autoscaling
    panic = a.panic or PanicSpec()
    predictive = a.predictive or PredictiveSpec()
    return PoolConfig(
        name=name,
        namespace=namespace,
        model=ModelConfig(name=spec.model.name, source=_source(spec.model.source)),
        engine=EngineConfig(
            kind=spec.engine.kind, image=spec.engine.image, args=tuple(sorted(args.items()))
        ),
        resources=ResourcesConfig(
            gpus=gpus,
            gpu_type=spec.resources.gpu_type,
            cpu=spec.resources.cpu,
            memory=spec.resources.memory,
        ),
        topology=TopologyConfig(zones=tuple(spec.topology.zones), spread=spec.topology.spread),
        replicas=ReplicasConfig(min=r.min, max=r.max, warm_standby=r.warm_standby, desired=desired),
        autoscaling=AutoscalingConfig(
            objectives=tuple(
                Objective(
                    signal=Signal(o.signal),
                    percentile=o.percentile or 0.0,
                    target=o.target_ms or o.per_replica or o.target_ratio or 0.0,
                )
                for o in a.objectives
            ),
            window_s=parse_duration(a.window),
            scale_up=ScaleRule(
                stabilization_s=parse_duration(a.scale_up.stabilization),
                cooldown_s=parse_duration(a.scale_up.cooldown),
                max_step=a.scale_up.max_step,
            ),
            scale_down=ScaleRule(
                stabilization_s=parse_duration(a.scale_down.stabilization),
                cooldown_s=parse_duration(a.scale_down.cooldown),
                max_step=a.scale_down.max_step,
            ),
            tolerance=a.tolerance,
            panic=PanicConfig(
                enabled=a.panic is not None,
                threshold=panic.threshold,
                window_s=parse_duration(panic.window),
            ),
            predictive=PredictiveConfig(
                enabled=predictive.enabled,
                horizon_s=(
                    DEFAULT_HORIZON_S
                    if predictive.horizon is None
                    else parse_duration(predictive.horizon)
                ),
                horizon_measured=predictive.horizon is None,
                trust=predictive.trust,
                period_s=parse_duration(predictive.period),
                weekly=predictive.weekly,
                headroom=predictive.headroom,
                headroom_keeps=predictive.headroom_mode == "keep",
            ),
        ),
        routing=RoutingConfig(
            session_ttl_s=parse_duration(spec.routing.session_ttl),
            hotspot_margin_ms=spec.routing.hotspot_margin_ms,
        ),
        pod=pod_config(spec.pod),
        traffic=to_traffic(spec.traffic),
    )


def to_config(raw: Mapping[str, Any], *, name: str, namespace: str) -> PoolConfig:
    """External spec -> defaults -> every problem at once -> frozen ``PoolConfig``.

    Raises :class:`PoolSpecError` (``INVALID_ARGUMENT``) listing every problem.
    """
    spec, problems = validate_spec(raw)
    if spec is None or problems:
        raise PoolSpecError(problems)
    return config_from_spec(spec, name=name, namespace=namespace)


# --- the CRD --------------------------------------------------------------------------

SHORT_NAMES = ("ipool",)
CATEGORIES = ("preheat",)


@dataclass(frozen=True)
class ScaleSubresource:
    spec_replicas_path: str = ".spec.replicas.desired"
    status_replicas_path: str = ".status.replicas.active"
    label_selector_path: str = ".status.selector"


PRINTER_COLUMNS: tuple[dict[str, Any], ...] = (
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name"},
    {"name": "Engine", "type": "string", "jsonPath": ".spec.engine.kind", "priority": 1},
    {"name": "Active", "type": "integer", "jsonPath": ".status.replicas.active"},
    {"name": "Standby", "type": "integer", "jsonPath": ".status.replicas.standby"},
    {"name": "Warming", "type": "integer", "jsonPath": ".status.replicas.warming", "priority": 1},
    {"name": "Desired", "type": "integer", "jsonPath": ".status.desiredReplicas", "priority": 1},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)


def _structural(node: Any, defs: Mapping[str, Any]) -> Any:
    """A pydantic JSON schema made into a Kubernetes structural OpenAPI v3 schema."""
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = dict(defs[node["$ref"].rsplit("/", 1)[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        return _structural({**target, **extra}, defs)
    if "anyOf" in node:  # X | None: optional, so just X
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"cannot express anyOf {node['anyOf']} in a structural schema")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if rest.get("default", 0) is None:
            del rest["default"]
        return _structural({**branches[0], **rest}, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs"):
            continue
        if key == "additionalProperties" and value is False:
            continue  # the API server prunes unknown fields; kubectl refuses them (strict)
        if key == "exclusiveMinimum" and not isinstance(value, bool):
            out["minimum"], out["exclusiveMinimum"] = value, True
            continue
        if key == "exclusiveMaximum" and not isinstance(value, bool):
            out["maximum"], out["exclusiveMaximum"] = value, True
            continue
        if key == "maxLength" and node.get("type") == "array":
            out["maxItems"] = value
            continue
        if key == "properties":
            out[key] = {k: _structural(v, defs) for k, v in value.items()}
            continue
        if key == "items" and isinstance(value, dict):
            out[key] = {**_structural(value, defs), **out.get(key, {})}
            continue
        out[key] = _structural(value, defs)
    if "description" in out and "\n" in out["description"]:
        out["description"] = " ".join(out["description"].split())
    return dict(sorted(out.items()))


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural schema of ``model`` (aliases, defaults, bounds, CEL rules)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema: dict[str, Any] = _structural(raw, raw.get("$defs", {}))
    return schema


def crd() -> dict[str, Any]:
    """The ``CustomResourceDefinition`` of ``InferencePool``, as a plain dict."""
    scale = ScaleSubresource()
    spec_schema = openapi_schema(InferencePoolSpec)
    spec_schema["description"] = "What a platform team writes: see docs and examples/."
    status_schema = openapi_schema(InferencePoolStatus)
    status_schema["description"] = "What the operator observed; never desired state."
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "preheat"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": list(SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": scale.spec_replicas_path,
                            "statusReplicasPath": scale.status_replicas_path,
                            "labelSelectorPath": scale.label_selector_path,
                        },
                    },
                    "additionalPrinterColumns": [dict(c) for c in PRINTER_COLUMNS],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": (
                                "A pool of warm inference workers serving one model (preheat.dev)."
                            ),
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {
                                    "type": "string",
                                    "description": "preheat.dev/" + VERSION,
                                },
                                "kind": {"type": "string", "description": KIND},
                                "metadata": {
                                    "type": "object",
                                    "description": "The object's name, namespace and labels.",
                                },
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }
