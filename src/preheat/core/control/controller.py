"""One pool's control loop, pure: ``step(observation, state) -> (decision, role plan, state)``.

Every driver runs this loop and nothing else of its own: the operator (pods from kopf's
index, ``spec.replicas.desired``), ``preheat up`` (local worker processes) and the simulator
(simulated pods on a virtual clock). Each *observes* its pool as an :class:`Observation`,
calls :func:`step`, and *acts* on what comes back (patch ``spec.replicas.desired`` and pod
labels, Promote/Demote/Drain over gRPC, start or stop processes or simulated pods).

- :func:`signal_query`: what to ask the metric source for, from the pool's config;
- :func:`tally`: the pods by state (the policy's :class:`ReplicaCounts`, the status's
  ``replicas``), one rule for every driver;
- :func:`step`: with signals, one policy evaluation (:func:`preheat.core.autoscaling.decide`
  or a baseline) sets the active target; without, the target stays ``desired``; either way
  :func:`~preheat.core.control.roles.assign_roles` plans the roles for that target and the
  standby it keeps (:func:`preheat.core.autoscaling.standby.wanted`: none at zero).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from preheat.core.autoscaling import (
    Context,
    Decision,
    PolicyState,
    PolicyTuning,
    ReplicaCounts,
    SignalQuery,
    Signals,
    decide,
)
from preheat.core.autoscaling.standby import wanted
from preheat.core.control.roles import ROLE_ACTIVE, ROLE_DRAINING, PodView, RolePlan, assign_roles
from preheat.core.lifecycle import LifecycleState
from preheat.core.pool import AutoscalingConfig, PoolConfig

Policy = Callable[[Context], tuple[Decision, PolicyState]]
"""``decide`` or a baseline (:mod:`preheat.core.autoscaling.baselines`): same contract."""


@dataclass(frozen=True)
class Observation:
    """One driver's view of its pool now.

    ``desired``: the active count the pool converges to now: ``spec.replicas.desired`` in a
    cluster (the last decision, or a ``kubectl scale``), the last decision locally and in
    the simulator. ``signals``: the metric source's snapshot on an evaluation tick; None
    between evaluations (the roles are planned for ``desired``, the policy is not called).
    """

    now: float
    config: PoolConfig
    desired: int
    pods: tuple[PodView, ...]
    signals: Signals | None = None


@dataclass(frozen=True)
class ControlState:
    """What the loop remembers between steps (returned, never mutated)."""

    policy: PolicyState = field(default_factory=PolicyState)
    decided: int | None = None  # the active count of the last decision (None: none yet)


def signal_query(autoscaling: AutoscalingConfig) -> SignalQuery:
    """The one query every driver's metric source answers for a pool."""
    return SignalQuery(
        objectives=autoscaling.objectives,
        window_s=autoscaling.window_s,
        short_window_s=autoscaling.panic.window_s if autoscaling.panic.enabled else 0.0,
    )


def lifecycle_of(pod: PodView) -> LifecycleState:
    """How the pool's counts see a pod: DRAINING (leaving), WARMING (not warm yet: loading
    or warming), ACTIVE or STANDBY."""
    if pod.role == ROLE_DRAINING:
        return LifecycleState.DRAINING
    if not pod.warm:
        return LifecycleState.WARMING
    return LifecycleState.ACTIVE if pod.role == ROLE_ACTIVE else LifecycleState.STANDBY


def tally(pods: Sequence[PodView]) -> ReplicaCounts:
    """The pods by state, as the policy and the pool's status count them."""
    states = [lifecycle_of(p) for p in pods]
    return ReplicaCounts(
        active=states.count(LifecycleState.ACTIVE),
        standby=states.count(LifecycleState.STANDBY),
        warming=states.count(LifecycleState.WARMING),
        draining=states.count(LifecycleState.DRAINING),
        cold_start_s=cold_start(pods),
    )


def cold_start(pods: Sequence[PodView]) -> float | None:
    """The pool's measured cold start: the median ``ready_after`` of its pods that have one
    (the lower middle of an even count; None: none). A median, so that one pod slowed by an
    image pull on a cold node does not set it."""
    seen = sorted(p.ready_after for p in pods if p.ready_after is not None)
    return seen[(len(seen) - 1) // 2] if seen else None


def context(
    obs: Observation, state: ControlState, tuning: PolicyTuning, signals: Signals
) -> Context:
    """The policy's input for this observation."""
    return Context(
        now=obs.now,
        autoscaling=obs.config.autoscaling,
        replicas=replace(obs.config.replicas, desired=obs.desired),
        counts=tally(obs.pods),
        signals=signals,
        state=state.policy,
        tuning=tuning,
    )


def step(
    obs: Observation,
    state: ControlState,
    *,
    tuning: PolicyTuning | None = None,
    policy: Policy = decide,
) -> tuple[Decision | None, RolePlan, ControlState]:
    """One turn of the loop: the decision (None without signals), the role plan for the
    active target it leaves (``decision.active``, else ``obs.desired``) with the standby
    that target keeps, and the next state."""
    decision: Decision | None = None
    after = state
    target = obs.desired
    if obs.signals is not None:
        ctx = context(obs, state, tuning or PolicyTuning(), obs.signals)
        decision, policy_state = policy(ctx)
        target = decision.active
        after = ControlState(policy=policy_state, decided=target)
    plan = assign_roles(obs.pods, target, wanted(obs.config.replicas, target))
    return decision, plan, after


__all__ = [
    "ControlState",
    "Observation",
    "Policy",
    "cold_start",
    "context",
    "lifecycle_of",
    "signal_query",
    "step",
    "tally",
]
