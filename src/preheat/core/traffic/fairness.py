"""Tenants share a busy pool fairly: the pool's bound on requests in flight is split
evenly among the tenants active lately (max-min: a tenant that asks for less than its
share leaves the rest to the others), and once the pool is busy (``busy_from`` of the
bound in flight) a tenant holding its share or more is refused, so the slots that free up
go to tenants under theirs. One tenant sending ten times its share then holds its share,
not ten times the others'. Pure (``now`` comes in)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ACTIVE_WINDOW_S = 10.0  # a tenant seen this recently takes part in the split
BUSY_FROM = 0.75  # share of the bound in flight from which shares are enforced


@dataclass(frozen=True, slots=True)
class Verdict:
    admitted: bool
    share: float  # the tenant's fair share of the bound (inf: not enforced)
    held: int  # what it holds now


def fair_shares(limit: int, demand: Mapping[str, int]) -> dict[str, float]:
    """Max-min fair split of ``limit`` slots among tenants wanting ``demand`` each."""
    shares: dict[str, float] = {}
    left = float(limit)
    pending = sorted(demand.items(), key=lambda kv: kv[1])
    while pending:
        equal = left / len(pending)
        tenant, want = pending[0]
        if want <= equal:
            shares[tenant] = float(want)
            left -= want
            pending.pop(0)
            continue
        for t, _ in pending:
            shares[t] = equal
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
) -> Verdict:
    """Whether ``tenant`` may start one more request: always while the pool is not busy
    (fewer than ``busy_from * limit`` in flight) or when it is the only active tenant;
    else while it holds less than its fair share."""
    mine = held.get(tenant, 0)
    total = sum(held.values())
    active = {t for t, at in last_seen.items() if now - at <= window_s} | {tenant}
    active |= {t for t, n in held.items() if n > 0}
    if limit <= 0 or total < busy_from * limit or len(active) < 2:
        return Verdict(True, float("inf"), mine)
    # every active tenant wants what it holds plus one more (the requester at least that)
    demand = {t: held.get(t, 0) + 1 for t in active}
    share = fair_shares(limit, demand)[tenant]
    return Verdict(mine < share, share, mine)
