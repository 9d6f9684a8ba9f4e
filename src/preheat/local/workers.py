"""The local workers as the control loop sees them, and ``preheat up``'s adapter to it: pure.

``preheat up`` is one of the three drivers of :func:`preheat.core.control.step`:
:func:`observe` turns the local workers (seen as pods) into the loop's
:class:`~preheat.core.control.Observation`, and :func:`actions` turns the
:class:`~preheat.core.control.RolePlan` that comes back into what the runtime does to its
processes. What a pod's role label and readiness say in a cluster, a local worker's own
``Status`` says here (its lifecycle state). The runtime (:mod:`preheat.local.runtime`) only
observes the processes and carries the actions out.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

from preheat.core.autoscaling import ReplicaCounts, Signals
from preheat.core.control import Observation, tally
from preheat.core.control.roles import ROLE_ACTIVE, ROLE_DRAINING, ROLE_STANDBY, PodView, RolePlan
from preheat.core.lifecycle import WARM_STATES, LifecycleState
from preheat.core.pool import PoolConfig

# A local worker's state: its lifecycle state from Status (core.lifecycle's values), or
# what the runtime knows of the process before it answers ("starting") or after it
# stopped answering.
STARTING = "starting"  # process started, Status not answered yet
LOADING = LifecycleState.LOADING.value
WARMING = LifecycleState.WARMING.value
STANDBY = LifecycleState.STANDBY.value
ACTIVE = LifecycleState.ACTIVE.value
DRAINING = LifecycleState.DRAINING.value
STOPPED = LifecycleState.STOPPED.value
UNREACHABLE = "unreachable"  # alive, but Status failed after it had answered
WARM = frozenset(s.value for s in WARM_STATES)
COLD = frozenset({STARTING, LOADING, WARMING, UNREACHABLE})


@dataclass(frozen=True)
class WorkerView:
    """One local worker as the runtime observed it."""

    name: str
    state: str  # one of the states above
    leaving: bool = False  # told to drain or signalled to stop: on its way out
    in_flight: int = 0  # streams open on it (Status)
    cached_blocks: int = 0  # prefix-cache blocks it holds (Status)
    sessions: int = 0  # sessions bound to it (Status)
    started_at: float = 0.0  # the runtime's clock
    ready_after: float | None = None  # seconds from its start to first seen warm

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
        """As a pod: a worker not warm yet is a standby (``--start-as standby``), as a new
        pod's template label says."""
        if self.leaving or self.state in (DRAINING, STOPPED):
            role = ROLE_DRAINING
        elif self.state == ACTIVE:
            role = ROLE_ACTIVE
        else:
            role = ROLE_STANDBY
        return PodView(
            name=self.name,
            role=role,
            warm=self.warm,
            in_flight=self.in_flight,
            cached_blocks=self.cached_blocks,
            sessions=self.sessions,
            created=self.started_at,
            ready_after=self.ready_after,
        )


def counts(workers: Sequence[WorkerView]) -> ReplicaCounts:
    """Workers by state, as the operator's status counts pods."""
    return tally([w.pod() for w in workers])


def observe(
    now: float,
    config: PoolConfig,
    desired: int,
    workers: Sequence[WorkerView],
    signals: Signals | None = None,
) -> Observation:
    """The control loop's view of the local pool (``signals``: on an evaluation tick)."""
    return Observation(now, config, desired, tuple(w.pod() for w in workers), signals)


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


def actions(workers: Sequence[WorkerView], plan: RolePlan) -> Actions:
    """The role plan of :func:`preheat.core.control.step` as actions on the live workers.

    Only warm workers are promoted or demoted (a worker comes up as standby and gets its
    role once warm, as a pod does).
    """
    warm = {w.name for w in workers if w.warm}
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
    "actions",
    "counts",
    "exit_kind",
    "observe",
    "starts_allowed",
]
