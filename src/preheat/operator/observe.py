"""The operator's side of the control loop: a pool and its pods as a
:class:`~preheat.core.control.Observation` for :func:`preheat.core.control.step`.

The pool's ``spec.replicas.desired`` (clamped) is the target it converges to: the
autoscaler's last write or a ``kubectl scale``. Pods come from kopf's index as plain dicts
(:func:`~preheat.operator.status.observe_pod`: role label, readiness, deletion, creation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from preheat.core.autoscaling import Signals
from preheat.core.control import ControlState, Observation, RolePlan, step
from preheat.core.pool import PoolConfig
from preheat.operator.status import observe_pod


def observation(
    config: PoolConfig,
    pods: Sequence[Mapping[str, Any]],
    *,
    now: float = 0.0,
    desired: int | None = None,
    signals: Signals | None = None,
) -> Observation:
    """``desired``: the spec's unless the caller knows a newer write of its own."""
    target = config.replicas.desired if desired is None else desired
    return Observation(now, config, target, tuple(observe_pod(p).view() for p in pods), signals)


def role_plan(config: PoolConfig, pods: Sequence[Mapping[str, Any]]) -> RolePlan:
    """The roles the reconcile gives the pool's pods for ``spec.replicas.desired``."""
    return step(observation(config, pods), ControlState())[1]


__all__ = ["observation", "role_plan"]
