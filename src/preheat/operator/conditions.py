"""What the autoscaler writes on a pool besides ``spec.replicas.desired``: the
``Autoscaling`` condition (the decision's reason, the signals seen, desired vs. current),
``status.lastScale``, and its Events."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from preheat.autoscaler.describe import describe_signals
from preheat.core.autoscaling import Cause, Decision, Direction
from preheat.core.pool import AutoscalingConfig
from preheat.operator.kube import POOLS
from preheat.operator.reconciler import Reconciler

log = logging.getLogger("preheat.operator.autoscaling")

CONDITION = "Autoscaling"

_REASONS: Mapping[Cause, str] = {
    Cause.SCALE_UP: "ScaledUp",
    Cause.SCALE_DOWN: "ScaledDown",
    Cause.PANIC: "Panic",
    Cause.WAKE: "Woken",
    Cause.SCALE_TO_ZERO: "ScaledToZero",
    Cause.WITHIN_TOLERANCE: "WithinTolerance",
    Cause.STEADY: "Steady",
    Cause.STABILIZING: "Stabilizing",
    Cause.COOLDOWN: "CoolingDown",
    Cause.WARMING: "WaitingForWarmingPods",
    Cause.BOUNDS: "AtBounds",
    Cause.STALE: "MetricsStale",
    Cause.IDLE: "Idle",
    Cause.NO_OBJECTIVES: "NoObjectives",
}


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition_for(decision: Decision, config: AutoscalingConfig, active: int) -> dict[str, str]:
    stale = decision.cause is Cause.STALE
    message = (
        f"desired {decision.active} active, current {active} active; "
        f"signals (observed/target): {describe_signals(config, decision.signals)}; "
        f"{decision.reason}"
    )
    return {
        "type": CONDITION,
        "status": "False" if stale else "True",
        "reason": _REASONS.get(decision.cause, "Evaluated"),
        "message": message[:4096],
    }


async def report(
    reconciler: Reconciler,
    pool: Mapping[str, Any],
    decision: Decision,
    config: AutoscalingConfig,
    *,
    current: int,
    active: int,
    was_stale: bool,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """A decision on the pool: ``lastScale`` and ``ScaledUp`` / ``ScaledDown`` when the
    active target changed from ``current``, ``MetricsStale`` / ``MetricsAvailable`` when it
    starts / stops holding on missing data, and the ``Autoscaling`` condition; ``extra``:
    other status fields to write with them (``policyHistory``)."""
    meta = pool.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    status: dict[str, Any] = dict(extra or {})
    if decision.active != current:
        status["lastScale"] = {
            "time": now_rfc3339(),
            "from": current,
            "to": decision.active,
            "reason": decision.reason[:1024],
        }
        up = decision.direction is Direction.UP or decision.active > current
        event(pool, "Normal", "ScaledUp" if up else "ScaledDown", decision.reason)
        log.info(
            "autoscaler_scaled pool=%s/%s from=%d to=%d reason=%s",
            namespace,
            name,
            current,
            decision.active,
            decision.reason,
        )
    stale = decision.cause is Cause.STALE
    if stale and not was_stale:
        event(pool, "Warning", "MetricsStale", decision.reason)
    elif was_stale and not stale:
        event(pool, "Normal", "MetricsAvailable", f"metrics fresh again: {decision.reason}")
    cond = condition_for(decision, config, active)
    await write_status(reconciler, namespace, name, pool, status, cond)


def event(pool: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    kopf.event(pool, type=type_, reason=reason, message=message[:1024])  # type: ignore[arg-type]


async def write_status(
    reconciler: Reconciler,
    namespace: str,
    name: str,
    pool: Mapping[str, Any],
    status: dict[str, Any],
    cond: Mapping[str, str],
) -> None:
    """``lastScale`` and the ``Autoscaling`` condition, only when something changed.

    Conditions are a list, which a merge patch replaces whole: under the pool's lock (the
    reconcile writes the others), the pool is read fresh and only ours is replaced.
    """
    previous = ((pool.get("status") or {}).get("conditions")) or []
    if not status and _same_condition(previous, cond):
        return
    async with reconciler.lock((namespace, name)):
        fresh = await reconciler.kube.get(POOLS, namespace, name)
        if fresh is None:
            return
        conditions = list(((fresh.get("status") or {}).get("conditions")) or [])
        if status or not _same_condition(conditions, cond):
            before: Mapping[str, Any] = next(
                (c for c in conditions if c.get("type") == CONDITION), {}
            )
            since = (
                before.get("lastTransitionTime") if before.get("status") == cond["status"] else None
            )
            mine = {
                **cond,
                "lastTransitionTime": since or now_rfc3339(),
                "observedGeneration": int((fresh.get("metadata") or {}).get("generation") or 0),
            }
            others = [c for c in conditions if c.get("type") != CONDITION]
            status = {**status, "conditions": [*others, mine]}
            await reconciler.kube.patch_status(namespace, name, status)
            reconciler.metrics.actions.labels("autoscaler-status").inc()


def _same_condition(conditions: Sequence[Mapping[str, Any]], cond: Mapping[str, str]) -> bool:
    for c in conditions:
        if c.get("type") == CONDITION:
            return all(c.get(k) == v for k, v in cond.items())
    return False


__all__ = ["CONDITION", "condition_for", "event", "now_rfc3339", "report", "write_status"]
