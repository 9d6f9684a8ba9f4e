"""Tenants share a busy pool fairly: the pool's bound on requests in flight is split
among the tenants active lately in proportion to their weights (weighted max-min: a tenant
that asks for less than its share leaves the rest to the others, who divide it by weight
again), and once the pool is busy (``busy_from`` of the bound in flight) a tenant holding
its share or more is refused, so the slots that free up go to tenants under theirs. One
tenant sending ten times its share then holds its share, not ten times the others'. A
tenant's weight is its tenants-table entry's ``weight`` (default 1). Pure (``now`` comes
in)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

ACTIVE_WINDOW_S = 10.0  # a tenant seen this recently takes part in the split
BUSY_FROM = 0.75  # share of the bound in flight from which shares are enforced


@dataclass(frozen=True, slots=True)
class Verdict:
    admitted: bool
    share: float  # the tenant's fair share of the bound (inf: not enforced)
    held: int  # what it holds now


def _one(_tenant: str) -> float:
    return 1.0


def fair_shares(
    limit: int, demand: Mapping[str, int], weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Weighted max-min fair split of ``limit`` slots among tenants wanting ``demand``
    each (``weights``: a tenant's weight, default 1; each > 0). Water-filling: the
    unsatisfied tenants' shares are ``level * weight`` for one level, and a tenant that
    wants less than that gets what it wants and leaves the rest to the others. The shares
    sum to at most ``limit`` and none exceeds its demand."""
    w = {t: (weights or {}).get(t, 1.0) for t in demand}
    bad = sorted(t for t, v in w.items() if not 0 < v < math.inf)
    if bad:
        raise ValueError(f"tenant weights must be > 0 and finite: {', '.join(map(repr, bad))}")
    shares: dict[str, float] = {}
    left = float(limit)
    pending = sorted(demand.items(), key=lambda kv: (kv[1] / w[kv[0]], kv[0]))
    total_w = sum(w[t] for t, _ in pending)
    i = 0
    while i < len(pending):
        level = left / total_w
        tenant, want = pending[i]
        if want <= level * w[tenant]:
            shares[tenant] = float(want)
            left -= want
            total_w -= w[tenant]
            i += 1
            continue
        for t, _ in pending[i:]:
            shares[t] = level * w[t]
        break
    return shares


def admit(
    tenant: str,
    held: Mapping[str, int],
    last_seen: Mapping[str, float],
    limit: int,
    now: float,
    *,
    window_s: float = ACTIVE_WINDOW_S,
    busy_from: float = BUSY_FROM,
    weight: Callable[[str], float] = _one,
) -> Verdict:
    """Whether ``tenant`` may start one more request: always while the pool is not busy
    (fewer than ``busy_from * limit`` in flight) or when it is the only active tenant;
    else while it holds less than its fair share (``weight``: a tenant's weight)."""
    mine = held.get(tenant, 0)
    total = sum(held.values())
    active = {t for t, at in last_seen.items() if now - at <= window_s} | {tenant}
    active |= {t for t, n in held.items() if n > 0}
    if limit <= 0 or total < busy_from * limit or len(active) < 2:
        return Verdict(True, float("inf"), mine)
    # every active tenant wants what it holds plus one more (the requester at least that)
    demand = {t: held.get(t, 0) + 1 for t in active}
    share = fair_shares(limit, demand, {t: weight(t) for t in demand})[tenant]
    return Verdict(mine < share, share, mine)
