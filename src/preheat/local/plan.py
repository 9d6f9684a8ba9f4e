"""The local pool's decisions: pure functions of a snapshot, ``now`` injected.

The operator's policy code, unchanged: :func:`autoscale` is
:func:`preheat.core.autoscaling.decide` on the local workers' counts, and :func:`reconcile`
is :func:`preheat.core.reconcile.assign_roles` on the local workers seen as pods. What a
pod's role label and readiness say in a cluster, a local worker's own ``Status`` says here
(its lifecycle state). The runtime (:mod:`preheat.local.runtime`) only observes the
processes and carries the plans out.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass, replace

from preheat.core.autoscaling import (
    Context,
    Decision,
    PolicyState,
    PolicyTuning,
    ReplicaCounts,
    Signals,
    decide,
)
from preheat.core.pool import PoolConfig
from preheat.core.reconcile import (
    ROLE_ACTIVE,
    ROLE_DRAINING,
    ROLE_STANDBY,
    PodView,
    RolePlan,
    assign_roles,
)

# A local worker's state: its lifecycle state from Status, or what the runtime knows of
# the process before it answers ("starting") or after it stopped answering.
STARTING = "starting"  # process started, Status not answered yet
LOADING = "loading"
WARMING = "warming"
STANDBY = "standby"
ACTIVE = "active"
DRAINING = "draining"
STOPPED = "stopped"
UNREACHABLE = "unreachable"  # alive, but Status failed after it had answered
WARM = frozenset({STANDBY, ACTIVE})
COLD = frozenset({STARTING, LOADING, WARMING, UNREACHABLE})


@dataclass(frozen=True)
class WorkerView:
    """One local worker as the runtime observed it."""

    name: str
    state: str  # one of the states above
    leaving: bool = False  # told to drain or signalled to stop: on its way out
    in_flight: int = 0  # streams open on it (Status)
    started_at: float = 0.0  # the runtime's clock

    @property
    def warm(self) -> bool:
        return self.state in WARM and not self.leaving

    @property
    def bucket(self) -> str:
        """active | standby | warming | draining: how the pool's counts see it."""
        if self.leaving or self.state in (DRAINING, STOPPED):
            return "draining"
        if self.state in WARM:
            return self.state
        return "warming"

    def pod(self) -> PodView:
        if self.leaving or self.state in (DRAINING, STOPPED):
            role = ROLE_DRAINING
        elif self.state == ACTIVE:
            role = ROLE_ACTIVE
        elif self.state == STANDBY:
            role = ROLE_STANDBY
        else:
            role = ""
        return PodView(
            name=self.name,
            role=role,
            warm=self.warm,
            in_flight=self.in_flight,
            created=self.started_at,
        )


def counts(workers: Sequence[WorkerView]) -> ReplicaCounts:
    """Workers by state, as the operator's status counts pods."""
    by = {"active": 0, "standby": 0, "warming": 0, "draining": 0}
    for w in workers:
        by[w.bucket] += 1
    return ReplicaCounts(**by)


def autoscale(
    *,
    now: float,
    config: PoolConfig,
    desired: int,
    workers: Sequence[WorkerView],
    signals: Signals,
    state: PolicyState,
    tuning: PolicyTuning,
) -> tuple[Decision, PolicyState]:
    """One autoscaler evaluation: :func:`preheat.core.autoscaling.decide`, as the operator
    calls it (``desired`` is the active count the pool converges to now)."""
    ctx = Context(
        now=now,
        autoscaling=config.autoscaling,
        replicas=replace(config.replicas, desired=desired),
        counts=counts(workers),
        signals=signals,
        state=state,
        tuning=tuning,
    )
    return decide(ctx)


@dataclass(frozen=True)
class Actions:
    """What the runtime does now to bring the workers to ``active`` + ``standby``."""

    promote: tuple[str, ...]  # warm standby -> active (gRPC Promote)
    demote: tuple[str, ...]  # active -> standby (gRPC Demote)
    drain: tuple[str, ...]  # leave the router's set, then SIGTERM (the worker drains)
    start: int  # new workers (they come up as standby and are promoted when warm)
    plan: RolePlan

    @property
    def empty(self) -> bool:
        return not (self.promote or self.demote or self.drain or self.start)


def reconcile(workers: Sequence[WorkerView], active: int, standby: int) -> Actions:
    """:func:`preheat.core.reconcile.assign_roles` on the live workers, as actions.

    Workers already leaving are not counted. Only warm workers are promoted or demoted (a
    worker comes up as standby and gets its role once warm, as a pod does).
    """
    live = [w for w in workers if w.bucket != "draining"]
    plan = assign_roles([w.pod() for w in live], active, standby)
    warm = {w.name for w in live if w.warm}
    promote = tuple(n for n, r in plan.changes if r == ROLE_ACTIVE and n in warm)
    demote = tuple(n for n, r in plan.changes if r == ROLE_STANDBY and n in warm)
    return Actions(
        promote=promote, demote=demote, drain=plan.victims, start=plan.new_pods, plan=plan
    )


def starts_allowed(
    want: int, *, starting: int, alive: int, max_starting: int, max_workers: int
) -> int:
    """How many of ``want`` new worker processes may start now: at most ``max_starting``
    starting at once (started, not warm yet) and at most ``max_workers`` alive in all
    (draining ones included); 0 for either: no bound."""
    n = want
    if max_starting > 0:
        n = min(n, max_starting - starting)
    if max_workers > 0:
        n = min(n, max_workers - alive)
    return max(0, n)


STOP = "stop"
CRASH = "crash"
OUTSIDE_STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def exit_kind(code: int, *, told_to_stop: bool, killed_because: str = "") -> str:
    """``stop`` or ``crash``: how a worker that exited with ``code`` (negative: killed by
    that signal) is recorded.

    A stop is intended: the runtime told it to (``told_to_stop``), or it was stopped from
    outside, which a worker does by draining and exiting 0 (SIGTERM, SIGINT or a Drain RPC),
    or by dying of SIGTERM/SIGINT before its handler was installed. A stopped worker is not
    restarted under its name: the reconciler starts a replacement if the pool still wants
    one. Anything else (a non-zero status, SIGKILL, SIGSEGV, the runtime's own SIGKILL of a
    worker not warm in time) is a crash, restarted with back-off.
    """
    if told_to_stop:
        return STOP
    if killed_because:
        return CRASH
    if code == 0 or (code < 0 and -code in OUTSIDE_STOP_SIGNALS):
        return STOP
    return CRASH


__all__ = [
    "ACTIVE",
    "COLD",
    "DRAINING",
    "LOADING",
    "STANDBY",
    "STARTING",
    "STOPPED",
    "UNREACHABLE",
    "WARM",
    "WARMING",
    "Actions",
    "WorkerView",
    "autoscale",
    "counts",
    "exit_kind",
    "reconcile",
    "starts_allowed",
]
