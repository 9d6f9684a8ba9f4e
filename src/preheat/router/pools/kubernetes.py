"""Pool discovery from the Kubernetes API: the InferencePools (``preheat.dev``) in the
watched namespaces (or all) and their worker pods.

A pool is an InferencePool that is not being deleted; it serves ``spec.model.name`` and
the comma-separated names of its annotation ``preheat.dev/model-aliases``. Its routing
settings are ``spec.routing.hotspotMarginMs`` and, as ``defaultTtftTargetMs``, the lowest
``targetMs`` of its TTFT objectives (the target a request that names no deadline is
admitted against, as ``preheat up`` sets it). Its endpoints are the pods labelled
``app.kubernetes.io/name=preheat-worker`` and ``preheat.dev/pool=<name>`` in its namespace
(the labels the operator puts on them), mapped as ``kubernetes:NS/SELECTOR`` discovery maps
a pod (:func:`preheat.router.endpoints.kubernetes.pod_endpoint`: routable when Ready, not
terminating and ``preheat.dev/role=active``; zone/region from its node).

The loop: per watched namespace (or once, cluster-wide) a list + watch of InferencePools
and one of worker pods, each relisting after its watch ends or fails (backoff on errors);
the first set is yielded once every list has answered, then again whenever it changes.
Pure parts (:func:`pool_spec`, :class:`ObjectSet`, :func:`pool_specs`) work on the API's
JSON dicts and are table-tested; the client is ``kubernetes_asyncio`` (in-cluster config,
else the kubeconfig). RBAC: get/list/watch on ``inferencepools`` and ``pods``, get on
``nodes``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from preheat.core.manifests import (
    GROUP,
    GRPC_PORT,
    LABEL_NAME,
    LABEL_POOL,
    PLURAL,
    VERSION,
    WORKER_NAME,
)
from preheat.router.endpoints.kubernetes import api_client, pod_endpoint, read_node_labels
from preheat.router.pools.spec import PoolSpec

log = logging.getLogger(__name__)

ALIASES_ANNOTATION = "preheat.dev/model-aliases"
WORKER_SELECTOR = f"{LABEL_NAME}={WORKER_NAME}"
POOLS, PODS = "inferencepools", "pods"

Key = tuple[str, str]  # (namespace, name)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _ttft_target_ms(spec: Mapping[str, Any]) -> float | None:
    auto = spec.get("autoscaling")
    objectives = auto.get("objectives") if isinstance(auto, Mapping) else None
    targets = [
        float(o["targetMs"])
        for o in objectives or []
        if isinstance(o, Mapping)
        and o.get("signal") == "ttft"
        and isinstance(o.get("targetMs"), (int, float))
        and not isinstance(o.get("targetMs"), bool)
        and 0 < o["targetMs"] < math.inf
    ]
    return min(targets) if targets else None


def pool_spec(
    obj: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    node_labels: Mapping[str, Mapping[str, str]],
    *,
    grpc_port: int = GRPC_PORT,
) -> PoolSpec | None:
    """The pool an InferencePool object stands for, with ``pods`` (its worker pods) as
    endpoints; None when it is being deleted or names no model."""
    meta = _meta(obj)
    if meta.get("deletionTimestamp"):
        return None
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    model = spec.get("model")
    name = model.get("name") if isinstance(model, Mapping) else None
    if not isinstance(name, str) or not name:
        return None
    annotations = meta.get("annotations")
    raw_aliases = (annotations or {}).get(ALIASES_ANNOTATION, "") if annotations else ""
    aliases = tuple(
        dict.fromkeys(a.strip() for a in str(raw_aliases).split(",") if a.strip() and a != name)
    )
    routing: dict[str, Any] = {}
    r = spec.get("routing")
    margin = r.get("hotspotMarginMs") if isinstance(r, Mapping) else None
    if isinstance(margin, (int, float)) and not isinstance(margin, bool):
        routing["hotspotMarginMs"] = margin
    target = _ttft_target_ms(spec)
    if target is not None:
        routing["defaultTtftTargetMs"] = target
    traffic = spec.get("traffic")
    if isinstance(traffic, Mapping) and any(
        traffic.get(k) for k in ("classes", "tenants", "responseCache")
    ):
        routing["traffic"] = dict(traffic)
    endpoints = []
    for pod in sorted(pods, key=lambda p: str(_meta(p).get("name", ""))):
        node = (pod.get("spec") or {}).get("nodeName", "")
        ep = pod_endpoint(pod, node_labels.get(node), grpc_port=grpc_port)
        if ep is not None:
            endpoints.append(ep)
    return PoolSpec(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        model=name,
        aliases=aliases,
        routing=routing,
        endpoints=tuple(endpoints),
    )


class ObjectSet:
    """The objects of one kind seen so far, by (namespace, name), folded from lists (each of
    one namespace, or of all) and then watch events."""

    def __init__(self) -> None:
        self.objects: dict[Key, Mapping[str, Any]] = {}

    @staticmethod
    def key(obj: Mapping[str, Any]) -> Key | None:
        meta = _meta(obj)
        name = meta.get("name")
        return (str(meta.get("namespace", "")), str(name)) if name else None

    def reset(self, items: Iterable[Mapping[str, Any]], namespace: str | None) -> None:
        """A list's answer: replaces the objects of ``namespace`` (None: of every one)."""
        self.objects = {
            k: v for k, v in self.objects.items() if namespace is not None and k[0] != namespace
        }
        for obj in items:
            if (k := self.key(obj)) is not None:
                self.objects[k] = obj

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> bool:
        """Folds one watch event; True when the set changed."""
        k = self.key(obj)
        if k is None:
            return False
        if event_type == "DELETED":
            return self.objects.pop(k, None) is not None
        if event_type in ("ADDED", "MODIFIED"):
            self.objects[k] = obj
            return True
        return False  # BOOKMARK and unknown types


def is_worker(pod: Mapping[str, Any]) -> bool:
    labels = _meta(pod).get("labels") or {}
    return labels.get(LABEL_NAME) == WORKER_NAME and bool(labels.get(LABEL_POOL))


def pool_specs(
    pools: ObjectSet,
    pods: ObjectSet,
    node_labels: Mapping[str, Mapping[str, str]],
    *,
    grpc_port: int = GRPC_PORT,
) -> tuple[PoolSpec, ...]:
    """Every pool with its worker pods (by namespace and ``preheat.dev/pool``), by key."""
    by_pool: dict[Key, list[Mapping[str, Any]]] = {}
    for (ns, _), pod in pods.objects.items():
        if is_worker(pod):
            by_pool.setdefault((ns, str(_meta(pod)["labels"][LABEL_POOL])), []).append(pod)
    out = []
    for key in sorted(pools.objects):
        spec = pool_spec(pools.objects[key], by_pool.get(key, ()), node_labels, grpc_port=grpc_port)
        if spec is not None:
            out.append(spec)
    return tuple(out)


class KubernetesPools:
    """The InferencePools of ``namespaces`` (empty: every namespace) and their workers.

    ``api_client``: a ``kubernetes_asyncio.client.ApiClient`` (the caller owns it); None:
    one is built from the in-cluster config, else the kubeconfig, and closed on exit.
    """

    def __init__(
        self,
        namespaces: Sequence[str] = (),
        *,
        api_client: Any = None,
        grpc_port: int = GRPC_PORT,
        watch_timeout_s: int = 300,
        min_backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.namespaces = tuple(dict.fromkeys(n for n in namespaces if n))
        self.api_client = api_client
        self.grpc_port = grpc_port
        self.watch_timeout_s = watch_timeout_s
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self.node_labels: dict[str, Mapping[str, str]] = {}
        self.last_error = ""

    def _lists(self, api: Any) -> list[tuple[str, str | None, Callable[..., Any], tuple[Any, ...]]]:
        """(kind, namespace or None, list function, its arguments) for every watch."""
        from kubernetes_asyncio import client

        core: Any = client.CoreV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        if not self.namespaces:
            return [
                (POOLS, None, custom.list_cluster_custom_object, (GROUP, VERSION, PLURAL)),
                (PODS, None, core.list_pod_for_all_namespaces, ()),
            ]
        out: list[tuple[str, str | None, Callable[..., Any], tuple[Any, ...]]] = []
        for ns in self.namespaces:
            out.append(
                (POOLS, ns, custom.list_namespaced_custom_object, (GROUP, VERSION, ns, PLURAL))
            )
            out.append((PODS, ns, core.list_namespaced_pod, (ns,)))
        return out

    async def _follow(
        self,
        kind: str,
        namespace: str | None,
        list_fn: Callable[..., Any],
        args: tuple[Any, ...],
        queue: asyncio.Queue[tuple[Any, ...]],
    ) -> None:
        """List, then watch, for ever; every answer goes to ``queue``."""
        from kubernetes_asyncio import watch

        extra = {"label_selector": WORKER_SELECTOR} if kind == PODS else {}
        backoff = self.min_backoff_s
        while True:
            try:
                resp = await list_fn(*args, _preload_content=False, **extra)
                body = json.loads(await resp.read())
                await queue.put(("reset", kind, namespace, list(body.get("items") or [])))
                version = (body.get("metadata") or {}).get("resourceVersion", "")
                backoff = self.min_backoff_s
                w = watch.Watch()
                async with w:
                    async for event in w.stream(
                        list_fn,
                        *args,
                        resource_version=version,
                        timeout_seconds=self.watch_timeout_s,
                        allow_watch_bookmarks=True,
                        **extra,
                    ):
                        await queue.put(("event", kind, event["type"], event["raw_object"]))
            except asyncio.CancelledError:
                raise
            except Exception as e:  # API errors, 410 Gone, connection loss: relist
                where = namespace or "all namespaces"
                self.last_error = f"kubernetes {kind} in {where}: {e}"
                log.warning("pool watch failed, relisting: %s", self.last_error)
                await asyncio.sleep(backoff)
                backoff = min(self.max_backoff_s, backoff * 2)

    async def _resolve_nodes(self, api: Any, pods: ObjectSet) -> None:
        from kubernetes_asyncio import client

        core: Any = client.CoreV1Api(api)
        names = {
            n
            for p in pods.objects.values()
            if is_worker(p) and (n := (p.get("spec") or {}).get("nodeName"))
        }
        await read_node_labels(core, names, self.node_labels)

    async def changes(self) -> AsyncIterator[tuple[PoolSpec, ...]]:
        own = self.api_client is None
        api = await api_client() if own else self.api_client
        queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        lists = self._lists(api)
        tasks = [
            asyncio.get_running_loop().create_task(self._follow(k, ns, fn, args, queue))
            for k, ns, fn, args in lists
        ]
        sets = {POOLS: ObjectSet(), PODS: ObjectSet()}
        synced: set[tuple[str, str | None]] = set()
        last: tuple[PoolSpec, ...] | None = None
        try:
            while True:
                items = [await queue.get()]
                while not queue.empty():  # a burst of events: one snapshot
                    items.append(queue.get_nowait())
                for item in items:
                    if item[0] == "reset":
                        _, kind, ns, objs = item
                        sets[kind].reset(objs, ns)
                        synced.add((kind, ns))
                    else:
                        _, kind, event_type, obj = item
                        sets[kind].apply(event_type, obj)
                if len(synced) < len(lists):
                    continue
                await self._resolve_nodes(api, sets[PODS])
                current = pool_specs(
                    sets[POOLS], sets[PODS], self.node_labels, grpc_port=self.grpc_port
                )
                if current != last:
                    last = current
                    yield current
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if own:
                await api.close()
