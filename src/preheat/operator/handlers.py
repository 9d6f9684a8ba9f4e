"""The operator's kopf handlers, and nothing else: each hands over to a service in ``memo``.

- pools: ``create`` / ``update`` (spec) / ``resume`` and a resync daemon (every
  ``OperatorOptions.resync_s``) call :meth:`Reconciler.reconcile
  <preheat.operator.reconciler.Reconciler.reconcile>` for the children (Deployment,
  Service, PDB, ServiceMonitor), the pods' roles and the status; an ``autoscale`` daemon
  per pool runs :meth:`Autoscaler.evaluate <preheat.operator.autoscaling.Autoscaler.evaluate>`
  every ``AutoscalerOptions.interval_s``.
- pods: an ``event`` handler reconciles the roles and the status of the pod's pool (pods
  and pools are read from kopf's indexes, ``pools_index`` and ``pods_index``: no extra API
  call).
- deletion: children carry ``ownerReferences`` to the pool (``controller: true``), so
  Kubernetes' garbage collector removes them. kopf puts its finalizer
  (``preheat.dev/operator``) on every pool because of the two daemons (kopf requires one
  for daemons and timers) and removes it once they stopped: while the operator is not
  running, a deleted pool waits for it, unless the chart's post-delete hook
  (:mod:`preheat.operator.release`, ``preheat release-pools``) released it after
  ``helm uninstall`` (uninstall order: charts/preheat/README.md).
  ``on.delete`` (optional) only forgets the pool's metrics.

``memo`` holds ``options`` (:class:`~preheat.operator.options.OperatorOptions`),
``reconciler`` and ``autoscaler``, made once by ``preheat operator``
(:func:`preheat.operator.main.serve`) or, under ``kopf run -m preheat.operator.handlers``,
by :func:`startup` (options from ``PREHEAT_OPERATOR_CONFIG`` and the environment,
credentials from the kubeconfig).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from typing import Any

import kopf

from preheat.core.manifests import (
    GROUP,
    KIND,
    LABEL_NAME,
    LABEL_POOL,
    OPERATOR_FINALIZER,
    PLURAL,
    VERSION,
    WORKER_NAME,
)
from preheat.operator.autoscaling import Autoscaler, PoolLoop
from preheat.operator.indexes import PodsIndex, PoolsIndex, nap, plain, pods_of
from preheat.operator.kube import Kube, in_cluster_server
from preheat.operator.options import OperatorOptions, options_from_env
from preheat.operator.reconciler import PoolKey, Reconciler
from preheat.operator.services import services
from preheat.operator.workers import WorkerUnavailable

log = logging.getLogger(__name__)

EVENT_RETRIES = 30
"""A pod event whose reconcile found a worker unavailable retries this many times (with the
error's delay) before leaving it to the resync."""


WORKER_PODS_SELECTOR = f"{LABEL_NAME}={WORKER_NAME},{LABEL_POOL}"
"""The label selector of every pool's worker pods (core.manifests.selector_labels)."""


# --- startup, login, cleanup ------------------------------------------------------------


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.scanning.disabled = True  # namespaces are named (or the cluster): no scanning
    settings.posting.level = logging.WARNING  # our own Events only, not kopf's chatter
    settings.persistence.finalizer = OPERATOR_FINALIZER
    # Server-side: the pods watch streams the pools' workers only, not every pod of the
    # cluster (the handlers' ``labels=`` filters are applied by kopf on its side).
    settings.watching.label_selectors["v1", "pods"] = WORKER_PODS_SELECTOR
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 30
    if getattr(memo, "reconciler", None) is None:  # kopf run -m preheat.operator.handlers
        memo.options = options_from_env(os.environ)
        memo.reconciler, memo.autoscaler = services(memo.options, await Kube.connect())


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """The pod's service account in a cluster, else the kubeconfig (``KUBECONFIG``).

    In a pod the API server is where ``KUBERNETES_SERVICE_HOST``/``_PORT`` say (what
    client-go and :meth:`Kube.connect` use), not kopf's fixed ``kubernetes.default.svc``:443,
    which needs cluster DNS and the default port.
    """
    info = kopf.login_with_service_account(**kwargs)
    if info is not None:
        server = in_cluster_server(os.environ)
        return dataclasses.replace(info, server=server) if server else info
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Autoscaler loops stop before their next API call; then the client closes."""
    autoscaler: Autoscaler | None = getattr(memo, "autoscaler", None)
    if autoscaler is not None:
        autoscaler.closing = True
    reconciler: Reconciler | None = getattr(memo, "reconciler", None)
    if reconciler is not None:
        await reconciler.kube.close()


# --- indexes: pools and their pods, kept by kopf from its watches -----------------------


@kopf.index(GROUP, VERSION, PLURAL)
def pools_index(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[PoolKey, dict[str, Any]]:
    return {(namespace or "", name): plain(body)}


@kopf.index("pods", labels={LABEL_NAME: WORKER_NAME, LABEL_POOL: kopf.PRESENT})
def pods_index(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[PoolKey, dict[str, Any]]:
    return {(namespace or "", labels[LABEL_POOL]): plain(body)}


# --- pools ------------------------------------------------------------------------------


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")  # type: ignore[arg-type]
async def pool_changed(
    namespace: str | None,
    name: str,
    body: kopf.Body,
    memo: kopf.Memo,
    pods_index: PodsIndex,
    **_: Any,
) -> None:
    reconciler: Reconciler = memo.reconciler
    await reconciler.reconcile(
        plain(body), lambda: pods_of(pods_index, namespace, name), children=True
    )


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10.0)  # type: ignore[arg-type]
async def pool_resync(
    stopped: kopf.DaemonStopped,
    namespace: str | None,
    name: str,
    body: kopf.Body,
    memo: kopf.Memo,
    pods_index: PodsIndex,
    **_: Any,
) -> None:
    """The same level-based reconcile as :func:`pool_changed`, every ``resync_s`` (a worker
    found unavailable: again after the error's delay)."""
    options: OperatorOptions = memo.options
    reconciler: Reconciler = memo.reconciler
    delay = options.resync_s
    while await nap(stopped, delay, memo):
        delay = options.resync_s
        try:
            pods = lambda: pods_of(pods_index, namespace, name)  # noqa: E731
            await reconciler.reconcile(plain(body), pods, children=True)
        except kopf.TemporaryError as e:
            delay = e.delay or delay
        except Exception:
            log.exception("resync_failed pool=%s/%s", namespace or "", name)


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
async def pool_deleted(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    reconciler: Reconciler = memo.reconciler
    reconciler.forget((namespace or "", name))


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10.0)  # type: ignore[arg-type]
async def autoscale(
    stopped: kopf.DaemonStopped,
    namespace: str | None,
    name: str,
    body: kopf.Body,
    memo: kopf.Memo,
    pods_index: PodsIndex,
    **_: Any,
) -> None:
    """The pool's autoscaler loop: ``body`` is kopf's live view of the pool (latest event)."""
    auto: Autoscaler = memo.autoscaler
    reconciler: Reconciler = memo.reconciler
    key = (namespace or "", name)
    loop = auto.pools.setdefault(key, PoolLoop())
    try:
        while not stopped and not auto.closing:
            try:
                pods = lambda: pods_of(pods_index, namespace, name)  # noqa: E731
                await auto.evaluate(reconciler, body, pods, loop)
            except (kopf.TemporaryError, kopf.PermanentError) as e:
                if auto.closing:
                    break
                log.warning("autoscaler_write_failed pool=%s/%s error=%s", *key, e)
            except Exception:
                if auto.closing:
                    break
                log.exception("autoscaler_evaluation_failed pool=%s/%s", *key)
            if not await nap(stopped, auto.options.interval_s, memo):
                break
    finally:
        auto.pools.pop(key, None)
        auto.metrics.forget_pool(*key)
        if loop.source is not None:
            await asyncio.shield(loop.source.close())


# --- pods -------------------------------------------------------------------------------


@kopf.on.event("pods", labels={LABEL_NAME: WORKER_NAME, LABEL_POOL: kopf.PRESENT})  # type: ignore[arg-type]
async def pod_event(
    namespace: str | None,
    labels: kopf.Labels,
    memo: kopf.Memo,
    pools_index: PoolsIndex,
    pods_index: PodsIndex,
    **_: Any,
) -> None:
    pool_name = labels[LABEL_POOL]
    reconciler: Reconciler = memo.reconciler
    key = (namespace or "", pool_name)
    owner = False  # this event's handler holds the pool's retry loop
    try:
        for attempt in range(EVENT_RETRIES + 1):
            try:
                for pool in pools_index.get(key, []):  # re-read: the latest spec each time
                    pods = lambda: pods_of(pods_index, namespace, pool_name)  # noqa: E731
                    await reconciler.reconcile(pool, pods, children=False)
                return
            except WorkerUnavailable as e:
                # kopf does not retry event handlers: one loop per pool retries them.
                if not owner and key in reconciler.retrying:
                    return  # another event's loop is on it
                if attempt == EVENT_RETRIES:
                    raise  # the resync takes over
                owner = True
                reconciler.retrying.add(key)
                await asyncio.sleep(e.delay or 1.0)
    finally:
        if owner:
            reconciler.retrying.discard(key)


__all__ = ["KIND"]
