"""What a simulation runs with: the network, worker start-up, the knobs of the simulated
control plane, and the ``--set`` / ``--sweep`` overrides of a pool spec.

Start-up phases (``Startup``), and where each number comes from:

- ``image_pull_s`` (default 30 s): **assumed**; nothing on this machine measures a registry
  pull of a multi-GB worker image. Set it from your cluster's pod events.
- engine initialisation 5.7 s (``import torch`` 5.3 s + CUDA init 0.4 s) and weight load
  10.0 s from a cold page cache / 2.2 s from a warm one: **measured** on the H100 host
  (``/work/shared/calibration/README.md``), via ``CostModel.loading_s()``.
- warm-up 10 s (memory profiling, CUDA-graph capture, a first request): **assumed**
  (``costmodel.WARMUP_S``), via ``CostModel.warming_s()``.
- ``promote_s`` (default 1 s): standby -> active (a gRPC ``Promote``, the role label, the
  router's next Status poll): **assumed**.
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from preheat.api.pool import InferencePoolSpec
from preheat.api.poolfile import (
    PoolDocument,
    read_document,
    validate_document,
    with_source,
)
from preheat.core.autoscaling import Context, Decision, PolicyState, PolicyTuning
from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.pool import PoolConfig
from preheat.core.routing.baselines import SchedulerState
from preheat.core.routing.config import SchedulerConfig
from preheat.core.routing.types import PrefillCost, RouteDecision, RoutingContext
from preheat.process import yamlfile

RouteFn = Callable[
    [RoutingContext, SchedulerConfig, PrefillCost, SchedulerState],
    tuple[RouteDecision, SchedulerState],
]
DecideFn = Callable[[Context], tuple[Decision, PolicyState]]


class SimInputError(PreheatError):
    """Bad simulation input (pool file, --set, --sweep, network file): the message says what."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_ARGUMENT, message)


@dataclass(frozen=True)
class Network:
    """Round-trip times between regions (ms). A client in region ``a`` talks to its
    region's router; the router reaches a pod in region ``b`` in ``rtt(a, b)``. The client
    sees one RTT on its TTFT (request out, first token back) plus ``router_overhead_ms``.

    ``region_rtt_ms`` is symmetric (a missing ``b -> a`` is read from ``a -> b``); a pair in
    neither direction costs ``remote_region_ms``; within a region ``local_ms``. A pod's region
    is ``zone_regions[zone]``, else the zone name without its trailing letter
    (``us-east-1a`` -> ``us-east-1``), else the zone itself.
    """

    region_rtt_ms: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    zone_regions: Mapping[str, str] = field(default_factory=dict)
    local_ms: float = 0.5
    remote_region_ms: float = 60.0
    router_overhead_ms: float = 1.5  # the router's own work per request (docs/benchmarks.md)

    def region_of(self, zone: str) -> str:
        if zone in self.zone_regions:
            return self.zone_regions[zone]
        m = re.fullmatch(r"(.*\d)[a-z]", zone)
        return m.group(1) if m else zone

    def rtt_ms(self, a: str, b: str) -> float:
        if a == b:
            return self.local_ms
        row = self.region_rtt_ms.get(a, {})
        if b in row:
            return float(row[b])
        back = self.region_rtt_ms.get(b, {})
        if a in back:
            return float(back[a])
        return self.remote_region_ms


def load_network(path: Path | str) -> Network:
    """A network YAML/JSON file::

    rttMs: {us-east: {eu-west: 80, ap-south: 200}, eu-west: {ap-south: 150}}
    zoneRegions: {use1-az1: us-east}     # optional
    localMs: 0.5                         # optional
    remoteRegionMs: 60                   # optional
    routerOverheadMs: 1.5                # optional
    """
    p = Path(path)
    try:
        data = yamlfile.load(p.read_text())
    except OSError as e:
        raise SimInputError(f"network file {p}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise SimInputError(f"network file {p}: not valid YAML: {e}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SimInputError(f"network file {p}: expected a mapping")
    known = {"rttMs", "zoneRegions", "localMs", "remoteRegionMs", "routerOverheadMs"}
    problems = [
        f"unknown key {k!r} (known: {', '.join(sorted(known))})" for k in data if k not in known
    ]
    rtt: dict[str, dict[str, float]] = {}
    for a, row in (data.get("rttMs") or {}).items():
        if not isinstance(row, dict):
            problems.append(f"rttMs.{a} must map regions to milliseconds")
            continue
        for b, v in row.items():
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                problems.append(f"rttMs.{a}.{b} must be a number >= 0, got {v!r}")
            else:
                rtt.setdefault(str(a), {})[str(b)] = float(v)
    zones = data.get("zoneRegions") or {}
    if not isinstance(zones, dict):
        problems.append("zoneRegions must map zone names to region names")
        zones = {}
    scalars: dict[str, float] = {}
    for key, attr in (
        ("localMs", "local_ms"),
        ("remoteRegionMs", "remote_region_ms"),
        ("routerOverheadMs", "router_overhead_ms"),
    ):
        if key in data:
            v = data[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                problems.append(f"{key} must be a number >= 0, got {v!r}")
            else:
                scalars[attr] = float(v)
    if problems:
        raise SimInputError(f"network file {p}: " + "; ".join(problems))
    return Network(
        region_rtt_ms=rtt,
        zone_regions={str(k): str(v) for k, v in zones.items()},
        **scalars,
    )


@dataclass(frozen=True)
class Startup:
    """Cold start by phase (see the module docstring for which are measured)."""

    image_pull_s: float = 30.0
    load_s: float | None = None  # None: the cost model's engine init + weight load
    warmup_s: float | None = None  # None: the cost model's warm-up
    page_cache: bool = False  # weights already in the node's page cache (2.2 s, not 10 s)
    promote_s: float = 1.0


@dataclass(frozen=True)
class SimOptions:
    """The simulated control plane around the pool (defaults: the live defaults).

    ``route`` and ``autoscale`` replace the policy functions (benchmarks plug baselines and
    an oracle in here); None means ``preheat.core.routing.scheduler.schedule`` and
    ``preheat.core.autoscaling.decide``, looked up at every call.
    """

    # None: the defaults with the pool's routing.hotspotMarginMs (as `preheat up` and the
    # chart configure the router); a config replaces them whole (the router's --routing-config)
    routing: SchedulerConfig | None = None
    network: Network = field(default_factory=Network)
    startup: Startup = field(default_factory=Startup)
    # client region -> share of requests; () = every client in the first pod's region
    client_regions: tuple[tuple[str, float], ...] = ()
    seed: int = 0
    refresh_interval_s: float = 1.0  # router: Status poll / metrics scrape (live default)
    autoscale_interval_s: float = 15.0  # operator's evaluation interval (live default)
    sample_interval_s: float = 10.0  # replica samples in the run record
    ttft_deadline_ms: float | None = None  # admission deadline sent with every request
    ttft_objective_ms: float = 0.0  # SLO for attainment; 0: the pool's TTFT objective if any
    # the router's admission (core.routing.admission, as the live dispatcher applies it): the
    # TTFT a request that names no deadline nor class is admitted against; None: the SLO
    # above (``preheat up`` and the Kubernetes discovery set the router's
    # defaultTtftTargetMs from the pool's TTFT objective), else the router's default (2 s);
    # 0: none. ``max_in_flight``: the router's ceiling of requests in flight (0: the
    # endpoints' max_num_seqs)
    default_ttft_target_ms: float | None = None
    max_in_flight: int = 0
    max_retries: int = 2  # router re-routes before the first token (live default)
    queue_timeout_s: float = 10.0  # router holds requests this long with no endpoint
    max_queue: int = 256
    watch_cache: bool = True  # the router sees each pod's prefix cache (WatchCache)
    history_ttl_s: float = 600.0  # router prefix history (used without watch_cache)
    tuning: PolicyTuning = field(default_factory=PolicyTuning)
    # the pool's arrival rates before t=0, (time <= 0, req/s) oldest first: the policy's
    # forecast starts having seen them (a pool that ran before, its forecast kept in
    # status.policyHistory); () = the forecast starts at the first evaluation
    forecast_history: tuple[tuple[float, float], ...] = ()
    cold_start: bool = False  # pods start cold at t=0 instead of warm
    engine_options: Mapping[str, object] = field(default_factory=dict)  # SimConfig options
    record_itl: bool = True  # per-request ITL (run-length encoded) in the record
    route: RouteFn | None = None
    autoscale: DecideFn | None = None
    name: str = "simulate"

    def __post_init__(self) -> None:
        problems = [
            f"{name} must be {rule}, got {value}" for name, rule, value in _out_of_range(self)
        ]
        if any(t > 0 for t, _ in self.forecast_history):
            problems.append("forecast_history must be at or before t=0")
        if any(w < 0 for _, w in self.client_regions) or (
            self.client_regions and sum(w for _, w in self.client_regions) <= 0
        ):
            problems.append("client region shares must be >= 0 and not all 0")
        if problems:
            raise SimInputError("; ".join(problems))


#: the options' numeric fields, what each must be and the ``preheat simulate`` flag that
#: sets it (named beside the field in a refusal; "" for a field no flag sets): ``> 0`` (a
#: positive, finite number), ``>= 0`` (zero or a positive, finite number); None is allowed
#: where the field's type allows it (not set). ``startup.`` names a field of
#: :class:`Startup`.
_RANGES: tuple[tuple[str, str, str], ...] = (
    ("refresh_interval_s", "> 0", "--refresh-interval-s"),
    ("autoscale_interval_s", "> 0", "--autoscale-interval-s"),
    ("sample_interval_s", "> 0", ""),
    ("ttft_deadline_ms", "> 0", "--ttft-deadline-ms"),
    ("ttft_objective_ms", ">= 0", "--ttft-objective-ms"),
    ("default_ttft_target_ms", ">= 0", "--default-ttft-target-ms"),
    ("max_in_flight", ">= 0", "--max-in-flight"),
    ("max_retries", ">= 0", ""),
    ("queue_timeout_s", "> 0", ""),
    ("max_queue", ">= 0", ""),
    ("history_ttl_s", "> 0", ""),
    ("startup.image_pull_s", ">= 0", "--image-pull-s"),
    ("startup.load_s", ">= 0", ""),
    ("startup.warmup_s", ">= 0", ""),
    ("startup.promote_s", ">= 0", "--promote-s"),
)


def _out_of_range(options: SimOptions) -> list[tuple[str, str, object]]:
    """(field and its flag, rule, value) of every numeric field outside its rule
    (``_RANGES``): a negative start-up time, an interval of 0, a NaN or infinite
    deadline."""
    bad: list[tuple[str, str, object]] = []
    for name, rule, flag in _RANGES:
        owner: object = options
        *parents, attr = name.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        value = getattr(owner, attr)
        if value is None:
            continue
        number = float(value)
        ok = math.isfinite(number) and (number > 0 if rule == "> 0" else number >= 0)
        if not ok:
            said = f"{name} ({flag})" if flag else name
            bad.append((said, f"{rule} and finite", value))
    return bad


# --- pool files and overrides -----------------------------------------------------------


def read_pool(path: Path | str) -> PoolDocument:
    """The InferencePool in a YAML file (a whole resource, or just its spec), read by the
    same reader as ``preheat up`` (:mod:`preheat.api.poolfile`); its problems are reported,
    with the spec's, by :func:`pool_config`. Raises :class:`PoolFileError` for a file that
    cannot be read or decoded."""
    return read_document(path, bare_spec=True)


def spec_document(name: str, spec: Mapping[str, Any], namespace: str = "default") -> PoolDocument:
    """A pool from a spec given in code (tests, benchmarks)."""
    return PoolDocument(source=f"pool {name}", name=name, namespace=namespace, spec=spec)


def _fields(model: type[BaseModel]) -> dict[str, tuple[str, Any]]:
    """Accepted key (alias and python name) -> (alias, field annotation)."""
    out: dict[str, tuple[str, Any]] = {}
    for name, info in model.model_fields.items():
        alias = info.alias or name
        out[alias] = (alias, info.annotation)
        out[name] = (alias, info.annotation)
    return out


def _submodel(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _is_list(annotation: Any) -> bool:
    """A list field (``list[X]``, or ``list[X] | None``)."""
    if typing.get_origin(annotation) is list:
        return True
    return any(typing.get_origin(a) is list for a in typing.get_args(annotation))


def _resolve(key: str) -> list[str | int]:
    """``autoscaling.scale_down.stabilization`` -> the spec's alias path, or an error that
    lists the keys known where the path goes wrong. A list's element is its index
    (``autoscaling.objectives.0.targetMs``), checked against the pool when it is applied."""
    if not key or any(not part for part in key.split(".")):
        raise SimInputError(f"--set key {key!r} is not a dotted path like autoscaling.window")
    model: type[BaseModel] | None = InferencePoolSpec
    path: list[str | int] = []
    free = False  # under engine.args past its typed fields: vLLM's keys, checked on apply
    listed = False  # the last key named a list: the next part is an index
    for part in key.split("."):
        if free:
            path.append(part)
            continue
        if listed:
            if not part.isdigit():
                raise SimInputError(
                    f"--set {key}: {'.'.join(map(str, path))} is a list: the next part is "
                    f"an element's index (0, 1, ...), got {part!r}"
                )
            path.append(int(part))
            listed = False
            continue
        if model is None:
            raise SimInputError(f"--set {key}: {'.'.join(map(str, path))} has no sub-keys")
        known = _fields(model)
        if part not in known and model.model_config.get("extra") == "allow":
            # engine.args: any vLLM engine argument (preheat.api.engine_args checks it when
            # the pool is validated), nested keys included (speculativeConfig.method)
            path.append(part)
            free = True
            continue
        if part not in known:
            aliases = sorted({a for a, _ in known.values()})
            where = ".".join(map(str, path)) or "the pool spec"
            raise SimInputError(
                f"--set {key}: unknown key {part!r} in {where}; known: {', '.join(aliases)}"
            )
        alias, annotation = known[part]
        path.append(alias)
        model = _submodel(annotation)
        listed = _is_list(annotation)
    return path


def parse_assignment(text: str, flag: str = "--set") -> tuple[str, str]:
    if "=" not in text:
        raise SimInputError(f"{flag} {text!r}: expected KEY=VALUE")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def _value(raw: str) -> Any:
    try:
        return yamlfile.load(raw) if raw else ""
    except yaml.YAMLError:
        return raw


def apply_overrides(
    spec: Mapping[str, Any], overrides: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """A copy of ``spec`` with each ``key=value`` set (values read as YAML scalars)."""
    out: dict[str, Any] = _deep_copy(spec)
    for key, raw in overrides:
        path = _resolve(key)
        node: Any = out
        for depth, part in enumerate(path[:-1]):
            if isinstance(part, int):
                node = _element(node, part, key, path[:depth])
                continue
            child = node.get(part)
            if not isinstance(child, dict | list):
                child = {} if not isinstance(path[depth + 1], int) else []
                node[part] = child
            node = child
        last = path[-1]
        if isinstance(last, int):
            _element(node, last, key, path[:-1])
            node[last] = _value(raw)
        elif path[:2] == ["engine", "args"] and raw.lower() == "none":
            node.pop(last, None)  # "none" unsets an engine arg: the engine's default
        else:
            node[last] = _value(raw)
    return out


def _element(node: Any, index: int, key: str, where: Sequence[str | int]) -> Any:
    """``node[index]`` of a list in the spec, or an error saying how many it has."""
    name = ".".join(map(str, where))
    if not isinstance(node, list):
        raise SimInputError(f"--set {key}: {name} is not a list in this pool")
    if index >= len(node):
        raise SimInputError(
            f"--set {key}: {name} has {len(node)} element(s) in this pool "
            f"(indices 0-{len(node) - 1}); --set {name}=[...] replaces the whole list"
            if node
            else f"--set {key}: {name} is empty in this pool; --set {name}=[...] sets it"
        )
    return node[index]


def _deep_copy(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {k: _deep_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_deep_copy(v) for v in obj]
    return obj


def pool_config(pool: PoolDocument, overrides: Sequence[tuple[str, str]] = ()) -> PoolConfig:
    """The validated pool with overrides; every problem at once (:class:`PoolFileError`),
    naming the overrides."""
    spec = apply_overrides(pool.spec or {}, overrides)
    if overrides:
        with_ = ", ".join(f"{k}={v}" for k, v in overrides)
        pool = with_source(pool, f"{pool.source} (with {with_})")
    return validate_document(pool, spec=spec).config


def parse_sweep(text: str) -> tuple[str, tuple[str, ...]]:
    """``KEY=V1,V2,...`` -> (key, values); the key must be a pool spec path."""
    key, raw = parse_assignment(text, "--sweep")
    values = tuple(v.strip() for v in raw.split(",") if v.strip())
    if len(values) < 1:
        raise SimInputError(f"--sweep {text!r}: expected KEY=V1,V2,... with at least one value")
    _resolve(key)
    return key, values


def client_region_of(regions: Sequence[tuple[str, float]], key: str, seed: int) -> str:
    """The region a client belongs to: a stable hash of its key over the shares."""
    import hashlib

    total = sum(w for _, w in regions)
    h = hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest()
    u = int.from_bytes(h, "little") / 2.0**64 * total
    acc = 0.0
    for name, w in regions:
        acc += w
        if u < acc:
            return name
    return regions[-1][0]


def finite(x: float) -> bool:
    return math.isfinite(x)
