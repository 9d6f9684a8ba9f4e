"""Step 6: warm standby. Growing promotes standby first (instant), then starts pods to
refill the standby count; shrinking demotes actives to standby while standby is short,
and removes the rest (``core.control.roles.choose_victims`` / ``assign_roles`` pick which)."""

from __future__ import annotations

from preheat.core.autoscaling.types import Plan, ReplicaCounts
from preheat.core.pool import ReplicasConfig


def wanted(replicas: ReplicasConfig, active: int) -> int:
    """The warm standby a pool keeps behind ``active`` serving replicas: ``warmStandby``,
    and none at zero (a pool at zero keeps nothing warm: docs/proposals/0010-pool-at-zero.md).
    Every driver sizes its pool with this, through :func:`preheat.core.control.step`."""
    return replicas.warm_standby if active > 0 else 0


def plan(counts: ReplicaCounts, active: int, standby: int) -> Plan:
    present = counts.active + counts.standby + counts.warming
    promote = min(max(0, active - counts.active), counts.standby)
    short = max(0, standby - counts.standby - counts.warming)
    demote = min(max(0, counts.active - active), short)
    return Plan(
        promote=promote,
        start=max(0, active + standby - present),
        demote=demote,
        remove=max(0, present - (active + standby)),
    )


def describe(delta: int, p: Plan) -> str:
    """``+2, standby promoted; 2 starting to refill standby``, ``-1, demoted to standby``."""
    if delta > 0:
        fresh = delta - p.promote
        if p.promote == delta:
            text = f"+{delta}, standby promoted"
        elif p.promote > 0:
            text = f"+{delta}: {p.promote} standby promoted, {fresh} new"
        else:
            text = f"+{delta}, new pods"
        refill = p.start - max(0, fresh)
        if refill > 0:
            text += f"; {refill} starting to refill standby"
        return text
    if delta < 0:
        n = -delta
        if p.demote >= n:
            return f"-{n}, demoted to standby"
        if p.demote > 0:
            return f"-{n}: {p.demote} demoted to standby, {n - p.demote} removed"
        return f"-{n}, removed"
    return ""
