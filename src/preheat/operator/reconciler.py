"""The operator's reconcile service: one pool's children, pod roles and status, by level.

:class:`Reconciler` is built once (``preheat operator``'s ``serve``, or the startup handler
under ``kopf run``) and kept in ``memo.reconciler``; the kopf handlers
(:mod:`preheat.operator.handlers`) only call :meth:`Reconciler.reconcile`. What it
remembers between calls is in named records: :class:`PodWrite` (our last pod patch, until
kopf's index shows it), :class:`WorkerTold` (what each worker was last told) and
:class:`PoolTokens` (each pool's control and cache tokens).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
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
    LABEL_ROLE,
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
from preheat.operator import tracing
from preheat.operator.kube import KINDS, Conflict, Kube, kind_of, merge_patch
from preheat.operator.metrics import Metrics
from preheat.operator.observe import WorkerLoad, role_plan
from preheat.operator.status import (
    CRASH_LOOPING,
    DEGRADED,
    ObservedPod,
    Problem,
    compute_status,
    observe_pod,
    status_changed,
)
from preheat.operator.workers import WorkerRefused, WorkerUnavailable, set_role
from preheat.process.tracing import Tracing
from preheat.wire import workerctl

log = logging.getLogger(__name__)

PoolKey = tuple[str, str]  # (namespace, name)

ANNOTATION_CONTROL_PORT = f"{GROUP}/control-port"
"""Overrides the worker's control port on a pod (tests; :data:`CONTROL_PORT` otherwise)."""


@dataclass(frozen=True)
class PodWrite:
    """Our last role/cost patch of a pod, kept until kopf's index shows a newer version."""

    before: str  # the resourceVersion the patch was made on
    after: str  # the resourceVersion it produced
    role: str
    cost: str


@dataclass(frozen=True)
class WorkerTold:
    """What a worker was last told. A container restart or a new IP asks again."""

    address: str  # host:control port
    restarts: int
    role: str
    ok: bool  # False: the worker refused (not asked again until something changes)


@dataclass(frozen=True)
class PoolTokens:
    """A pool's tokens, read from (or written to) its control Secret."""

    control: str = field(repr=False)
    cache: str = field(default="", repr=False)


@dataclass
class Reconciler:
    """What the handlers share: the API client, the options, and per-pool memory."""

    kube: Kube
    build: BuildOptions = field(default_factory=BuildOptions)
    metrics: Metrics = field(default_factory=Metrics)
    # the workers' cache token (--worker-cache-token-file), put in every pool's Secret
    cache_token: str = field(default="", repr=False)
    worker_timeout_s: float = 5.0
    locks: dict[PoolKey, asyncio.Lock] = field(default_factory=dict)
    # per pool, our last role/cost patch of each of its pods (by pod name) that kopf's
    # index may not show yet; dropped when the index shows a newer version or the pod goes
    written: dict[PoolKey, dict[str, PodWrite]] = field(default_factory=dict)
    # per pool, what each of its workers (by pod name) was last told
    workers: dict[PoolKey, dict[str, WorkerTold]] = field(default_factory=dict)
    retrying: set[PoolKey] = field(default_factory=set)  # pools a pod event is retrying
    # re-read on every children reconcile (spec change, resync), so rotation is picked up
    tokens: dict[PoolKey, PoolTokens] = field(default_factory=dict)
    # the newest generation whose children this operator applied, per pool: a reconcile
    # that does not apply them (a pod event) reports it, even from a stale body whose
    # status predates that write (kopf's index is read before the pool's lock is held)
    applied: dict[PoolKey, int] = field(default_factory=dict)
    tracing: Tracing | None = None  # operator.reconcile spans (--tracing)

    def lock(self, key: PoolKey) -> asyncio.Lock:
        return self.locks.setdefault(key, asyncio.Lock())

    def forget(self, key: PoolKey) -> None:
        """A deleted pool: its metrics, lock, tokens, pod patches and what its workers
        were told go."""
        self.metrics.forget_pool(*key)
        self.locks.pop(key, None)
        self.tokens.pop(key, None)
        self.written.pop(key, None)
        self.workers.pop(key, None)
        self.applied.pop(key, None)

    async def reconcile(
        self,
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
        async with self.lock((namespace, name)):
            listed = pods()
            patches = self.written.get((namespace, name), {})
            names = {str((p.get("metadata") or {}).get("name", "")) for p in listed}
            for gone in [n for n in patches if n not in names]:
                del patches[gone]  # the pod went before the index showed our patch
            fresh = [_fresh(patches, p) for p in listed]
            with tracing.reconciling(self.tracing, namespace, name, children):
                await self._reconcile(pool, fresh, children=children)

    async def _reconcile(
        self, pool: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *, children: bool
    ) -> None:
        meta = pool.get("metadata") or {}
        namespace, name = str(meta["namespace"]), str(meta["name"])
        generation = int(meta.get("generation") or 0)
        previous: Mapping[str, Any] = pool.get("status") or {}
        observed = [observe_pod(p) for p in pods]
        problem: Problem | None = None
        config: PoolConfig | None = None
        tokens = PoolTokens("")
        try:
            config = to_config(pool.get("spec") or {}, name=name, namespace=namespace)
            owner = Owner(name=name, uid=str(meta.get("uid", "")))
            tokens = await self._tokens(config, owner, refresh=children)
            desired = desired_children(  # all or nothing: pure
                config,
                owner,
                self.build,
                control_token_digest=control_token_digest(tokens.control, tokens.cache),
            )
        except PoolSpecError as e:
            problem = Problem("InvalidSpec", f"{e.message}; fix the spec and apply it again")
        except BuildError as e:
            problem = Problem("BuildFailed", e.message)
        except PreheatError as e:  # the control Secret exists without a usable token
            problem = Problem("ControlSecretInvalid", e.message)
        except kopf.PermanentError as e:  # the API refused (403, 422): say so on the pool
            problem = Problem("APIRefused", _api_refusal(e))

        unavailable: WorkerUnavailable | None = None
        if problem is None and config is not None:
            # Roles first: a scale-down's victims are draining, with the lowest deletion
            # cost, before the Deployment shrinks, so the ReplicaSet removes them and not
            # an active worker (shrinking first could cut the last one).
            unavailable = await self._assign_roles(pool, config, observed, pods, tokens.control)
        if problem is None and config is not None and children:
            try:
                for child in desired:
                    await self._apply(pool, child)
            except kopf.PermanentError as e:
                problem = Problem("APIRefused", _api_refusal(e))

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
            await self._write_status(pool, status, previous)
            self.metrics.reconciles.labels("degraded").inc()
            tracing.note("degraded", problem.reason)
            return

        key = (namespace, name)
        if children:  # applied above: this generation's children are in place
            self.applied[key] = max(generation, self.applied.get(key, 0))
        reported = max(int(previous.get("observedGeneration") or 0), self.applied.get(key, 0))
        status = compute_status(
            pods=observed,
            want_active=config.replicas.desired,
            want_standby=wanted(config.replicas, config.replicas.desired),
            selector=selector_string(config),
            generation=generation if children else reported,
            previous=previous,
            now=_now(),
        )
        before, now_ = _degraded(previous), _degraded(status)
        if before is not None and now_ is None:
            message = (
                "no worker pod is crash-looping any more"
                if before.get("reason") == CRASH_LOOPING
                else "the spec is usable again; children reconciled"
            )
            _event(pool, "Normal", "Recovered", message)
        elif now_ is not None and (before or {}).get("message") != now_.get("message"):
            _event(pool, "Warning", str(now_.get("reason")), str(now_.get("message"))[:1024])
        await self._write_status(pool, status, previous)
        self.metrics.reconciles.labels("ok").inc()
        tracing.note("ok")
        if unavailable is not None:
            raise unavailable  # status written; kopf retries the pool after the error's delay

    async def _tokens(self, config: PoolConfig, owner: Owner, *, refresh: bool) -> PoolTokens:
        """The pool's tokens: from its Secret, made (a random 256-bit control token, the
        operator's cache token) when there is none. The operator's cache token, when it has
        one, is written into a Secret that holds another. ``refresh`` reads the Secret again
        (rotation)."""
        key = (config.namespace, config.name)
        if not refresh and key in self.tokens:
            return self.tokens[key]
        name = control_secret_name(config)
        secret_kind = KINDS["Secret"]
        observed = await self.kube.get(secret_kind, config.namespace, name)
        tokens = PoolTokens(secrets.token_urlsafe(32), self.cache_token)
        if observed is None:
            try:
                await self.kube.create(
                    build_control_secret(config, owner, tokens.control, tokens.cache)
                )
            except Conflict:  # made meanwhile: use that one
                observed = await self.kube.get(secret_kind, config.namespace, name)
            else:
                self.metrics.actions.labels("create").inc()
                log.info("created Secret %s/%s (the workers' tokens)", config.namespace, name)
        if observed is not None:
            tokens = PoolTokens(read_control_secret(observed), read_cache_token(observed))
            if self.cache_token and tokens.cache != self.cache_token:
                await self.kube.patch(
                    secret_kind, config.namespace, name, cache_token_patch(self.cache_token)
                )
                self.metrics.actions.labels("patch").inc()
                log.info("set the cache token in Secret %s/%s", config.namespace, name)
                tokens = PoolTokens(tokens.control, self.cache_token)
        self.tokens[key] = tokens
        return tokens

    async def _apply(self, pool: Mapping[str, Any], child: Mapping[str, Any]) -> None:
        """Create-or-patch one child, only when it differs from what we want."""
        kind = kind_of(child)
        meta = child["metadata"]
        ref = f"{child['kind']} {meta['name']}"
        observed = await self.kube.get(kind, meta["namespace"], meta["name"])
        if observed is None:
            try:
                await self.kube.create(child)
            except Conflict:  # made meanwhile (a retried request, a second operator): compare
                observed = await self.kube.get(kind, meta["namespace"], meta["name"])
            else:
                self.metrics.actions.labels("create").inc()
                _event(pool, "Normal", "Created", f"created {ref}")
                return
        if not needs_update(child, observed):
            return
        assert observed is not None
        changed = diff(child, observed)
        await self.kube.patch(kind, meta["namespace"], meta["name"], merge_patch(child, observed))
        self.metrics.actions.labels("patch").inc()
        more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        _event(pool, "Normal", "Updated", f"updated {ref}: {', '.join(changed[:5])}{more}")

    async def _assign_roles(
        self,
        pool: Mapping[str, Any],
        config: PoolConfig,
        observed: Sequence[ObservedPod],
        pods: Sequence[Mapping[str, Any]],
        token: str,
    ) -> WorkerUnavailable | None:
        """Roles on the pool's workers (over gRPC, on their control port with ``token``)
        and pods (label, deletion cost).

        The plan comes from :func:`preheat.core.control.step`
        (:func:`~preheat.operator.observe.role_plan`). A worker is told first (Promote,
        Demote, Drain) and its pod relabelled after, so the label never says ``active``
        before the worker is. Pods without an IP get only the label (nothing to call).
        Returns the first :class:`WorkerUnavailable`, for the caller to raise once the
        status is written.
        """
        live = [p for p in observed if not p.terminating]
        if not live:
            return None
        staying = [p for p, o in zip(pods, observed, strict=True) if not o.terminating]
        plan = role_plan(config, staying)
        if plan.victims:
            # A scale-down: pick the victims by what losing each would cost (its cache,
            # sessions and requests in flight), as the workers say on their control port.
            loads = await self._worker_loads(staying, token)
            if loads:
                plan = role_plan(config, staying, loads)
        roles = dict(plan.roles)
        roles.update({v: ROLE_DRAINING for v in plan.victims})
        costs = deletion_costs([p.view() for p in live], plan.victims)
        by_name = {p.name: p for p in live}
        raw = {str((p.get("metadata") or {}).get("name", "")): p for p in pods}
        told = self.workers.setdefault((config.namespace, config.name), {})
        unavailable = await self._tell_workers(pool, told, roles, raw, token)
        patched = 0
        for pod_name, role in sorted(roles.items()):
            pod = by_name[pod_name]
            cost = str(costs.get(pod_name, 0))
            if role == ROLE_ACTIVE and not _worker_is(told, raw, pod_name, role):
                continue  # the worker is not active (yet): the label waits for it
            if pod.role == role and pod.deletion_cost == cost:
                continue
            after = await self.kube.patch(
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
            version = str((after.get("metadata") or {}).get("resourceVersion", ""))
            self.written.setdefault((config.namespace, config.name), {})[pod_name] = PodWrite(
                pod.resource_version, version, role, cost
            )
            patched += 1
        if patched:
            self.metrics.actions.labels("pod-roles").inc(patched)
            _event(pool, "Normal", "RolesAssigned", f"{patched} pod(s) relabelled: {plan.reason}")
        return unavailable

    async def _worker_loads(
        self, pods: Sequence[Mapping[str, Any]], token: str
    ) -> dict[str, WorkerLoad]:
        """Each ready worker's :class:`WorkerLoad` from its ``Status`` (with the control
        ``token``), concurrently; a worker that does not answer in time has none (it costs
        only its role and warmth: an unreachable worker is a fair victim)."""
        asked: dict[str, str] = {}
        for pod in pods:
            found = _worker_address(pod)
            if found is not None and observe_pod(pod).ready:
                asked[str((pod.get("metadata") or {}).get("name", ""))] = found[0]
        names = sorted(asked)
        answers = await asyncio.gather(
            *(
                workerctl.status(asked[n], timeout_s=self.worker_timeout_s, token=token)
                for n in names
            ),
            return_exceptions=True,
        )
        loads: dict[str, WorkerLoad] = {}
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, workerctl.WorkerUnavailableError):
                log.info("worker %s gave no status for scale-down: %s", name, answer)
            elif isinstance(answer, BaseException):
                raise answer
            else:
                loads[name] = WorkerLoad(
                    cached_blocks=answer.cached_blocks,
                    sessions=answer.sessions,
                    in_flight=answer.in_flight,
                )
        return loads

    async def _tell_workers(
        self,
        pool: Mapping[str, Any],
        told: dict[str, WorkerTold],
        roles: Mapping[str, str],
        pods: Mapping[str, Mapping[str, Any]],
        token: str,
    ) -> WorkerUnavailable | None:
        """Call every worker of one pool whose role (or address, or container) changed since
        it was last told (``told``: this pool's memory, by pod name), concurrently; remember
        the answers there. Returns the first unavailable error."""
        jobs: dict[str, WorkerTold] = {}
        for pod_name, role in roles.items():
            found = _worker_address(pods.get(pod_name) or {})
            if found is None:
                continue
            job = WorkerTold(*found, role, True)
            last = told.get(pod_name)
            if last is not None and (last.address, last.restarts, last.role) == (*found, role):
                continue  # told already (and it answered, or refused: not asked again)
            jobs[pod_name] = job
        for gone in [n for n in told if n not in roles and n not in pods]:
            del told[gone]  # the pod is gone
        if not jobs:
            return None
        names = sorted(jobs)
        results = await asyncio.gather(
            *(
                set_role(
                    jobs[n].address, jobs[n].role, timeout_s=self.worker_timeout_s, token=token
                )
                for n in names
            ),
            return_exceptions=True,
        )
        unavailable: WorkerUnavailable | None = None
        answered = 0
        for pod_name, result in zip(names, results, strict=True):
            job = jobs[pod_name]
            if isinstance(result, WorkerUnavailable):
                log.info("worker %s (%s) not %s yet: %s", pod_name, job.address, job.role, result)
                unavailable = unavailable or result
            elif isinstance(result, WorkerRefused):
                log.warning("worker %s refused %s: %s", pod_name, job.role, result)
                _event(pool, "Warning", "WorkerRefused", f"pod {pod_name}: {result}")
                told[pod_name] = WorkerTold(job.address, job.restarts, job.role, False)
            elif isinstance(result, BaseException):
                raise result
            else:
                told[pod_name] = job
                answered += 1
        if answered:
            self.metrics.actions.labels("worker-roles").inc(answered)
        return unavailable

    async def _write_status(
        self, pool: Mapping[str, Any], status: Mapping[str, Any], previous: Mapping[str, Any]
    ) -> None:
        meta = pool["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        degraded = any(
            c["type"] == DEGRADED and c["status"] == "True" for c in status["conditions"]
        )
        self.metrics.set_pool(
            namespace, name, status["replicas"], int(status["desiredReplicas"]), degraded
        )
        if not status_changed(status, previous):
            return
        await self.kube.patch_status(namespace, name, status)
        self.metrics.actions.labels("status").inc()


def _fresh(patches: dict[str, PodWrite], pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod with our own last role/cost patch (``patches``: the pool's, by pod name) when
    the index has not seen it yet; a patch the index has caught up with is dropped."""
    meta = pod.get("metadata") or {}
    pod_name = str(meta.get("name", ""))
    written = patches.get(pod_name)
    if written is None:
        return pod
    if str(meta.get("resourceVersion")) != written.before:
        del patches[pod_name]  # the index caught up (or someone else wrote)
        return pod
    meta = {
        **meta,
        "labels": {**(meta.get("labels") or {}), LABEL_ROLE: written.role},
        "annotations": {
            **(meta.get("annotations") or {}),
            ANNOTATION_DELETION_COST: written.cost,
        },
    }
    return {**pod, "metadata": meta}


def _worker_is(
    told: Mapping[str, WorkerTold],
    pods: Mapping[str, Mapping[str, Any]],
    pod_name: str,
    role: str,
) -> bool:
    """Did the pod's worker (as it is now: address, restarts) take ``role``? True
    without an IP."""
    found = _worker_address(pods.get(pod_name) or {})
    if found is None:
        return True
    return told.get(pod_name) == WorkerTold(*found, role, True)


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


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _event(pool: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    kopf.event(pool, type=type_, reason=reason, message=message[:1024])  # type: ignore[arg-type]


def _degraded(status: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The Degraded condition of ``status`` when it is True, else None."""
    for c in (status or {}).get("conditions") or []:
        if c.get("type") == DEGRADED and c.get("status") == "True":
            return dict(c)
    return None


def _degraded_message(status: Mapping[str, Any] | None) -> str | None:
    for c in (status or {}).get("conditions") or []:
        if c.get("type") == DEGRADED and c.get("status") == "True":
            return str(c.get("message", ""))
    return None


__all__ = ["ANNOTATION_CONTROL_PORT", "PodWrite", "PoolTokens", "Reconciler", "WorkerTold"]


def _api_refusal(e: kopf.PermanentError) -> str:
    """A refusal of the API server (Kube's message: what, the status and the API's body)
    with what usually fixes it."""
    text = str(e)
    if "HTTP 403" in text:
        return f"{text}; the operator's RBAC does not allow this (charts/preheat RBAC)"
    return f"{text}; the API server refused the object: see its message"
