"""The operator's decisions as OpenTelemetry spans (see ``preheat.process.tracing``).

- ``operator.reconcile``: one per reconcile of a pool (spec change, resync, pod event), with
  the pool, whether children were applied, and its outcome (``ok``, ``degraded`` with the
  problem's reason, or the error it raised);
- ``operator.autoscale``: one per autoscaler evaluation that decided something, with the
  replicas before and after, the direction, the cause and the human-readable reason, and each
  objective's observed value against its target: a scale-up reads next to the requests (the
  router's and workers' traces) that caused it.

Off (``tracing`` None), nothing is built; :func:`note` on no span is a no-op.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from preheat.core.autoscaling import Decision
from preheat.process.tracing import Tracing


def _pool_attrs(namespace: str, name: str) -> dict[str, str]:
    return {"k8s.namespace.name": namespace, "dev.preheat.pool": name}


@contextlib.contextmanager
def reconciling(
    tracing: Tracing | None, namespace: str, name: str, children: bool
) -> Iterator[None]:
    """The current span for one reconcile of ``namespace/name`` (nothing when off)."""
    if tracing is None:
        yield
        return
    attrs: dict[str, str | bool] = {**_pool_attrs(namespace, name)}
    attrs["dev.preheat.children"] = children
    with tracing.tracer.start_as_current_span("operator.reconcile", attributes=attrs):
        yield


def note(outcome: str, reason: str = "") -> None:
    """The current reconcile's outcome (no-op outside a traced reconcile)."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attribute("dev.preheat.outcome", outcome)
    if reason:
        span.set_attribute("dev.preheat.problem", reason)
        span.set_status(Status(StatusCode.ERROR, reason))


def started(tracing: Tracing | None) -> int:
    """The start of an evaluation, for :func:`autoscaled` (0 when off)."""
    return time.time_ns() if tracing is not None else 0


def autoscaled(
    tracing: Tracing | None,
    namespace: str,
    name: str,
    decision: Decision,
    *,
    current: int,
    active: int,
    signals: Mapping[str, tuple[float | None, float]],
    start_ns: int,
) -> None:
    """One evaluation's decision, as a finished span."""
    if tracing is None:
        return
    seen = [
        f"{label}={'-' if v is None else f'{v:g}'}/{target:g}"
        for label, (v, target) in signals.items()
    ]
    attrs: dict[str, str | int | bool | list[str]] = {
        **_pool_attrs(namespace, name),
        "dev.preheat.replicas.current": current,
        "dev.preheat.replicas.active": active,
        "dev.preheat.replicas.desired": decision.active,
        "dev.preheat.replicas.standby": decision.standby,
        "dev.preheat.direction": decision.direction.value,
        "dev.preheat.cause": decision.cause.value,
        "dev.preheat.reason": decision.reason,
        "dev.preheat.panic": decision.panic,
        "dev.preheat.signals": seen,
    }
    span = tracing.tracer.start_span("operator.autoscale", start_time=start_ns, attributes=attrs)
    span.end()
