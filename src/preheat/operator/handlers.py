"""Thin kopf handlers: every one ends in :func:`reconcile`, which works by level.

- pools: ``create`` / ``update`` (spec) / ``resume`` and a resync ``timer`` reconcile the
  children (Deployment, Service, PDB, ServiceMonitor), the pods' roles and the status.
- pods: an ``event`` handler reconciles the roles and the status of the pod's pool (pods
  and pools are read from kopf indexes: no extra API call).
- deletion: children carry ``ownerReferences`` to the pool (``controller: true``), so
  Kubernetes' garbage collector removes them; no finalizer is needed for that, and an
  uninstalled operator never blocks a pool's deletion. ``on.delete`` (optional) only
  forgets the pool's metrics.

The clients and options live in ``memo`` (see :func:`startup`); ``preheat operator``
(:mod:`preheat.operator.main`) fills it, and ``kopf run -m preheat.operator.handlers``
works too (options from ``PREHEAT_OPERATOR_CONFIG``, credentials from the kubeconfig).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from preheat.api.pool import PoolSpecError, to_config
from preheat.core.pool import PoolConfig
from preheat.core.reconcile import (
    ANNOTATION_DELETION_COST,
    GROUP,
    KIND,
    LABEL_NAME,
    LABEL_POOL,
    LABEL_ROLE,
    PLURAL,
    ROLE_DRAINING,
    VERSION,
    WORKER_NAME,
    BuildError,
    BuildOptions,
    Owner,
    assign_roles,
    deletion_costs,
    desired_children,
    diff,
    needs_update,
    selector_string,
)
from preheat.operator.kube import KINDS, Conflict, Kube, kind_of, merge_patch
from preheat.operator.metrics import Metrics
from preheat.operator.status import (
    DEGRADED,
    Problem,
    compute_status,
    observe_pod,
    status_changed,
)

RESYNC_S = float(os.environ.get("PREHEAT_OPERATOR_RESYNC_S", "60"))
"""Level-based resync of every pool (children, roles, status), seconds."""

PoolKey = tuple[str, str]  # (namespace, name)


@dataclass
class Runtime:
    """What the handlers share: built once at startup, kept in ``memo.runtime``."""

    kube: Kube
    build: BuildOptions = field(default_factory=BuildOptions)
    metrics: Metrics = field(default_factory=Metrics)
    locks: dict[PoolKey, asyncio.Lock] = field(default_factory=dict)
    # Pod patches whose watch event kopf's index may not have seen yet:
    # (namespace, pod) -> (resourceVersion before, after, role, deletion cost).
    written: dict[PoolKey, tuple[str, str, str, str]] = field(default_factory=dict)

    def lock(self, key: PoolKey) -> asyncio.Lock:
        return self.locks.setdefault(key, asyncio.Lock())


# --- startup, login, cleanup ------------------------------------------------------------


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.scanning.disabled = True  # namespaces are named (or the cluster): no scanning
    settings.posting.level = logging.WARNING  # our own Events only, not kopf's chatter
    settings.persistence.finalizer = f"{GROUP}/operator"
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 30
    if getattr(memo, "runtime", None) is None:
        from preheat.operator.main import load_build_options

        path = os.environ.get("PREHEAT_OPERATOR_CONFIG", "")
        memo.runtime = Runtime(kube=await Kube.connect(), build=load_build_options(path))


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """The pod's service account in a cluster, else the kubeconfig (``KUBECONFIG``)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime | None = getattr(memo, "runtime", None)
    if runtime is not None:
        await runtime.kube.close()


# --- indexes: pools and their pods, kept by kopf from its watches -----------------------


@kopf.index(GROUP, VERSION, PLURAL)
def pools_index(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[PoolKey, Any]:
    return {(namespace or "", name): _plain(body)}


@kopf.index("pods", labels={LABEL_NAME: WORKER_NAME, LABEL_POOL: kopf.PRESENT})
def pods_index(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
    return {(namespace or "", labels[LABEL_POOL]): _plain(body)}


# --- pools ------------------------------------------------------------------------------


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def pool_changed(
    namespace: str | None,
    name: str,
    body: kopf.Body,
    memo: Any,
    **kwargs: Any,
) -> None:
    index = kwargs["pods_index"]
    pods = lambda: _pods(index, namespace, name)  # noqa: E731  (read under the pool's lock)
    await reconcile(memo.runtime, _plain(body), pods, children=True)


@kopf.timer(GROUP, VERSION, PLURAL, interval=RESYNC_S, initial_delay=RESYNC_S)
async def pool_resync(
    namespace: str | None,
    name: str,
    body: kopf.Body,
    memo: Any,
    **kwargs: Any,
) -> None:
    index = kwargs["pods_index"]
    pods = lambda: _pods(index, namespace, name)  # noqa: E731  (read under the pool's lock)
    await reconcile(memo.runtime, _plain(body), pods, children=True)


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
async def pool_deleted(namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    runtime: Runtime = memo.runtime
    runtime.metrics.forget_pool(namespace or "", name)
    runtime.locks.pop((namespace or "", name), None)


# --- pods -------------------------------------------------------------------------------


@kopf.on.event("pods", labels={LABEL_NAME: WORKER_NAME, LABEL_POOL: kopf.PRESENT})
async def pod_event(
    namespace: str | None,
    labels: kopf.Labels,
    memo: Any,
    **kwargs: Any,
) -> None:
    pool_name = labels[LABEL_POOL]
    pools_index: kopf.Index[PoolKey, Any] = kwargs["pools_index"]
    index = kwargs["pods_index"]
    pods = lambda: _pods(index, namespace, pool_name)  # noqa: E731
    for pool in pools_index.get((namespace or "", pool_name), []):
        await reconcile(memo.runtime, pool, pods, children=False)


# --- the reconcile ----------------------------------------------------------------------


def _plain(body: Any) -> dict[str, Any]:
    """A kopf body view as plain dicts (safe to keep in an index)."""
    return {k: _copy(v) for k, v in dict(body).items()}


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    return value


def _pods(index: kopf.Index[Any, Any], namespace: str | None, pool: str) -> list[dict[str, Any]]:
    return [dict(p) for p in index.get((namespace or "", pool), [])]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _event(pool: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    kopf.event(pool, type=type_, reason=reason, message=message[:1024])  # type: ignore[arg-type]


def _degraded_message(status: Mapping[str, Any] | None) -> str | None:
    for c in (status or {}).get("conditions") or []:
        if c.get("type") == DEGRADED and c.get("status") == "True":
            return str(c.get("message", ""))
    return None


async def reconcile(
    runtime: Runtime,
    pool: Mapping[str, Any],
    pods: Callable[[], Sequence[Mapping[str, Any]]],
    *,
    children: bool,
) -> None:
    """Bring one pool's children, pod roles and status to the level its spec asks for.

    ``pods`` reads the pool's pods (kopf's index) once the pool's lock is held.
    """
    meta = pool.get("metadata") or {}
    namespace, name = str(meta["namespace"]), str(meta["name"])
    async with runtime.lock((namespace, name)):
        await _reconcile(runtime, pool, [_fresh(runtime, p) for p in pods()], children=children)


def _fresh(runtime: Runtime, pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod with our own last role/cost patch when the index has not seen it yet."""
    meta = pod.get("metadata") or {}
    key = (str(meta.get("namespace")), str(meta.get("name")))
    written = runtime.written.get(key)
    if written is None:
        return pod
    before, _, role, cost = written
    if str(meta.get("resourceVersion")) != before:
        runtime.written.pop(key, None)  # the index caught up (or someone else wrote)
        return pod
    meta = {
        **meta,
        "labels": {**(meta.get("labels") or {}), LABEL_ROLE: role},
        "annotations": {**(meta.get("annotations") or {}), ANNOTATION_DELETION_COST: cost},
    }
    return {**pod, "metadata": meta}


async def _reconcile(
    runtime: Runtime, pool: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *, children: bool
) -> None:
    meta = pool.get("metadata") or {}
    namespace, name = str(meta["namespace"]), str(meta["name"])
    generation = int(meta.get("generation") or 0)
    previous: Mapping[str, Any] = pool.get("status") or {}
    observed = [observe_pod(p) for p in pods]
    problem: Problem | None = None
    config: PoolConfig | None = None
    try:
        config = to_config(pool.get("spec") or {}, name=name, namespace=namespace)
        owner = Owner(name=name, uid=str(meta.get("uid", "")))
        desired = desired_children(config, owner, runtime.build)  # all or nothing: pure
    except PoolSpecError as e:
        problem = Problem("InvalidSpec", f"{e.message}; fix the spec and apply it again")
    except BuildError as e:
        problem = Problem("BuildFailed", e.message)

    if problem is not None or config is None:
        assert problem is not None
        status = compute_status(
            pods=observed,
            want_active=None,
            want_standby=0,
            selector=str(previous.get("selector", "")),
            generation=generation,
            previous=previous,
            now=_now(),
            problem=problem,
        )
        if _degraded_message(previous) != problem.message:
            _event(pool, "Warning", problem.reason, problem.message)
        await _write_status(runtime, pool, status, previous)
        runtime.metrics.reconciles.labels("degraded").inc()
        return

    if children:
        for child in desired:
            await _apply(runtime, pool, child)
    await _assign_roles(runtime, pool, config, observed)
    status = compute_status(
        pods=observed,
        want_active=config.replicas.desired,
        want_standby=config.replicas.warm_standby,
        selector=selector_string(config),
        generation=generation if children else int(previous.get("observedGeneration") or 0),
        previous=previous,
        now=_now(),
    )
    if _degraded_message(previous) is not None:
        _event(pool, "Normal", "Recovered", "the spec is usable again; children reconciled")
    await _write_status(runtime, pool, status, previous)
    runtime.metrics.reconciles.labels("ok").inc()


async def _apply(runtime: Runtime, pool: Mapping[str, Any], child: Mapping[str, Any]) -> None:
    """Create-or-patch one child, only when it differs from what we want."""
    kind = kind_of(child)
    meta = child["metadata"]
    ref = f"{child['kind']} {meta['name']}"
    observed = await runtime.kube.get(kind, meta["namespace"], meta["name"])
    if observed is None:
        try:
            await runtime.kube.create(child)
        except Conflict:  # made meanwhile (a retried request, a second operator): compare
            observed = await runtime.kube.get(kind, meta["namespace"], meta["name"])
        else:
            runtime.metrics.actions.labels("create").inc()
            _event(pool, "Normal", "Created", f"created {ref}")
            return
    if not needs_update(child, observed):
        return
    assert observed is not None
    changed = diff(child, observed)
    await runtime.kube.patch(kind, meta["namespace"], meta["name"], merge_patch(child, observed))
    runtime.metrics.actions.labels("patch").inc()
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    _event(pool, "Normal", "Updated", f"updated {ref}: {shown}")


async def _assign_roles(
    runtime: Runtime, pool: Mapping[str, Any], config: PoolConfig, observed: Sequence[Any]
) -> None:
    """Role labels and deletion costs on the pool's pods, from :func:`assign_roles`."""
    live = [p for p in observed if not p.terminating]
    if not live:
        return
    views = [p.view() for p in live]
    plan = assign_roles(views, config.replicas.desired, config.replicas.warm_standby)
    roles = dict(plan.roles)
    roles.update({v: ROLE_DRAINING for v in plan.victims})
    costs = deletion_costs(views, plan.victims)
    by_name = {p.name: p for p in live}
    patched = 0
    for pod_name, role in sorted(roles.items()):
        pod = by_name[pod_name]
        cost = str(costs.get(pod_name, 0))
        if pod.role == role and pod.deletion_cost == cost:
            continue
        after = await runtime.kube.patch(
            KINDS["Pod"],
            config.namespace,
            pod_name,
            {
                "metadata": {
                    "labels": {LABEL_ROLE: role},
                    "annotations": {ANNOTATION_DELETION_COST: cost},
                }
            },
        )
        runtime.written[(config.namespace, pod_name)] = (
            pod.resource_version,
            str((after.get("metadata") or {}).get("resourceVersion", "")),
            role,
            cost,
        )
        patched += 1
    if patched:
        runtime.metrics.actions.labels("pod-roles").inc(patched)
        _event(pool, "Normal", "RolesAssigned", f"{patched} pod(s) relabelled: {plan.reason}")


async def _write_status(
    runtime: Runtime,
    pool: Mapping[str, Any],
    status: Mapping[str, Any],
    previous: Mapping[str, Any],
) -> None:
    meta = pool["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    degraded = any(c["type"] == DEGRADED and c["status"] == "True" for c in status["conditions"])
    runtime.metrics.set_pool(
        namespace, name, status["replicas"], int(status["desiredReplicas"]), degraded
    )
    if not status_changed(status, previous):
        return
    await runtime.kube.patch_status(namespace, name, status)
    runtime.metrics.actions.labels("status").inc()


__all__ = ["KIND", "RESYNC_S", "Runtime", "reconcile"]
from preheat.operator import autoscaling as _autoscaling  # noqa: E402, F401  (registers its handlers)
