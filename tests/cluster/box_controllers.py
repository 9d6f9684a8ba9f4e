"""The control plane's controllers for the cluster in a box: what kube-controller-manager,
kube-scheduler and kube-proxy would do for the objects an installation makes.

- :class:`DeploymentController`: a Deployment's pods (no ReplicaSet objects: the pods are
  owned by the Deployment and carry ``pod-template-hash``). ``replicas``; a changed pod
  template rolls (``RollingUpdate`` with ``maxSurge``/``maxUnavailable``, or ``Recreate``:
  old pods gone before new ones start); scale-down picks victims as the ReplicaSet
  controller ranks them (unscheduled, then pending, then not ready, then the lowest
  ``controller.kubernetes.io/pod-deletion-cost``, then more restarts, then the newest);
  ``status`` (replicas, updated, ready, available, observedGeneration).
- the scheduler: a pod with no ``nodeName`` is bound to the one node when its
  ``nodeSelector`` matches the node's labels, else stays Pending with a FailedScheduling
  Event.
- :class:`ServiceProxy`: a ClusterIP Service's ports listen on its cluster IP (a loopback
  address) and each connection goes to one Ready pod the selector picks (TCP, as
  kube-proxy's iptables mode: per connection, random).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import random
from collections.abc import Callable, Mapping
from typing import Any

from box_apiserver import BoxKube, label_match, now_rfc3339, rkey, selector_string

log = logging.getLogger("box.controllers")

NODE = "box"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
HASH_LABEL = "pod-template-hash"


def objects_of(server: BoxKube, resource: str) -> list[dict[str, Any]]:
    """Every live object of ``resource`` ("v1/pods", "apps/v1/deployments"...)."""
    return [
        obj.raw
        for (res, _, _), obj in list(server.objects.items())
        if rkey(res) == resource and not obj.deleted
    ]


def meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return dict(obj.get("metadata") or {})


def is_ready(pod: Mapping[str, Any]) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return str(c.get("status")) == "True"
    return False


def terminating(obj: Mapping[str, Any]) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid for r in meta(obj).get("ownerReferences") or [])


def template_hash(template: Mapping[str, Any]) -> str:
    text = json.dumps(template, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _intstr(value: Any, total: int, *, round_up: bool, default: str) -> int:
    value = default if value is None else value
    if isinstance(value, str) and value.endswith("%"):
        exact = total * float(value[:-1]) / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value)


def victim_rank(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    """Sort key: the first pod is deleted first (the ReplicaSet controller's ranking)."""
    status = pod.get("status") or {}
    phase = {"Pending": 0, "Unknown": 1, "Running": 2}.get(str(status.get("phase")), 0)
    try:
        cost = int((meta(pod).get("annotations") or {}).get(DELETION_COST, "0"))
    except ValueError:
        cost = 0
    restarts = sum(int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or [])
    created = int(str(meta(pod).get("uid", "uid-0")).removeprefix("uid-") or 0)
    return (
        bool((pod.get("spec") or {}).get("nodeName")),
        phase,
        is_ready(pod),
        cost,
        -restarts,
        -created,
    )


class DeploymentController:
    """Deployments -> Pods, and the scheduler's binding of new pods to the node."""

    def __init__(self, server: BoxKube, node_labels: Mapping[str, str]):
        self.server = server
        self.node_labels = dict(node_labels)
        self.warned: set[str] = set()

    async def reconcile(self) -> None:
        pods = objects_of(self.server, "v1/pods")
        for deployment in objects_of(self.server, "apps/v1/deployments"):
            mine = [p for p in pods if owned_by(p, meta(deployment)["uid"])]
            await self._deployment(deployment, mine)
        await self._schedule(pods)

    async def _deployment(self, d: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        m, spec = meta(d), d.get("spec") or {}
        ns, name = m["namespace"], m["name"]
        template = spec.get("template") or {}
        want = int(spec.get("replicas", 1))
        current = template_hash(template)
        active = [p for p in pods if not terminating(p)]
        new = [p for p in active if (meta(p).get("labels") or {}).get(HASH_LABEL) == current]
        old = [p for p in active if p not in new]
        strategy = spec.get("strategy") or {}
        if strategy.get("type") == "Recreate":
            if old:
                await self._delete(old)
            elif not any(terminating(p) for p in pods):
                await self._scale(d, new, want, current)
        elif not old:
            await self._scale(d, new, want, current)
        else:
            rolling = strategy.get("rollingUpdate") or {}
            surge = _intstr(rolling.get("maxSurge"), want, round_up=True, default="25%")
            unavailable = _intstr(
                rolling.get("maxUnavailable"), want, round_up=False, default="25%"
            )
            if surge == 0 and unavailable == 0:
                unavailable = 1
            room = min(want - len(new), want + surge - len(active))
            if room > 0:
                await self._create(d, room, current)
            unready_old = [p for p in old if not is_ready(p)]
            ready = sum(1 for p in active if is_ready(p))
            can_remove = max(0, ready - (want - unavailable))
            ready_old = sorted((p for p in old if is_ready(p)), key=victim_rank)
            doomed = unready_old + ready_old[:can_remove]
            if len(new) >= want:  # the new ones are all there: old beyond room go too
                doomed = unready_old + ready_old[:can_remove]
            if doomed:
                await self._delete(doomed)
        await self._status(d, pods, current)
        del ns, name

    async def _scale(
        self, d: dict[str, Any], new: list[dict[str, Any]], want: int, current: str
    ) -> None:
        if len(new) < want:
            await self._create(d, want - len(new), current)
        elif len(new) > want:
            await self._delete(sorted(new, key=victim_rank)[: len(new) - want])

    async def _create(self, d: dict[str, Any], count: int, current: str) -> None:
        m = meta(d)
        template = d["spec"].get("template") or {}
        tmeta = template.get("metadata") or {}
        for _ in range(count):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "generateName": f"{m['name']}-{current}-",
                    "namespace": m["namespace"],
                    "labels": {**(tmeta.get("labels") or {}), HASH_LABEL: current},
                    "annotations": dict(tmeta.get("annotations") or {}),
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "Deployment",
                            "name": m["name"],
                            "uid": m["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": json.loads(json.dumps(template.get("spec") or {})),
            }
            resp = await self.server.post(f"/api/v1/namespaces/{m['namespace']}/pods", json=pod)
            if resp.status not in (200, 201):
                log.warning("pod create failed: %s", await resp.text())

    async def _delete(self, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            pm = meta(pod)
            await self.server.delete(f"/api/v1/namespaces/{pm['namespace']}/pods/{pm['name']}")

    async def _status(self, d: dict[str, Any], pods: list[dict[str, Any]], current: str) -> None:
        m = meta(d)
        active = [p for p in pods if not terminating(p)]
        ready = sum(1 for p in active if is_ready(p))
        updated = sum(1 for p in active if (meta(p).get("labels") or {}).get(HASH_LABEL) == current)
        want = int((d.get("spec") or {}).get("replicas", 1))
        status = {
            "observedGeneration": int(m.get("generation") or 1),
            "replicas": len(active),
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": max(0, want - ready),
        }
        old = {k: (d.get("status") or {}).get(k) for k in status}
        if old == status:
            return
        await self.server.patch(
            f"/apis/apps/v1/namespaces/{m['namespace']}/deployments/{m['name']}/status",
            json={"status": status},
            headers={"Content-Type": "application/merge-patch+json"},
        )

    async def _schedule(self, pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            spec, pm = pod.get("spec") or {}, meta(pod)
            if spec.get("nodeName") or terminating(pod):
                continue
            selector = spec.get("nodeSelector") or {}
            if any(self.node_labels.get(k) != v for k, v in selector.items()):
                if pm["uid"] not in self.warned:
                    self.warned.add(pm["uid"])
                    message = (
                        "0/1 nodes are available: 1 node(s) didn't match Pod's node "
                        f"affinity/selector ({selector})"
                    )
                    await post_event(
                        self.server,
                        pod,
                        "FailedScheduling",
                        message,
                        kind="Warning",
                        component="default-scheduler",
                    )
                    condition = {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                    }
                    await self.server.patch(
                        f"/api/v1/namespaces/{pm['namespace']}/pods/{pm['name']}/status",
                        json={"status": {"phase": "Pending", "conditions": [condition]}},
                        headers={"Content-Type": "application/merge-patch+json"},
                    )
                continue
            await self.server.patch(
                f"/api/v1/namespaces/{pm['namespace']}/pods/{pm['name']}",
                json={"spec": {"nodeName": NODE}},
                headers={"Content-Type": "application/merge-patch+json"},
            )


async def post_event(
    server: BoxKube,
    obj: Mapping[str, Any],
    reason: str,
    message: str,
    *,
    kind: str = "Normal",
    component: str = "kubelet",
) -> None:
    m = meta(obj)
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{m['name']}.", "namespace": m["namespace"]},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": m["name"],
            "namespace": m["namespace"],
            "uid": m.get("uid"),
        },
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": component, "host": NODE},
        "firstTimestamp": now_rfc3339(),
        "lastTimestamp": now_rfc3339(),
        "count": 1,
    }
    await server.post(f"/api/v1/namespaces/{m['namespace']}/events", json=event)


def port_of(pod: Mapping[str, Any], target: Any) -> int | None:
    """A Service's ``targetPort`` (a number or a container port's name) on ``pod``."""
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == target:
                return int(p["containerPort"])
    return None


class ServiceProxy:
    """kube-proxy: each ClusterIP Service port listens on its cluster IP, one pod per
    connection among the Ready ones its selector picks."""

    def __init__(self, server: BoxKube, rng: random.Random):
        self.server = server
        self.rng = rng
        self.listeners: dict[tuple[str, int], asyncio.Server] = {}
        self.routes: dict[tuple[str, int], Callable[[], tuple[str, int] | None]] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    async def reconcile(self) -> None:
        wanted: set[tuple[str, int]] = set()
        for svc in objects_of(self.server, "v1/services"):
            spec = svc.get("spec") or {}
            ip = spec.get("clusterIP")
            if not ip or ip == "None" or not spec.get("selector"):
                continue
            for port in spec.get("ports") or []:
                key = (str(ip), int(port["port"]))
                wanted.add(key)
                self.routes[key] = self._picker(
                    meta(svc)["namespace"], spec["selector"], port.get("targetPort", port["port"])
                )
                if key not in self.listeners:
                    self.listeners[key] = await asyncio.start_server(
                        self._forwarder(key), host=key[0], port=key[1]
                    )
        for key in set(self.listeners) - wanted:
            self.listeners.pop(key).close()
            self.routes.pop(key, None)

    def _picker(
        self, namespace: str, selector: Mapping[str, str], target: Any
    ) -> Callable[[], tuple[str, int] | None]:
        text = selector_string(selector)

        def pick() -> tuple[str, int] | None:
            choices = []
            for pod in objects_of(self.server, "v1/pods"):
                pm = meta(pod)
                ip = (pod.get("status") or {}).get("podIP")
                if (
                    pm.get("namespace") == namespace
                    and ip
                    and is_ready(pod)
                    and not terminating(pod)
                    and label_match(text, pm.get("labels") or {})
                ):
                    port = port_of(pod, target)
                    if port is not None:
                        choices.append((str(ip), port))
            return self.rng.choice(choices) if choices else None

        return pick

    def _forwarder(
        self, key: tuple[str, int]
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
        async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self.tasks.add(task)
            try:
                target = self.routes[key]() if key in self.routes else None
                if target is None:
                    return  # no endpoint: the connection is refused (closed)
                try:
                    up_r, up_w = await asyncio.open_connection(*target)
                except OSError:
                    return
                await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))
            except asyncio.CancelledError:  # close(): asyncio's server callback would log it
                return
            finally:
                writer.close()
                self.tasks.discard(task)

        return forward

    async def close(self) -> None:
        for listener in self.listeners.values():
            listener.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.listeners.clear()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            dst.write_eof()
