"""The router's wait queue: which held request goes next, and whether one more may wait.

When the router must hold requests (no routable endpoint yet), it serves them by class
priority (lower first; never FIFO across classes), then, within a priority, by **start-time
fair queuing over tenants**, then by deadline (earliest first; a request without one after
those with one), then by arrival. Each class has its own bound (its ``maxQueue``, else the
router's ``--max-queue``), so a flood of batch requests cannot take the places interactive
requests need.

Fair queuing (SFQ, Goyal et al. 1996, with one request as the unit of work): each tenant's
held requests, in its own deadline-then-arrival order, get virtual start tags that advance
by ``1 / weight`` per request; the first starts at the priority's virtual time (the tag of
the request served last), or where the tenant's last served request left off when that is
later. Held requests leave by tag, so a tenant with ten held and a tenant with one share
the queue turn by turn: the second's request leaves second, not eleventh, and a tenant of
weight 2 gets two turns to another's one. Requests without a tenant are one anonymous
tenant (``""``).

:class:`Turns` is all that fair queuing remembers between two requests leaving (per
priority: the virtual time and each tenant's finish tag); :func:`served` and
:func:`settle` return the new one, and a priority with nothing held forgets its turns, so
each time the queue fills it starts afresh. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

NO_CLASS_PRIORITY = 1  # a request of a pool without classes waits as standard
ANONYMOUS = ""  # the tenant of requests that name none (they queue as one tenant)


@dataclass(frozen=True, slots=True)
class Held:
    """One waiting request, as the order sees it."""

    key: int  # unique, e.g. a sequence number
    priority: int  # its class's (lower first)
    deadline: float  # absolute, on the caller's clock; math.inf: none
    arrival: float
    klass: str = ""
    tenant: str = ANONYMOUS
    weight: float = 1.0  # its tenant's share of the turns (> 0)

    def __post_init__(self) -> None:
        if not self.weight > 0 or math.isinf(self.weight):
            raise ValueError(f"a held request's weight must be > 0 and finite, got {self.weight}")


@dataclass(frozen=True)
class Turns:
    """What fair queuing remembers: per priority the virtual time (the start tag of the
    request served last) and per (priority, tenant) the finish tag of its request served
    last (its tag plus ``1 / weight``)."""

    vtime: Mapping[int, float] = field(default_factory=dict)
    finish: Mapping[tuple[int, str], float] = field(default_factory=dict)


NO_TURNS = Turns()


def _own_order(h: Held) -> tuple[float, float, int]:
    return (h.deadline, h.arrival, h.key)


def tags(held: Iterable[Held], turns: Turns = NO_TURNS) -> dict[int, float]:
    """Each held request's virtual start tag (by key): a tenant's requests in its own
    order (deadline, arrival), the first at ``max(virtual time, the tenant's finish tag)``
    of its priority, each next one ``1 / weight`` later."""
    by_tenant: dict[tuple[int, str], list[Held]] = {}
    for h in held:
        by_tenant.setdefault((h.priority, h.tenant), []).append(h)
    out: dict[int, float] = {}
    for (priority, tenant), mine in by_tenant.items():
        mine.sort(key=_own_order)
        tag = max(turns.vtime.get(priority, 0.0), turns.finish.get((priority, tenant), 0.0))
        for h in mine:
            out[h.key] = tag
            tag += 1.0 / h.weight
    return out


def serve_order(held: Iterable[Held], turns: Turns = NO_TURNS) -> list[Held]:
    """``held`` in the order they are served: priority, then fair-queuing tag (tenants
    take turns by weight), then earliest deadline, then arrival (then key, so the order is
    total)."""
    hs = list(held)
    t = tags(hs, turns)
    return sorted(hs, key=lambda h: (h.priority, t[h.key], h.deadline, h.arrival, h.key))


def head(held: Iterable[Held], turns: Turns = NO_TURNS) -> tuple[Held, float] | None:
    """The request served next and its tag (for :func:`served`); None when none is held."""
    hs = list(held)
    if not hs:
        return None
    t = tags(hs, turns)
    first = min(hs, key=lambda h: (h.priority, t[h.key], h.deadline, h.arrival, h.key))
    return first, t[first.key]


def served(turns: Turns, h: Held, tag: float) -> Turns:
    """The turns after ``h`` (tag ``tag``) left the queue to be served: its priority's
    virtual time moves to ``tag`` and its tenant's next request starts ``1 / weight``
    later. Tenants whose finish tag the virtual time has passed are forgotten (they would
    start at the virtual time anyway), so the state holds only tenants ahead of it."""
    p = h.priority
    vt = max(turns.vtime.get(p, 0.0), tag)
    vtime = {**turns.vtime, p: vt}
    finish = {k: f for k, f in turns.finish.items() if k[0] != p or f > vt}
    finish[(p, h.tenant)] = max(finish.get((p, h.tenant), 0.0), tag + 1.0 / h.weight)
    return Turns(vtime=vtime, finish=finish)


def settle(turns: Turns, held: Iterable[Held]) -> Turns:
    """The turns with every priority that has no request in ``held`` (those still
    waiting) forgotten: when the queue of a priority empties, fair queuing starts afresh."""
    busy = {h.priority for h in held}
    if all(p in busy for p in turns.vtime) and all(p in busy for p, _ in turns.finish):
        return turns
    return Turns(
        vtime={p: v for p, v in turns.vtime.items() if p in busy},
        finish={k: f for k, f in turns.finish.items() if k[0] in busy},
    )


def may_wait(waiting: Mapping[str, int], klass: str, bound: int) -> bool:
    """True when one more request of ``klass`` may join the queue: fewer than ``bound`` of
    its class wait (``bound`` 0: none may)."""
    return waiting.get(klass, 0) < bound


def deadline_of(received: float, ttft_ms: float | None) -> float:
    """The absolute time by which a request wants its first token (math.inf: none)."""
    if ttft_ms is None or ttft_ms <= 0:
        return math.inf
    return received + ttft_ms / 1e3
