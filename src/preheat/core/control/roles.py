"""Which pods serve, wait warm or go: role assignment, deletion costs and victims, pure.

- :func:`deletion_cost` and :func:`choose_victims`: which pods scale-down removes (the
  least cache value and fewest sessions first, never one with work in flight);
  :func:`deletion_costs` gives every pod its ``controller.kubernetes.io/pod-deletion-cost``.
- :func:`assign_roles`: which pods become ``active`` / ``standby`` for a new desired count,
  promoting warm standbys first, and how many new pods to start behind them.

Every driver (the operator's pods, ``preheat up``'s processes, the simulator's pods) sees
its workers as :class:`PodView` s and carries the :class:`RolePlan` out its own way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ROLE_ACTIVE = "active"
ROLE_STANDBY = "standby"
ROLE_DRAINING = "draining"
MAX_DELETION_COST = 2**31 - 1
MIN_DELETION_COST = -(2**31)
SESSION_COST = 1000  # one bound session is worth this many cached blocks


@dataclass(frozen=True)
class PodView:
    """What a driver knows of one worker (a pod and its worker's status, or a process)."""

    name: str
    role: str  # "active" | "standby" | "draining" | "" (not labelled yet)
    warm: bool  # ready: loaded and warmed (standby or active)
    cached_blocks: int = 0  # prefix-cache blocks held (the cache's value)
    sessions: int = 0  # sessions bound to it
    in_flight: int = 0  # requests being served now
    created: float = 0.0  # creation time (seconds), the tie-break: newer goes first
    # seconds from its creation to warm (its cold start); None: not warm yet, or not known
    # (a pod warm before the driver saw it start)
    ready_after: float | None = None


def deletion_cost(pod: PodView) -> int:
    """``controller.kubernetes.io/pod-deletion-cost`` for a pod: what losing it would cost.

    Pods not yet warm cost nothing; a standby costs its cache; an active pod costs its cache
    plus :data:`SESSION_COST` per session; a pod with work in flight costs the most.
    """
    if pod.in_flight > 0:
        return MAX_DELETION_COST
    if not pod.warm:
        return 0
    cost = pod.cached_blocks + (SESSION_COST * pod.sessions if pod.role == ROLE_ACTIVE else 0)
    return min(cost + 1, MAX_DELETION_COST - 1)


def _victim_order(pod: PodView) -> tuple[int, int, int, float, str]:
    """Cheapest first; at equal cost a standby before an active, fewer sessions, newer."""
    return (deletion_cost(pod), pod.role == ROLE_ACTIVE, pod.sessions, -pod.created, pod.name)


def choose_victims(pods: Sequence[PodView], count: int) -> tuple[str, ...]:
    """The ``count`` pods scale-down removes, cheapest first; never one with work in flight.

    Draining pods are already leaving and are not counted. Fewer than ``count`` come back
    when only pods with work in flight remain; the driver retries once they finish.
    """
    candidates = [p for p in pods if p.in_flight == 0 and p.role != ROLE_DRAINING]
    return tuple(p.name for p in sorted(candidates, key=_victim_order)[: max(count, 0)])


def deletion_costs(pods: Sequence[PodView], victims: Sequence[str] = ()) -> dict[str, int]:
    """Annotation values for every pod; victims get the lowest so the ReplicaSet takes them."""
    chosen = set(victims)
    return {p.name: MIN_DELETION_COST if p.name in chosen else deletion_cost(p) for p in pods}


@dataclass(frozen=True)
class RolePlan:
    """What to do with the pods for a new desired active/standby count."""

    roles: tuple[tuple[str, str], ...]  # (pod, role) for every pod that keeps running
    changes: tuple[tuple[str, str], ...]  # the subset whose role label changes
    victims: tuple[str, ...]  # pods to remove (mark draining, lowest deletion cost)
    new_pods: int  # pods to start (they come up as standby)
    reason: str
    active: int = 0  # the targets it plans for: active + standby pods (warming ones fill either)
    standby: int = 0

    @property
    def replicas(self) -> int:
        """The pods the pool runs when the plan is carried out (a Deployment's replicas)."""
        return self.active + self.standby


def assign_roles(pods: Sequence[PodView], active: int, standby: int) -> RolePlan:
    """Promote warm standbys first when growing, refill standby behind them; shrink by
    removing the cheapest pods and demoting the least loaded actives.

    Pods not yet warm keep their role (they get one when warm) and count toward the total,
    so no extra pod is started for a slot a warming pod will fill.
    """
    live = [p for p in pods if p.role != ROLE_DRAINING]
    victims = choose_victims(live, len(live) - (active + standby))
    keep = [p for p in live if p.name not in victims]
    warm = [p for p in keep if p.warm]
    by_value = sorted(warm, key=_victim_order, reverse=True)  # most valuable first
    actives = [p for p in by_value if p.role == ROLE_ACTIVE][:active]
    promoted = [p for p in by_value if p not in actives][: active - len(actives)]
    chosen = {p.name for p in actives + promoted}
    roles: list[tuple[str, str]] = []
    for p in keep:
        if p.name in chosen:
            roles.append((p.name, ROLE_ACTIVE))
        elif p.warm:
            roles.append((p.name, ROLE_STANDBY))
        else:
            roles.append((p.name, p.role or ROLE_STANDBY))
    current = {p.name: p.role for p in keep}
    changes = tuple((n, r) for n, r in roles if current[n] != r)
    new_pods = max(0, active + standby - len(keep))
    n_active = len(chosen)
    reason = (
        f"want {active} active + {standby} standby; {len(warm)} warm of {len(keep)} kept: "
        f"{n_active} active ({len(promoted)} promoted), {len(victims)} removed, "
        f"{new_pods} to start"
    )
    return RolePlan(
        roles=tuple(roles),
        changes=changes,
        victims=victims,
        new_pods=new_pods,
        reason=reason,
        active=active,
        standby=standby,
    )
