"""The external schema of a pool's traffic classes and tenants (``spec.traffic`` of an
InferencePool, the ``traffic`` key of a ``preheat up`` pool file and of the router's
routing settings), its validation (every problem at once) and the frozen internal form
(:class:`preheat.core.traffic.classes.Traffic`).

.. code-block:: yaml

    traffic:
      defaultClass: standard
      classes:
        - {name: interactive, ttftMs: 500, priority: 0, sheddable: false, maxQueue: 64}
        - name: batch
          ttftMs: 20000
          priority: 2
          degrade: {fallbackPool: small-model, maxTokens: 256}
        - {name: standard, ttftMs: 2000}
      tenants:
        - {name: demo, requestsPerSecond: 1, requestBurst: 2}
        - {name: acme, requestsPerSecond: 20, weight: 3}
        - {name: "*", requestsPerSecond: 50, tokensPerMinute: 2000000}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic.alias_generators import to_camel

from preheat.core.traffic.classes import (
    PRIORITY_BATCH,
    PRIORITY_INTERACTIVE,
    PRIORITY_STANDARD,
    TenantQuota,
    Traffic,
    TrafficClass,
)
from preheat.core.traffic.respcache import DEFAULT_MAX_BYTES, DEFAULT_TTL_S, CacheConfig

_NAME = r"^[A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?$"
_TENANT = r"^(\*|[^\s]{1,253})$"
ClassName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=_NAME)]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        strict=True,
    )


class DegradeSpec(_Model):
    """What the router does with a request of the class that the pool would serve too
    late or cannot take now (core.traffic.ladder): send it to a fallback pool that
    predicts within the target, else cap its output and serve it."""

    fallback_pool: str = Field(
        default="",
        max_length=253,
        description="Another pool of the same namespace (its name), e.g. a smaller model, "
        "tried first; empty: none.",
    )
    max_tokens: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="Cap max_tokens to this under overload (the response says it was "
        "clamped); 0: never clamp.",
    )


class TrafficClassSpec(_Model):
    """One SLO class."""

    name: ClassName = Field(description="The class's name, as requests give it.")
    ttft_ms: float = Field(gt=0, le=3_600_000, description="TTFT target in ms.")
    itl_ms: float | None = Field(default=None, gt=0, le=600_000, description="ITL target in ms.")
    e2e_ms: float | None = Field(
        default=None, gt=0, le=86_400_000, description="End-to-end target in ms."
    )
    priority: int = Field(
        default=PRIORITY_STANDARD,
        ge=PRIORITY_INTERACTIVE,
        le=PRIORITY_BATCH,
        description="Lower runs first (vLLM's convention): 0 interactive, 1 standard, "
        "2 batch; the engines schedule by it.",
    )
    sheddable: bool = Field(
        default=True,
        description="May be refused early (429) under overload; false: queued within "
        "its patience instead.",
    )
    max_queue: int | None = Field(
        default=None,
        ge=0,
        le=1_000_000,
        description="Requests of this class that may wait in a router; default: the "
        "router's --max-queue.",
    )
    degrade: DegradeSpec | None = Field(
        default=None, description="The class's degradation ladder under overload."
    )


class TenantSpec(_Model):
    """One tenant's quota (each limit a token bucket; unset: unlimited)."""

    name: str = Field(
        max_length=253,
        pattern=_TENANT,
        description="The tenant (its API key's tenant or the tenant header's value); "
        "'*': every tenant not listed.",
    )
    requests_per_second: float | None = Field(
        default=None, gt=0, le=1_000_000, description="Sustained requests per second."
    )
    request_burst: float | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Requests that may come at once; default: max(1, requestsPerSecond).",
    )
    tokens_per_minute: float | None = Field(
        default=None,
        gt=0,
        le=1e12,
        description="Prompt plus max output tokens per minute (reconciled with the "
        "actual output when a request ends).",
    )
    token_burst: float | None = Field(
        default=None, ge=1, le=1e12, description="Default: tokensPerMinute."
    )
    default_class: str = Field(
        default="", max_length=63, description="The class of its requests that name none."
    )
    weight: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        description="Its share of a busy pool relative to other tenants (the fair share of "
        "the in-flight bound and the turns in the router's wait queue are proportional to "
        "it); default 1. For '*': each unlisted tenant's.",
    )


class ResponseCacheSpec(_Model):
    """A short-lived cache of answers to deterministic requests (temperature 0 or a seed,
    one choice), answered by the router."""

    enabled: bool = Field(default=False, description="Off by default.")
    ttl_seconds: float = Field(
        default=DEFAULT_TTL_S, gt=0, le=86_400, description="How long an answer is kept."
    )
    max_bytes: int = Field(
        default=DEFAULT_MAX_BYTES,
        ge=1024,
        le=1 << 34,
        description="Memory bound per router replica (least recently used go first).",
    )
    share_across_tenants: bool = Field(
        default=False, description="One tenant's answer may serve another tenant's request."
    )


class TrafficSpec(_Model):
    """SLO classes with priorities, and tenant quotas."""

    classes: list[TrafficClassSpec] = Field(
        default_factory=list, max_length=32, description="The pool's SLO classes."
    )
    default_class: str = Field(
        default="",
        max_length=63,
        description="The class of requests that name none; default: the first class.",
    )
    tenants: list[TenantSpec] = Field(
        default_factory=list, max_length=10_000, description="Tenant quotas."
    )
    response_cache: ResponseCacheSpec | None = Field(
        default=None, description="The router's response cache for deterministic requests."
    )


def cross_problems(raw: Mapping[str, Any], where: str = "traffic") -> list[str]:
    """What the schema cannot say: duplicate names, a default class or a tenant's default
    class that is not declared, a burst below its rate. Reads the raw mapping, so it
    reports even when a field is wrong (those fields are skipped here)."""
    problems: list[str] = []
    classes = raw.get("classes") or []
    names: list[str] = []
    for c in classes if isinstance(classes, list) else []:
        if isinstance(c, Mapping) and isinstance(c.get("name"), str):
            names.append(c["name"])
    for n in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{where}.classes: {n!r} is declared more than once")
    default = raw.get("defaultClass", raw.get("default_class", ""))
    if isinstance(default, str) and default and default not in names:
        problems.append(
            f"{where}.defaultClass {default!r} is not one of the classes "
            f"({', '.join(dict.fromkeys(names)) or 'none declared'})"
        )
    tenants = raw.get("tenants") or []
    seen: list[str] = []
    for i, t in enumerate(tenants if isinstance(tenants, list) else []):
        if not isinstance(t, Mapping):
            continue
        name = t.get("name")
        if isinstance(name, str):
            if name in seen:
                problems.append(f"{where}.tenants[{i}]: tenant {name!r} is listed more than once")
            seen.append(name)
        dc = t.get("defaultClass", t.get("default_class", ""))
        if isinstance(dc, str) and dc and dc not in names:
            problems.append(
                f"{where}.tenants[{i}].defaultClass {dc!r} is not one of the classes "
                f"({', '.join(dict.fromkeys(names)) or 'none declared'})"
            )
        for rate_key, burst_key in (
            ("requestsPerSecond", "requestBurst"),
            ("tokensPerMinute", "tokenBurst"),
        ):
            rate, burst = t.get(rate_key), t.get(burst_key)
            if burst is not None and rate is None:
                problems.append(f"{where}.tenants[{i}]: {burst_key} needs {rate_key}")
        limited = any(
            t.get(k) is not None for k in ("requestsPerSecond", "tokensPerMinute", "weight")
        )
        if not limited and not (isinstance(dc, str) and dc):
            problems.append(
                f"{where}.tenants[{i}]: set requestsPerSecond, tokensPerMinute, weight or "
                "defaultClass (an entry with none does nothing)"
            )
    return problems


def to_traffic(spec: TrafficSpec) -> Traffic:
    """The frozen form of a spec :func:`parse_traffic` found no problem with."""
    return Traffic(
        classes=tuple(
            TrafficClass(
                name=c.name,
                ttft_ms=c.ttft_ms,
                priority=c.priority,
                sheddable=c.sheddable,
                itl_ms=c.itl_ms or 0.0,
                e2e_ms=c.e2e_ms or 0.0,
                max_queue=c.max_queue or 0,
                degraded_max_tokens=c.degrade.max_tokens if c.degrade else 0,
                fallback_pool=c.degrade.fallback_pool if c.degrade else "",
            )
            for c in spec.classes
        ),
        default_class=spec.default_class or (spec.classes[0].name if spec.classes else ""),
        tenants=tuple(
            TenantQuota(
                name=t.name,
                requests_per_s=t.requests_per_second or 0.0,
                request_burst=t.request_burst or 0.0,
                tokens_per_min=t.tokens_per_minute or 0.0,
                token_burst=t.token_burst or 0.0,
                default_class=t.default_class,
                weight=t.weight if t.weight is not None else 1.0,
            )
            for t in spec.tenants
        ),
        cache=_cache(spec.response_cache),
    )


def _cache(spec: ResponseCacheSpec | None) -> CacheConfig:
    if spec is None:
        return CacheConfig()
    return CacheConfig(
        enabled=spec.enabled,
        ttl_s=spec.ttl_seconds,
        max_bytes=spec.max_bytes,
        share_tenants=spec.share_across_tenants,
    )


def _problems_of(err: ValidationError, where: str) -> list[str]:
    out = []
    for e in err.errors(include_url=False):
        path = where
        for part in e["loc"]:
            path += f"[{part}]" if isinstance(part, int) else f".{part}"
        if e["type"] == "extra_forbidden":
            out.append(f"{path}: unknown field")
        elif e["type"] == "missing":
            out.append(f"{path}: required field is missing")
        else:
            msg = e["msg"][0].lower() + e["msg"][1:]
            out.append(f"{path}: {msg} (got {e['input']!r})")
    return out


def parse_traffic(raw: Any, where: str = "traffic") -> tuple[Traffic, list[str]]:
    """The frozen traffic settings of ``raw`` (a decoded mapping; None: none) and every
    problem with them (an empty :class:`Traffic` when there is one)."""
    if raw is None:
        return Traffic(), []
    if not isinstance(raw, Mapping):
        return Traffic(), [f"{where}: expected a mapping (classes, defaultClass, tenants)"]
    try:
        spec = TrafficSpec.model_validate(raw)
    except ValidationError as e:
        return Traffic(), _problems_of(e, where) + cross_problems(raw, where)
    problems = cross_problems(spec.model_dump(by_alias=True), where)
    if problems:
        return Traffic(), problems
    return to_traffic(spec), []


def traffic_mapping(t: Traffic) -> dict[str, Any]:
    """``t`` in the external shape (camelCase, unset fields left out): what ``preheat up``
    hands its router as a pool's ``traffic`` routing key. ``{}`` when it declares nothing."""
    if not t.classes and not t.tenants and t.cache == CacheConfig():
        return {}
    classes: list[dict[str, Any]] = []
    for c in t.classes:
        item: dict[str, Any] = {
            "name": c.name,
            "ttftMs": c.ttft_ms,
            "priority": c.priority,
            "sheddable": c.sheddable,
        }
        for key, v in (("itlMs", c.itl_ms), ("e2eMs", c.e2e_ms), ("maxQueue", c.max_queue)):
            if v:
                item[key] = v
        degrade: dict[str, Any] = {}
        if c.fallback_pool:
            degrade["fallbackPool"] = c.fallback_pool
        if c.degraded_max_tokens:
            degrade["maxTokens"] = c.degraded_max_tokens
        if degrade:
            item["degrade"] = degrade
        classes.append(item)
    tenants: list[dict[str, Any]] = []
    for q in t.tenants:
        entry: dict[str, Any] = {"name": q.name}
        for key, v in (
            ("requestsPerSecond", q.requests_per_s),
            ("requestBurst", q.request_burst),
            ("tokensPerMinute", q.tokens_per_min),
            ("tokenBurst", q.token_burst),
        ):
            if v:
                entry[key] = v
        if q.default_class:
            entry["defaultClass"] = q.default_class
        if q.weight != 1.0:
            entry["weight"] = q.weight
        tenants.append(entry)
    out: dict[str, Any] = {"classes": classes, "tenants": tenants}
    if t.default_class:
        out["defaultClass"] = t.default_class
    if t.cache != CacheConfig():
        out["responseCache"] = {
            "enabled": t.cache.enabled,
            "ttlSeconds": t.cache.ttl_s,
            "maxBytes": t.cache.max_bytes,
            "shareAcrossTenants": t.cache.share_tenants,
        }
    return out
