"""A pool's routing settings: the scheduler config, traffic classes and admission bounds.

They come from the routing config file's shape (``preheat.api.routing`` plus the router
keys ``traffic``, ``sloClasses``, ``defaultTtftTargetMs`` and ``maxInFlight``). ``traffic``
is a pool's ``spec.traffic`` (``preheat.api.traffic``: SLO classes with priorities, the
default class, tenant quotas); ``sloClasses`` (class -> TTFT ms) is the older shorthand,
read as classes that set only a TTFT budget; a mapping may give one of the two. The SLO
deadlines the router admits by are a view of the classes (``Traffic.deadlines_ms``).
The router's own file (``--routing-config``) is every pool's base; a pool's ``routing``
mapping (the multi-pool static file's, or what Kubernetes discovery reads of an
InferencePool) overlays it key by key (a pool's ``traffic`` or ``sloClasses`` replaces
the base's whole); the flags (``--policy``, ``--default-ttft-target-ms``,
``--max-in-flight``) override both. ``sessionTTL`` (an InferencePool's ``spec.routing``
key) is accepted and not used by the router. Every problem is reported at once (``ValueError``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from preheat.api.routing import load_routing_config
from preheat.api.traffic import parse_traffic
from preheat.core.errors import PreheatError
from preheat.core.routing.admission import AdmissionConfig
from preheat.core.routing.config import SchedulerConfig
from preheat.core.traffic.classes import Traffic, legacy_traffic

SLO_CLASSES_KEY = "sloClasses"
TRAFFIC_KEY = "traffic"
DEFAULT_TARGET_KEY = "defaultTtftTargetMs"
MAX_IN_FLIGHT_KEY = "maxInFlight"
IGNORED_KEYS = ("sessionTTL",)  # InferencePool spec.routing keys the router does not use


def parse_routing(
    data: Any,
) -> tuple[SchedulerConfig, Traffic, dict[str, float]]:
    """The scheduler config, the traffic classes and the admission keys given
    (``defaultTtftTargetMs``, ``maxInFlight``, by key) of one decoded routing mapping
    (None: defaults); ``ValueError`` naming every problem."""
    problems: list[str] = []
    slo: dict[str, float] = {}
    traffic = Traffic()
    extra: dict[str, float] = {}
    if isinstance(data, Mapping):
        data = {k: v for k, v in data.items() if k not in IGNORED_KEYS}
        for key in (DEFAULT_TARGET_KEY, MAX_IN_FLIGHT_KEY):
            if key not in data:
                continue
            v = data.pop(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
                problems.append(f"{key}: expected a number >= 0, got {v!r}")
            elif key == MAX_IN_FLIGHT_KEY and v != int(v):
                problems.append(f"{key}: expected a whole number, got {v!r}")
            else:
                extra[key] = float(v)
        if SLO_CLASSES_KEY in data:
            raw = data.pop(SLO_CLASSES_KEY)
            if not isinstance(raw, Mapping):
                problems.append(f"{SLO_CLASSES_KEY}: expected a mapping of class name -> ms")
            else:
                for k, v in raw.items():
                    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                        problems.append(f"{SLO_CLASSES_KEY}.{k}: expected a positive number of ms")
                    else:
                        slo[str(k)] = float(v)
            traffic = legacy_traffic(slo)
        if TRAFFIC_KEY in data:
            if traffic.classes:
                problems.append(
                    f"give {TRAFFIC_KEY} or {SLO_CLASSES_KEY}, not both "
                    f"({SLO_CLASSES_KEY} is the older shorthand of {TRAFFIC_KEY}.classes)"
                )
            traffic, found = parse_traffic(data.pop(TRAFFIC_KEY), TRAFFIC_KEY)
            problems += found
    try:
        sched = load_routing_config(data if data is not None else {})
    except PreheatError as e:
        problems.insert(0, e.message)
        sched = SchedulerConfig()
    if problems:
        raise ValueError("; ".join(problems))
    return sched, traffic, extra


@dataclass(frozen=True)
class RoutingBase:
    """What every pool's settings start from: the router's file and its flags."""

    raw: Mapping[str, Any] = field(default_factory=dict)  # --routing-config, decoded
    policy: str | None = None  # --policy
    default_ttft_target_ms: float | None = None  # --default-ttft-target-ms
    max_in_flight: int | None = None  # --max-in-flight


@dataclass(frozen=True)
class PoolSettings:
    scheduler: SchedulerConfig
    traffic: Traffic
    admission: AdmissionConfig

    @property
    def slo_deadlines_ms(self) -> dict[str, float]:
        return self.traffic.deadlines_ms


def pool_settings(base: RoutingBase, overlay: Mapping[str, Any], pool: str) -> PoolSettings:
    """``overlay`` (a pool's routing keys) over ``base.raw``, the flags over both; the
    scheduler's ``pool`` is the pool's name unless the settings name one. ``ValueError``
    naming every problem."""
    raw = dict(base.raw)
    if TRAFFIC_KEY in overlay or SLO_CLASSES_KEY in overlay:  # the pool's classes win whole
        raw.pop(TRAFFIC_KEY, None)
        raw.pop(SLO_CLASSES_KEY, None)
    merged = {**raw, **overlay}
    sched, traffic, extra = parse_routing(merged)
    if base.policy:
        sched = dataclasses.replace(sched, policy=base.policy)
    if pool and not sched.pool:
        sched = dataclasses.replace(sched, pool=pool)
    target = base.default_ttft_target_ms
    if target is None:
        target = extra.get(DEFAULT_TARGET_KEY, AdmissionConfig().default_ttft_target_ms)
    max_in_flight = base.max_in_flight
    if max_in_flight is None:
        max_in_flight = int(extra.get(MAX_IN_FLIGHT_KEY, 0))
    adm = AdmissionConfig(default_ttft_target_ms=target, max_in_flight=max_in_flight)
    return PoolSettings(sched, traffic, adm)
