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
from preheat.core.manifests import HTTP_PORT
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


def ready_targets(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """``http://ip:port`` of every ready, not terminating worker pod (its ``http`` port)."""
    out = []
    for pod in pods:
        seen, ip = observe_pod(pod), (pod.get("status") or {}).get("podIP")
        if not seen.ready or seen.terminating or not ip:
            continue
        port = HTTP_PORT  # the last container port named http, as the Service's targetPort
        for c in (pod.get("spec") or {}).get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("name") == "http" and p.get("containerPort"):
                    port = int(p["containerPort"])
        out.append(f"http://{ip}:{port}")
    return sorted(out)


__all__ = ["observation", "ready_targets", "role_plan"]
