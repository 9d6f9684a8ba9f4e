"""A pool's traffic classes and tenants, validated and frozen (the external schema is
``preheat.api.traffic``).

A **class** names a TTFT target (optionally ITL and end-to-end ones), a **priority** (lower
runs first, vLLM's convention; 0 interactive, 1 standard, 2 batch on the wire), whether the
router may **shed** it (refuse early under overload), its own bound on the router's wait
queue, and its degradation ladder (a fallback pool, a degraded ``max_tokens``:
``preheat.core.traffic.ladder``).

A request's class (:meth:`Traffic.resolve`): the one it names (header ``x-slo-class``, body
field ``slo_class``, gRPC field ``slo_class``), else its tenant's default class, else the
pool's default class. A pool that declares no classes keeps the old behaviour: no class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from preheat.core.traffic.respcache import CacheConfig

PRIORITY_INTERACTIVE = 0
PRIORITY_STANDARD = 1
PRIORITY_BATCH = 2
PRIORITIES = (PRIORITY_INTERACTIVE, PRIORITY_STANDARD, PRIORITY_BATCH)
ANY_TENANT = "*"  # a tenants table entry that applies to every tenant not listed


@dataclass(frozen=True)
class TrafficClass:
    name: str
    ttft_ms: float  # the TTFT target admission and the report judge the class by
    priority: int = PRIORITY_STANDARD  # lower runs first (vLLM's convention)
    sheddable: bool = True  # may be refused early under overload
    itl_ms: float = 0.0  # 0: no target
    e2e_ms: float = 0.0  # 0: no target
    max_queue: int = 0  # requests of the class that may wait in the router; 0: the router's
    degraded_max_tokens: int = 0  # the ladder's clamp-output step: cap to this; 0 none
    fallback_pool: str = ""  # the ladder's fallback-pool step: that pool (by name); "" none


@dataclass(frozen=True)
class TenantQuota:
    """A tenant's limits: each a token bucket (``rate`` per second refilled, ``burst``
    deep); 0 = unlimited."""

    name: str
    requests_per_s: float = 0.0
    request_burst: float = 0.0  # 0: max(1, requests_per_s)
    tokens_per_min: float = 0.0  # prompt + max output tokens, reconciled at the end
    token_burst: float = 0.0  # 0: tokens_per_min (one minute's worth)
    default_class: str = ""  # "" = the pool's default class
    # its share of a busy pool (fair shares) and of the router's wait queue (fair
    # queuing) relative to other tenants'; > 0
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.weight < float("inf"):
            raise ValueError(f"tenant {self.name!r}: weight must be > 0, got {self.weight}")

    @property
    def request_depth(self) -> float:
        return self.request_burst or max(1.0, self.requests_per_s)

    @property
    def token_depth(self) -> float:
        return self.token_burst or self.tokens_per_min


class UnknownClass(ValueError):
    """A request named a class (or a tenant) the pool does not declare."""


@dataclass(frozen=True)
class Traffic:
    classes: tuple[TrafficClass, ...] = ()
    default_class: str = ""  # "": requests that name no class (nor a tenant's) have none
    tenants: tuple[TenantQuota, ...] = ()
    # the class's priority is the request's (False: the old ``sloClasses`` map, whose
    # classes only set a TTFT budget and leave the request's own priority)
    sets_priority: bool = True
    cache: CacheConfig = field(default_factory=CacheConfig)  # the response cache (off)
    _by_name: Mapping[str, TrafficClass] = field(default_factory=dict, compare=False, repr=False)
    _tenants: Mapping[str, TenantQuota] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {c.name: c for c in self.classes})
        object.__setattr__(self, "_tenants", {t.name: t for t in self.tenants})

    @property
    def deadlines_ms(self) -> dict[str, float]:
        """Class name -> TTFT target: the router's ``sloClasses`` view."""
        return {c.name: c.ttft_ms for c in self.classes}

    def get(self, name: str) -> TrafficClass | None:
        return self._by_name.get(name)

    def quota(self, tenant: str) -> TenantQuota | None:
        """The tenant's entry (or the ``*`` entry); None: no table, or no tenant named and
        no ``*`` entry (unlimited)."""
        q = self._tenants.get(tenant)
        if q is None:
            q = self._tenants.get(ANY_TENANT)
        return q

    def weight(self, tenant: str) -> float:
        """The tenant's weight for fair shares and fair queuing: its entry's (or the ``*``
        entry's, each unlisted tenant on its own); 1 without a table or an entry."""
        q = self.quota(tenant) if self.tenants else None
        return q.weight if q is not None else 1.0

    def check_tenant(self, tenant: str) -> None:
        """``UnknownClass`` for a named tenant the table does not list (with no ``*``)."""
        if self.tenants and tenant and self.quota(tenant) is None:
            known = ", ".join(sorted(self._tenants))
            raise UnknownClass(f"unknown tenant {tenant!r} for this pool (known: {known})")

    def resolve(self, requested: str, tenant: str = "") -> TrafficClass | None:
        """The request's class: ``requested``, else the tenant's default, else the pool's;
        None when the pool declares no classes and the request names none. ``UnknownClass``
        naming the known classes for a name the pool does not declare."""
        name = requested
        if not name:
            q = self.quota(tenant) if self.tenants else None
            name = (q.default_class if q is not None else "") or self.default_class
        if not name:
            return None
        c = self._by_name.get(name)
        if c is None:
            known = ", ".join(sorted(self._by_name)) or "none configured"
            raise UnknownClass(f"unknown slo_class {name!r} (known: {known})")
        return c


def legacy_traffic(deadlines_ms: Mapping[str, float]) -> Traffic:
    """The router's old ``sloClasses`` map (name -> TTFT ms) as classes: a TTFT budget
    each, sheddable, no ladder, the request's own priority, no default class."""
    return Traffic(
        classes=tuple(TrafficClass(name=k, ttft_ms=float(v)) for k, v in deadlines_ms.items()),
        sets_priority=False,
    )
