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
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from preheat.api.pool import PoolSpecError, to_config
from preheat.core.autoscaling.standby import wanted
from preheat.core.control.roles import ROLE_ACTIVE, ROLE_DRAINING, deletion_costs
from preheat.core.errors import PreheatError
from preheat.core.manifests import (
    ANNOTATION_DELETION_COST,
    CONTROL_PORT,
    GROUP,
    KIND,
    LABEL_NAME,
    LABEL_POOL,
    LABEL_ROLE,
    PLURAL,
    VERSION,
    WORKER_NAME,
    BuildError,
    BuildOptions,
    Owner,
    build_control_secret,
    cache_token_patch,
    control_secret_name,
    control_token_digest,
    desired_children,
    diff,
    needs_update,
    read_cache_token,
    read_control_secret,
    selector_string,
)
from preheat.core.pool import PoolConfig
from preheat.operator.kube import KINDS, Conflict, Kube, kind_of, merge_patch
from preheat.operator.metrics import Metrics
from preheat.operator.observe import role_plan
from preheat.operator.status import (
    DEGRADED,
    Problem,
    compute_status,
    observe_pod,
    status_changed,
)
from preheat.operator.workers import WorkerRefused, WorkerUnavailable, set_role
from preheat.wire.tokens import read_token

log = logging.getLogger(__name__)

RESYNC_S = float(os.environ.get("PREHEAT_OPERATOR_RESYNC_S", "60"))
"""Level-based resync of every pool (children, roles, status), seconds."""

ANNOTATION_CONTROL_PORT = f"{GROUP}/control-port"
"""Overrides the worker's control port on a pod (tests; :data:`CONTROL_PORT` otherwise)."""
WORKER_TIMEOUT_S = float(os.environ.get("PREHEAT_OPERATOR_WORKER_TIMEOUT_S", "5"))
"""Deadline of one Promote/Demote/Drain call to a worker, seconds."""
EVENT_RETRIES = 30
"""A pod event whose reconcile found a worker unavailable retries this many times (with the
error's delay) before leaving it to the resync timer."""

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
    # What each worker was last told: (namespace, pod) -> (address, restarts, role, ok);
    # ok is False when the worker refused. A container restart or a new IP asks again.
    workers: dict[PoolKey, tuple[str, int, str, bool]] = field(default_factory=dict)
    retrying: set[PoolKey] = field(default_factory=set)  # pools a pod event is retrying
    # Each pool's (control token, cache token), read from (or written to) its Secret:
    # re-read on every children reconcile (spec change, resync), so rotation is picked up.
    tokens: dict[PoolKey, tuple[str, str]] = field(default_factory=dict)
    # The workers' cache token (--worker-cache-token-file), put in every pool's Secret.
    cache_token: str = field(default="", repr=False)
    worker_timeout_s: float = WORKER_TIMEOUT_S

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
        memo.runtime = Runtime(
            kube=await Kube.connect(),
            build=load_build_options(path),
            cache_token=read_token(
                os.environ.get("PREHEAT_WORKER_CACHE_TOKEN_FILE", ""), "PREHEAT_CACHE_TOKEN"
            ),
        )


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
    await _reconcile_pool(namespace, name, body, memo, kwargs["pods_index"])


async def _reconcile_pool(
    namespace: str | None, name: str, body: kopf.Body, memo: Any, index: Any
) -> None:
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
    """The same level-based reconcile as :func:`pool_changed`, on a timer."""
    await _reconcile_pool(namespace, name, body, memo, kwargs["pods_index"])


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
async def pool_deleted(namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    runtime: Runtime = memo.runtime
    runtime.metrics.forget_pool(namespace or "", name)
    runtime.locks.pop((namespace or "", name), None)
    runtime.tokens.pop((namespace or "", name), None)


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
    runtime: Runtime = memo.runtime
    key = (namespace or "", pool_name)
    owner = False  # this event's handler holds the pool's retry loop
    try:
        for attempt in range(EVENT_RETRIES + 1):
            try:
                for pool in pools_index.get(key, []):  # re-read: the latest spec each time
                    await reconcile(runtime, pool, pods, children=False)
                return
            except WorkerUnavailable as e:
                # kopf does not retry event handlers: one loop per pool retries them.
                if not owner and key in runtime.retrying:
                    return  # another event's loop is on it
                if attempt == EVENT_RETRIES:
                    raise  # the resync timer takes over
                owner = True
                runtime.retrying.add(key)
                await asyncio.sleep(e.delay or 1.0)
    finally:
        if owner:
            runtime.retrying.discard(key)


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
    token = ""
    try:
        config = to_config(pool.get("spec") or {}, name=name, namespace=namespace)
        owner = Owner(name=name, uid=str(meta.get("uid", "")))
        token, cache_token = await _control_token(runtime, config, owner, refresh=children)
        desired = desired_children(  # all or nothing: pure
            config,
            owner,
            runtime.build,
            control_token_digest=control_token_digest(token, cache_token),
        )
    except PoolSpecError as e:
        problem = Problem("InvalidSpec", f"{e.message}; fix the spec and apply it again")
    except BuildError as e:
        problem = Problem("BuildFailed", e.message)
    except PreheatError as e:  # the control Secret exists without a usable token
        problem = Problem("ControlSecretInvalid", e.message)

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
    unavailable = await _assign_roles(runtime, pool, config, observed, pods, token)
    status = compute_status(
        pods=observed,
        want_active=config.replicas.desired,
        want_standby=wanted(config.replicas, config.replicas.desired),
        selector=selector_string(config),
        generation=generation if children else int(previous.get("observedGeneration") or 0),
        previous=previous,
        now=_now(),
    )
    if _degraded_message(previous) is not None:
        _event(pool, "Normal", "Recovered", "the spec is usable again; children reconciled")
    await _write_status(runtime, pool, status, previous)
    runtime.metrics.reconciles.labels("ok").inc()
    if unavailable is not None:
        raise unavailable  # status written; kopf retries the pool after the error's delay


async def _control_token(
    runtime: Runtime, config: PoolConfig, owner: Owner, *, refresh: bool
) -> tuple[str, str]:
    """The pool's (control token, cache token): from its Secret, made (a random 256-bit
    control token, the operator's cache token) when there is none. The operator's cache
    token, when it has one, is written into a Secret that holds another. Cached in
    ``runtime.tokens``; ``refresh`` reads the Secret again (rotation)."""
    key = (config.namespace, config.name)
    if not refresh and key in runtime.tokens:
        return runtime.tokens[key]
    name = control_secret_name(config)
    secret_kind = KINDS["Secret"]
    observed = await runtime.kube.get(secret_kind, config.namespace, name)
    tokens = (secrets.token_urlsafe(32), runtime.cache_token)
    if observed is None:
        try:
            await runtime.kube.create(build_control_secret(config, owner, *tokens))
        except Conflict:  # made meanwhile: use that one
            observed = await runtime.kube.get(secret_kind, config.namespace, name)
        else:
            runtime.metrics.actions.labels("create").inc()
            log.info("created Secret %s/%s (the workers' tokens)", config.namespace, name)
    if observed is not None:
        tokens = (read_control_secret(observed), read_cache_token(observed))
        if runtime.cache_token and tokens[1] != runtime.cache_token:
            await runtime.kube.patch(
                secret_kind, config.namespace, name, cache_token_patch(runtime.cache_token)
            )
            runtime.metrics.actions.labels("patch").inc()
            log.info("set the cache token in Secret %s/%s", config.namespace, name)
            tokens = (tokens[0], runtime.cache_token)
    runtime.tokens[key] = tokens
    return tokens


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
    runtime: Runtime,
    pool: Mapping[str, Any],
    config: PoolConfig,
    observed: Sequence[Any],
    pods: Sequence[Mapping[str, Any]],
    token: str,
) -> WorkerUnavailable | None:
    """Roles on the pool's workers (over gRPC, on their control port with ``token``) and
    pods (label, deletion cost).

    The plan comes from :func:`assign_roles`. A worker is told first (Promote, Demote,
    Drain) and its pod relabelled after, so the label never says ``active`` before the
    worker is. Pods without an IP get only the label (nothing to call). Returns the first
    :class:`WorkerUnavailable`, for the caller to raise once the status is written.
    """
    live = [p for p in observed if not p.terminating]
    if not live:
        return None
    views = [p.view() for p in live]
    plan = role_plan(config, [p for p in pods if not observe_pod(p).terminating])
    roles = dict(plan.roles)
    roles.update({v: ROLE_DRAINING for v in plan.victims})
    costs = deletion_costs(views, plan.victims)
    by_name = {p.name: p for p in live}
    raw = {str((p.get("metadata") or {}).get("name", "")): p for p in pods}
    unavailable = await _tell_workers(runtime, pool, config.namespace, roles, raw, token)
    patched = 0
    for pod_name, role in sorted(roles.items()):
        pod = by_name[pod_name]
        cost = str(costs.get(pod_name, 0))
        if role == ROLE_ACTIVE and not _worker_is(runtime, config.namespace, raw, pod_name, role):
            continue  # the worker is not active (yet): the label waits for it
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
    return unavailable


def _worker_is(
    runtime: Runtime,
    namespace: str,
    pods: Mapping[str, Mapping[str, Any]],
    pod_name: str,
    role: str,
) -> bool:
    """Did the pod's worker (as it is now: address, restarts) take ``role``? True without IP."""
    found = _worker_address(pods.get(pod_name) or {})
    if found is None:
        return True
    return runtime.workers.get((namespace, pod_name)) == (*found, role, True)


def _worker_address(pod: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(host:control port, restarts)`` of a pod's worker, or None when it has no IP yet."""
    ip = str((pod.get("status") or {}).get("podIP") or "")
    if not ip:
        return None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    port = str(annotations.get(ANNOTATION_CONTROL_PORT) or CONTROL_PORT)
    host = f"[{ip}]" if ":" in ip else ip
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    return f"{host}:{port}", restarts


async def _tell_workers(
    runtime: Runtime,
    pool: Mapping[str, Any],
    namespace: str,
    roles: Mapping[str, str],
    pods: Mapping[str, Mapping[str, Any]],
    token: str,
) -> WorkerUnavailable | None:
    """Call every worker whose role (or address, or container) changed since it was last
    told, concurrently; remember the answers. Returns the first unavailable error."""
    jobs: dict[str, tuple[str, int, str]] = {}
    for pod_name, role in roles.items():
        found = _worker_address(pods.get(pod_name) or {})
        if found is None:
            continue
        address, restarts = found
        told = runtime.workers.get((namespace, pod_name))
        if told is not None and told[:3] == (address, restarts, role):
            continue  # told already (and it answered, or refused: not asked again)
        jobs[pod_name] = (address, restarts, role)
    for key in [k for k in runtime.workers if k[0] == namespace and k[1] not in roles]:
        if key[1] not in pods:
            runtime.workers.pop(key, None)  # the pod is gone (or not this pool's)
    if not jobs:
        return None
    names = sorted(jobs)
    results = await asyncio.gather(
        *(
            set_role(jobs[n][0], jobs[n][2], timeout_s=runtime.worker_timeout_s, token=token)
            for n in names
        ),
        return_exceptions=True,
    )
    unavailable: WorkerUnavailable | None = None
    answered = 0
    for pod_name, result in zip(names, results, strict=True):
        address, restarts, role = jobs[pod_name]
        if isinstance(result, WorkerUnavailable):
            log.info("worker %s (%s) not %s yet: %s", pod_name, address, role, result)
            unavailable = unavailable or result
        elif isinstance(result, WorkerRefused):
            log.warning("worker %s refused %s: %s", pod_name, role, result)
            _event(pool, "Warning", "WorkerRefused", f"pod {pod_name}: {result}")
            runtime.workers[(namespace, pod_name)] = (address, restarts, role, False)
        elif isinstance(result, BaseException):
            raise result
        else:
            runtime.workers[(namespace, pod_name)] = (address, restarts, role, True)
            answered += 1
    if answered:
        runtime.metrics.actions.labels("worker-roles").inc(answered)
    return unavailable


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
