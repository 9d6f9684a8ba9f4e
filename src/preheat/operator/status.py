"""A pool's status from what was observed: pure, no I/O, ``now`` passed in.

Counts by lifecycle state come from the worker pods (their role label and readiness);
conditions ``Ready``, ``Scaling`` and ``Degraded`` carry a reason and a message, and keep
their ``lastTransitionTime`` while their status does not change.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from preheat.core.control import lifecycle_of, tally
from preheat.core.control.roles import ROLE_DRAINING, PodView
from preheat.core.manifests import ANNOTATION_DELETION_COST, LABEL_ROLE

READY = "Ready"
SCALING = "Scaling"
DEGRADED = "Degraded"
CONDITION_TYPES = (READY, SCALING, DEGRADED)
CRASH_LOOPING = "WorkerCrashLooping"  # Degraded's reason while a worker pod crash-loops


@dataclass(frozen=True)
class ObservedPod:
    """One worker pod as the operator sees it."""

    name: str
    role: str  # the preheat.dev/role label, "" when absent
    ready: bool  # the Ready condition: loaded and warm
    terminating: bool  # deletionTimestamp set
    created: str = ""  # creationTimestamp (RFC 3339)
    deletion_cost: str = ""  # the controller.kubernetes.io/pod-deletion-cost annotation
    resource_version: str = ""
    # the scheduler's message while the pod cannot be placed (PodScheduled False,
    # Unschedulable: no node with the GPU, a spread that cannot hold...); "" otherwise
    unschedulable: str = ""
    # while a container is in CrashLoopBackOff: how it last ended (exit code and its
    # termination message: the worker's refusal, e.g. engine args that slipped past the
    # operator, through terminationMessagePolicy FallbackToLogsOnError); "" otherwise
    crash: str = ""
    # seconds from creationTimestamp to the Ready condition's lastTransitionTime while
    # Ready (its cold start: scheduling, image pull, load and warm-up); None otherwise
    ready_after: float | None = None

    @property
    def state(self) -> str:
        """active | standby | warming | draining (:func:`preheat.core.control.lifecycle_of`)."""
        return lifecycle_of(self.view()).value

    def view(self) -> PodView:
        """The pod as the control loop sees it (the operator knows no cache or load)."""
        return PodView(
            name=self.name,
            role=ROLE_DRAINING if self.terminating else self.role,
            warm=self.ready,
            created=_epoch_s(self.created),
            ready_after=self.ready_after,
        )


def _epoch_s(stamp: str) -> float:
    """An RFC 3339 ``creationTimestamp`` in seconds since the epoch (0.0: none or unreadable),
    the newer-goes-first tie-break of :func:`preheat.core.control.roles.choose_victims`."""
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp() if stamp else 0.0
    except ValueError:
        return 0.0


def observe_pod(pod: Mapping[str, Any]) -> ObservedPod:
    """An ``ObservedPod`` from a pod object (a dict as the API returns it)."""
    meta = pod.get("metadata") or {}
    conditions = (pod.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    unschedulable = next(
        (
            str(c.get("message") or "no node fits the pod")
            for c in conditions
            if c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ),
        "",
    )
    return ObservedPod(
        crash=_crash_loop(pod),
        name=str(meta.get("name", "")),
        role=str((meta.get("labels") or {}).get(LABEL_ROLE, "")),
        ready=ready,
        terminating=bool(meta.get("deletionTimestamp")),
        created=str(meta.get("creationTimestamp", "")),
        deletion_cost=str((meta.get("annotations") or {}).get(ANNOTATION_DELETION_COST, "")),
        resource_version=str(meta.get("resourceVersion", "")),
        unschedulable=unschedulable,
        ready_after=_ready_after(meta.get("creationTimestamp"), conditions) if ready else None,
    )


def _ready_after(created: Any, conditions: Sequence[Mapping[str, Any]]) -> float | None:
    """Seconds from ``created`` to the Ready condition's last transition (None: either
    missing or unreadable, or a transition before the creation)."""
    since = next(
        (c.get("lastTransitionTime") for c in conditions if c.get("type") == "Ready"), None
    )
    start, end = _epoch_s(str(created or "")), _epoch_s(str(since or ""))
    if not start or not end or end < start:
        return None
    return end - start


def _crash_loop(pod: Mapping[str, Any]) -> str:
    """How a crash-looping container of ``pod`` last ended; "" when none is looping."""
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") != "CrashLoopBackOff":
            continue
        ended = (c.get("lastState") or {}).get("terminated") or {}
        said = str(ended.get("message") or ended.get("reason") or "").strip()
        tail = said.splitlines()[-1][:300] if said else "no message"
        return f"container {c.get('name', '?')} exited {ended.get('exitCode', '?')}: {tail}"
    return ""


def replica_counts(pods: Sequence[ObservedPod]) -> dict[str, int]:
    """``status.replicas``: :func:`preheat.core.control.tally` of the pods (the counts; the
    measured cold start is the policy's)."""
    c = tally([p.view() for p in pods])
    return {"active": c.active, "standby": c.standby, "warming": c.warming, "draining": c.draining}


@dataclass(frozen=True)
class Problem:
    """Why the pool cannot be reconciled (it goes Degraded)."""

    reason: str  # InvalidSpec | BuildFailed | ApiError
    message: str


def _condition(
    kind: str,
    status: bool,
    reason: str,
    message: str,
    *,
    previous: Mapping[str, Mapping[str, Any]],
    generation: int,
    now: str,
) -> dict[str, Any]:
    text = "True" if status else "False"
    before = previous.get(kind) or {}
    since = before.get("lastTransitionTime") if before.get("status") == text else None
    return {
        "type": kind,
        "status": text,
        "reason": reason,
        "message": message[:4096],
        "lastTransitionTime": since or now,
        "observedGeneration": generation,
    }


def compute_status(
    *,
    pods: Sequence[ObservedPod],
    want_active: int | None,
    want_standby: int,
    selector: str,
    generation: int,
    previous: Mapping[str, Any] | None,
    now: str,
    problem: Problem | None = None,
) -> dict[str, Any]:
    """The status to write. ``want_active`` is None when the spec could not be used."""
    counts = replica_counts(pods)
    prev_conditions = {
        str(c.get("type")): c for c in (previous or {}).get("conditions") or [] if c.get("type")
    }

    def cond(kind: str, status: bool, reason: str, message: str) -> dict[str, Any]:
        return _condition(
            kind,
            status,
            reason,
            message,
            previous=prev_conditions,
            generation=generation,
            now=now,
        )

    crashing = [p for p in pods if p.crash and not p.terminating]
    if problem is not None:
        degraded = cond(DEGRADED, True, problem.reason, problem.message)
    elif crashing:
        degraded = cond(
            DEGRADED,
            True,
            CRASH_LOOPING,
            f"{len(crashing)} worker pod(s) crash-looping ({crashing[0].name}: "
            f"{crashing[0].crash}); kubectl logs --previous {crashing[0].name}",
        )
    else:
        degraded = cond(DEGRADED, False, "AsExpected", "the pool's children match its spec")

    if want_active is None:
        ready = cond(READY, False, "SpecNotUsable", "fix the spec: see the Degraded condition")
        scaling = cond(SCALING, False, "SpecNotUsable", "not scaling while the spec is unusable")
        desired = int((previous or {}).get("desiredReplicas", 0))
    else:
        desired = want_active
        active, standby = counts["active"], counts["standby"]
        summary = (
            f"{active}/{want_active} active, {standby}/{want_standby} standby, "
            f"{counts['warming']} warming, {counts['draining']} draining"
        )
        if active >= want_active:
            ready = cond(READY, True, "ActiveWarm", summary)
        else:
            ready = cond(READY, False, "WaitingForWarmPods", summary)
        total = len([p for p in pods if p.state != "draining"])
        if total < want_active + want_standby or active < want_active:
            scaling = cond(SCALING, True, "ScalingUp", summary)
        elif total > want_active + want_standby or counts["draining"]:
            scaling = cond(SCALING, True, "ScalingDown", summary)
        elif standby < want_standby:
            scaling = cond(SCALING, True, "RefillingStandby", summary)
        else:
            scaling = cond(SCALING, False, "Stable", summary)
        stuck = [p for p in pods if p.unschedulable and not p.terminating]
        if stuck:
            scaling = cond(
                SCALING,
                True,
                "Unschedulable",
                f"{len(stuck)} pod(s) cannot be scheduled ({stuck[0].name}: "
                f"{stuck[0].unschedulable}); {summary}",
            )

    # Conditions of other types (the autoscaler's) are kept as they are: a merge patch
    # replaces the whole list.
    others = [dict(c) for c in (previous or {}).get("conditions") or []]
    others = [c for c in others if c.get("type") not in CONDITION_TYPES]
    return {
        "replicas": counts,
        "desiredReplicas": desired,
        "selector": selector,
        "conditions": [ready, scaling, degraded, *others],
        "observedGeneration": generation,
    }


def status_changed(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> bool:
    """Does writing ``new`` change anything we own in ``old``?"""
    if not old:
        return True
    return any(new.get(k) != old.get(k) for k in new)
