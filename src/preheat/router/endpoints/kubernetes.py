"""Discovery from Kubernetes: the pool's pods, watched by label selector in one namespace.

Every pod matching the selector that has an IP is reported; it is *routable* (for the
store, together with its own ``Status``) only when its ``Ready`` condition is ``True``, it
is not being deleted and its ``preheat.dev/role`` label is ``active``. ``address`` is
``podIP:<grpc port>`` (the container port named ``grpc``, else ``grpc_port``), ``id`` the pod
name, ``metrics_url`` ``http://podIP:<http port>/metrics`` (the container port named
``http`` or ``metrics``, else ``metrics_port``; none when neither), and zone/region the
``topology.kubernetes.io/zone`` and ``/region`` labels of the pod's node (looked up once per
node and cached).

The loop: list (resync), yield the set, then watch from the list's resourceVersion and yield
after every event that changes the set; when the watch ends (server timeout) or fails
(including 410 Gone), list again, after a backoff on errors. Pure parts (:func:`pod_endpoint`,
:class:`PodSet`) work on the API's JSON dicts and are unit-tested; the client is
``kubernetes_asyncio`` (imported when :meth:`KubernetesDiscovery.changes` starts).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from preheat.process import kubeconfig
from preheat.router.endpoints.discovery import DiscoveredEndpoint

log = logging.getLogger(__name__)

ROLE_LABEL = "preheat.dev/role"
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
GRPC_PORT_NAME = "grpc"
METRICS_PORT_NAMES = ("http", "metrics")


def _named_port(pod: Mapping[str, Any], names: tuple[str, ...]) -> int | None:
    for c in pod.get("spec", {}).get("containers", []) or []:
        for p in c.get("ports", []) or []:
            if p.get("name") in names and p.get("containerPort"):
                return int(p["containerPort"])
    return None


def pod_is_ready(pod: Mapping[str, Any]) -> bool:
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    status = pod.get("status", {}) or {}
    if status.get("phase") not in (None, "Running"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions", []) or []
    )


def pod_endpoint(
    pod: Mapping[str, Any],
    node_labels: Mapping[str, str] | None,
    *,
    grpc_port: int,
    metrics_port: int | None = None,
) -> DiscoveredEndpoint | None:
    """The endpoint a pod stands for (None: it has no IP yet)."""
    meta = pod.get("metadata", {}) or {}
    ip = (pod.get("status", {}) or {}).get("podIP")
    if not ip:
        return None
    port = _named_port(pod, (GRPC_PORT_NAME,)) or grpc_port
    mport = _named_port(pod, METRICS_PORT_NAMES) or metrics_port
    host = f"[{ip}]" if ":" in ip else ip
    labels = meta.get("labels", {}) or {}
    nodes = node_labels or {}
    return DiscoveredEndpoint(
        address=f"{host}:{port}",
        id=str(meta.get("name", "")),
        zone=nodes.get(ZONE_LABEL, ""),
        region=nodes.get(REGION_LABEL, ""),
        ready=pod_is_ready(pod),
        role=str(labels.get(ROLE_LABEL, "")),
        metrics_url=f"http://{host}:{mport}/metrics" if mport else "",
    )


class PodSet:
    """The pods seen so far, folded from a list and then watch events (by pod name)."""

    def __init__(self) -> None:
        self.pods: dict[str, Mapping[str, Any]] = {}

    def reset(self, pods: list[Mapping[str, Any]]) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}

    def apply(self, event_type: str, pod: Mapping[str, Any]) -> bool:
        """Folds one watch event; True when the set of pods (or any pod) changed."""
        name = pod.get("metadata", {}).get("name")
        if not name:
            return False
        if event_type == "DELETED":
            return self.pods.pop(name, None) is not None
        if event_type in ("ADDED", "MODIFIED"):
            self.pods[name] = pod
            return True
        return False  # BOOKMARK and unknown types

    def node_names(self) -> set[str]:
        return {n for p in self.pods.values() if (n := p.get("spec", {}).get("nodeName"))}

    def endpoints(
        self,
        node_labels: Mapping[str, Mapping[str, str]],
        *,
        grpc_port: int,
        metrics_port: int | None = None,
    ) -> tuple[DiscoveredEndpoint, ...]:
        out = []
        for name in sorted(self.pods):
            pod = self.pods[name]
            node = pod.get("spec", {}).get("nodeName", "")
            ep = pod_endpoint(
                pod, node_labels.get(node), grpc_port=grpc_port, metrics_port=metrics_port
            )
            if ep is not None:
                out.append(ep)
        return tuple(out)


async def api_client() -> Any:
    """A ``kubernetes_asyncio`` ApiClient: the in-cluster config, else the kubeconfig
    (``KUBECONFIG`` as it is now: the client reads it once). The caller closes it."""
    from kubernetes_asyncio import client

    await kubeconfig.load()  # KubeConfigError: one line saying what was tried
    return client.ApiClient()


async def read_node_labels(
    core_v1: Any, names: Iterable[str], known: dict[str, Mapping[str, str]]
) -> None:
    """Adds to ``known`` the labels of every node in ``names`` it lacks (a node that cannot
    be read is logged and left out: no topology for it now, tried again next time)."""
    for node in set(names) - set(known):
        try:
            resp = await core_v1.read_node(node, _preload_content=False)
            body = json.loads(await resp.read())
        except Exception as e:  # a node we cannot read: no topology, retried later
            log.warning("cannot read node %s: %s", node, e)
            continue
        known[node] = dict((body.get("metadata") or {}).get("labels") or {})


class KubernetesDiscovery:
    """Pods of a pool by ``label_selector`` in ``namespace``.

    ``api_client``: a ``kubernetes_asyncio.client.ApiClient`` (the caller owns it); None:
    one is built from the in-cluster config, else the kubeconfig, and closed on exit.
    """

    def __init__(
        self,
        namespace: str,
        label_selector: str,
        *,
        grpc_port: int = 50051,
        metrics_port: int | None = None,
        api_client: Any = None,
        watch_timeout_s: int = 300,
        min_backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.namespace = namespace
        self.label_selector = label_selector
        self.grpc_port = grpc_port
        self.metrics_port = metrics_port
        self.api_client = api_client
        self.watch_timeout_s = watch_timeout_s
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self.node_labels: dict[str, Mapping[str, str]] = {}
        self.last_error = ""

    async def _resolve_nodes(self, v1: Any, pods: PodSet) -> None:
        await read_node_labels(v1, pods.node_names(), self.node_labels)

    def _endpoints(self, pods: PodSet) -> tuple[DiscoveredEndpoint, ...]:
        return pods.endpoints(
            self.node_labels, grpc_port=self.grpc_port, metrics_port=self.metrics_port
        )

    async def changes(self) -> AsyncIterator[tuple[DiscoveredEndpoint, ...]]:
        from kubernetes_asyncio import client, watch

        own = self.api_client is None
        api = await api_client() if own else self.api_client
        try:
            v1: Any = client.CoreV1Api(api)
            pods = PodSet()
            last: tuple[DiscoveredEndpoint, ...] | None = None
            backoff = self.min_backoff_s
            while True:
                try:
                    resp = await v1.list_namespaced_pod(
                        self.namespace, label_selector=self.label_selector, _preload_content=False
                    )
                    body = json.loads(await resp.read())
                    pods.reset(list(body.get("items", []) or []))
                    version = body.get("metadata", {}).get("resourceVersion", "")
                    await self._resolve_nodes(v1, pods)
                    current = self._endpoints(pods)
                    self.last_error = ""
                    backoff = self.min_backoff_s
                    if current != last:
                        last = current
                        yield current
                    w = watch.Watch()
                    async with w:
                        async for event in w.stream(
                            v1.list_namespaced_pod,
                            self.namespace,
                            label_selector=self.label_selector,
                            resource_version=version,
                            timeout_seconds=self.watch_timeout_s,
                            allow_watch_bookmarks=True,
                        ):
                            if not pods.apply(event["type"], event["raw_object"]):
                                continue
                            await self._resolve_nodes(v1, pods)
                            current = self._endpoints(pods)
                            if current != last:
                                last = current
                                yield current
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # API errors, 410 Gone, connection loss: relist
                    self.last_error = f"kubernetes {self.namespace}/{self.label_selector}: {e}"
                    log.warning("pod watch failed, relisting: %s", self.last_error)
                    await asyncio.sleep(backoff)
                    backoff = min(self.max_backoff_s, backoff * 2)
        finally:
            if own:
                await api.close()
