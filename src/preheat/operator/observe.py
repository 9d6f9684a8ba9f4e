"""The operator's side of the control loop: a pool and its pods as a
:class:`~preheat.core.control.Observation` for :func:`preheat.core.control.step`.

The pool's ``spec.replicas.desired`` (clamped) is the target it converges to: the
autoscaler's last write or a ``kubectl scale``. Pods come from kopf's index as plain dicts
(:func:`~preheat.operator.status.observe_pod`: role label, readiness, deletion, creation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from preheat.core.autoscaling import Signals
from preheat.core.control import ControlState, Observation, RolePlan, step
from preheat.core.manifests import HTTP_PORT
from preheat.core.pool import PoolConfig
from preheat.operator.status import observe_pod


@dataclass(frozen=True)
class WorkerLoad:
    """What a worker said of itself (``WorkerStatus``): what losing it would cost."""

    cached_blocks: int = 0
    sessions: int = 0
    in_flight: int = 0


def observation(
    config: PoolConfig,
    pods: Sequence[Mapping[str, Any]],
    *,
    now: float = 0.0,
    desired: int | None = None,
    signals: Signals | None = None,
    loads: Mapping[str, WorkerLoad] | None = None,
) -> Observation:
    """``desired``: the spec's unless the caller knows a newer write of its own; ``loads``:
    what the workers said of themselves, by pod name (a pod without one costs only its
    role and warmth)."""
    target = config.replicas.desired if desired is None else desired
    views = []
    for p in pods:
        view = observe_pod(p).view()
        load = (loads or {}).get(view.name)
        if load is not None:
            view = replace(
                view,
                cached_blocks=load.cached_blocks,
                sessions=load.sessions,
                in_flight=load.in_flight,
            )
        views.append(view)
    return Observation(now, config, target, tuple(views), signals)


def role_plan(
    config: PoolConfig,
    pods: Sequence[Mapping[str, Any]],
    loads: Mapping[str, WorkerLoad] | None = None,
) -> RolePlan:
    """The roles the reconcile gives the pool's pods for ``spec.replicas.desired``; a
    scale-down's victims are the pods whose ``loads`` cost the least (cache, sessions,
    never one with requests in flight)."""
    return step(observation(config, pods, loads=loads), ControlState())[1]


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


__all__ = ["WorkerLoad", "observation", "ready_targets", "role_plan"]
