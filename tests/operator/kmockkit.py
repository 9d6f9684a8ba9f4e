"""An emulated Kubernetes API server (kmock 0.8) good enough for the real operator.

kmock's ``KubernetesEmulator`` stores objects, serves list/watch/get/create/merge-patch/delete
and streams watch events. What it lacks, and what :class:`PreheatKube` adds:

- **resourceVersion, uid, generation, creationTimestamp**: stamped on create; patches bump
  ``resourceVersion`` and, when they touch ``spec``, ``generation`` (kopf compares versions;
  the operator's ownerReferences need the pool's uid; status needs ``observedGeneration``).
- **Garbage collection**: after a deletion completes, objects whose ``ownerReferences``
  name a uid that no longer exists are deleted too (cascading), as Kubernetes' GC would.
- **No controllers**: no ReplicaSets or Pods appear by themselves; tests create worker
  pods with :func:`add_pods` and flip their readiness with :func:`set_ready`.
- ``GET /api/v1/namespaces`` fails: the operator runs namespaced with scanning disabled.
- ``labelSelector`` is ignored by kmock (the operator asks for the workers only, and kopf
  filters by labels on its side too).

Requests are recorded in ``PreheatKube.log`` (kmock's own list is kept short: it scans it
for every request); :func:`requests_by_pool`
attributes them to pools for the API-call budget test. ``PreheatKube.writes_in_flight``
counts the writes being served: a stopped client's last request can still be in the
server's buffers and is served after the client is gone (aiohttp does not cancel a handler
when its connection closes), so a test that changes the server's behaviour after stopping
the operator first waits for :func:`settled`.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp.web
import kmock
import pytest
import yaml
from kmock._internal import enums, rendering

from preheat.core.manifests import LABEL_NAME, LABEL_POOL, LABEL_ROLE, WORKER_NAME

POOLS = "preheat.dev/v1alpha1/inferencepools"
DEPLOYMENTS = "apps/v1/deployments"
SERVICES = "v1/services"
PDBS = "policy/v1/poddisruptionbudgets"
PODS = "v1/pods"
SECRETS = "v1/secrets"
EVENTS = "v1/events"
CHILD_RESOURCES = (DEPLOYMENTS, SERVICES, PDBS)
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class PreheatKube(kmock.KubernetesEmulator):
    """kmock's emulator plus versions, uids, generations and garbage collection."""

    on_request: Callable[[rendering.Request], None] | None = None
    # a Kubernetes error (a Status body) to answer instead, as an API server that refuses
    # the request would (RBAC's 403, validation's 422)
    refuse: Callable[[rendering.Request], kmock.KubernetesError | None] | None = None

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.log: list[rendering.Request] = []
        self.writes_in_flight = 0

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        write = raw_request.method in _WRITES
        self.writes_in_flight += write
        try:
            return await super().__call__(raw_request)
        finally:
            self.writes_in_flight -= write

    async def _handle(self, request: rendering.Request) -> Any:
        # kmock matches a request against each reaction by scanning every request it has
        # seen (``request in view``): quadratic. Keep its list short, the full log here.
        self.log.append(request)
        del self._requests[:-1]
        if self.on_request is not None:
            self.on_request(request)
        refusal = self.refuse(request) if self.refuse is not None else None
        if refusal is not None:
            raise refusal
        if request.resource is not None and isinstance(request.data, dict):
            if request.action == enums.action.CREATE:
                self._stamp_create(request)
            elif request.action == enums.action.UPDATE and request.name is not None:
                self._stamp_patch(request)
        elif request.action == enums.action.DELETE and request.name is not None:
            self._stamp_delete(request)
        elif request.action == enums.action.UPDATE and isinstance(request.data, list):
            version = str(self._next())  # a JSON patch (kopf's finalizers): bump too
            request.data.append(
                {"op": "add", "path": "/metadata/resourceVersion", "value": version}
            )
        try:
            return await super()._handle(request)
        finally:
            if request.action == enums.action.DELETE or (
                request.action == enums.action.UPDATE and self._was_deleted(request)
            ):
                await self._collect_garbage()

    def _was_deleted(self, request: rendering.Request) -> bool:
        key = (request.resource, request.namespace, request.name)
        return key in self.objects and self.objects[key].deleted

    def _stamp_create(self, request: rendering.Request) -> None:
        meta = request.data.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):  # kopf's Events
            meta["name"] = f"{meta['generateName']}{self._next()}"
        if request.namespace and not meta.get("namespace"):
            meta["namespace"] = request.namespace
        meta["uid"] = f"uid-{self._next()}"
        meta["resourceVersion"] = str(self._next())
        meta["generation"] = 1
        meta["creationTimestamp"] = datetime.datetime.now(datetime.UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )

    def _stamp_delete(self, request: rendering.Request) -> None:
        """A delete held by finalizers is a modification (deletionTimestamp): new version."""
        key = (request.resource, request.namespace, request.name)
        if key in self.objects and not self.objects[key].deleted:
            self.objects[key].patch({"metadata": {"resourceVersion": str(self._next())}})

    def _stamp_patch(self, request: rendering.Request) -> None:
        key = (request.resource, request.namespace, request.name)
        meta = request.data.setdefault("metadata", {}) or {}
        request.data["metadata"] = meta
        meta["resourceVersion"] = str(self._next())
        if key in self.objects and not self.objects[key].deleted:
            current = self.objects[key].raw
            if "spec" in request.data and request.subresource is None:
                generation = int(current.get("metadata", {}).get("generation") or 1)
                if _changes(current.get("spec") or {}, request.data["spec"]):
                    meta["generation"] = generation + 1

    async def _serve_list(self, request: rendering.Request) -> Any:
        out = await super()._serve_list(request)
        out["metadata"]["resourceVersion"] = str(self._last_version)  # kmock sends "..."
        return out

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[Any]:
        """kmock's watch, but from ``?resourceVersion=`` on and never older than sent.

        kmock replays every existing object as ADDED and may replay buffered events, so kopf
        would see an object older than one it already patched (and its finalizer patch's
        ``test`` of resourceVersion would fail forever).
        """
        since = _version(request.params.get("resourceVersion"))
        seen: dict[tuple[str, str], int] = {}
        async for event in super()._serve_watch(request):
            if not isinstance(event, dict):
                yield event
                continue
            meta = (event.get("object") or {}).get("metadata") or {}
            key = (str(meta.get("namespace")), str(meta.get("name")))
            version = _version(meta.get("resourceVersion"))
            floor = max(since, seen.get(key, 0))
            stale = version < floor if event.get("type") == "DELETED" else version <= floor
            if stale:
                continue
            seen[key] = version
            yield event

    @property
    def _last_version(self) -> int:
        return self._versions

    _versions = 0

    def _next(self) -> int:
        self._versions += 1
        return self._versions

    async def _collect_garbage(self) -> None:
        """Delete (cascading) every object whose owner no longer exists."""
        while True:
            async with self._lock:
                alive = {
                    obj.raw.get("metadata", {}).get("uid")
                    for obj in self.objects.values()
                    if not obj.deleted
                }
                orphans = [
                    (key, obj)
                    for key, obj in self.objects.items()
                    if not obj.deleted
                    and any(
                        ref.get("uid") not in alive
                        for ref in obj.raw.get("metadata", {}).get("ownerReferences") or []
                    )
                ]
                for key, obj in orphans:
                    raw = obj.raw
                    obj.delete()
                    await self._buses[key[0]].put({"type": "DELETED", "object": raw})
            if not orphans:
                return


def _version(text: Any) -> int:
    try:
        return int(str(text))
    except ValueError:
        return 0


def _changes(spec: Mapping[str, Any], patch: Any) -> bool:
    if not isinstance(patch, Mapping):
        return bool(spec != patch)
    return any(
        k not in spec or _changes(spec[k], v) if isinstance(v, Mapping) else spec.get(k) != v
        for k, v in patch.items()
    )


def declare_resources(server: kmock.KubernetesEmulator) -> None:
    """What discovery shows: the pool CRD (status, scale) and the kinds the operator touches."""
    server.resources[POOLS] = kmock.ResourceInfo(
        kind="InferencePool",
        singular="inferencepool",
        namespaced=True,
        shortnames={"ipool"},
        subresources={"status", "scale"},
        verbs={"get", "list", "watch", "create", "patch", "update", "delete"},
    )
    for res, kind in (
        (DEPLOYMENTS, "Deployment"),
        (SERVICES, "Service"),
        (PDBS, "PodDisruptionBudget"),
        (PODS, "Pod"),
        (SECRETS, "Secret"),
        (EVENTS, "Event"),
    ):
        server.resources[res] = kmock.ResourceInfo(
            kind=kind,
            namespaced=True,
            verbs={"get", "list", "watch", "create", "patch", "update", "delete"},
        )
    # kopf waits for these in discovery (its backbone) before it starts any watch; it never
    # lists namespaces here (scanning disabled), and the CRD watch stays empty.
    server.resources["v1/namespaces"] = kmock.ResourceInfo(
        kind="Namespace", namespaced=False, verbs={"get", "list", "watch"}
    )
    server.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
        kind="CustomResourceDefinition", namespaced=False, verbs={"get", "list", "watch"}
    )


def write_kubeconfig(path: Path, url: str, namespace: str) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": url}}],
        "users": [{"name": "kmock", "user": {"token": "kmock"}}],
        "contexts": [
            {
                "name": "kmock",
                "context": {"cluster": "kmock", "user": "kmock", "namespace": namespace},
            }
        ],
        "current-context": "kmock",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


# --- objects -----------------------------------------------------------------------------


def live(server: kmock.KubernetesEmulator, resource: str, namespace: str) -> dict[str, Any]:
    """name -> raw object for every live object of ``resource`` in ``namespace``."""
    out = {}
    for (res, ns, name), obj in server.objects.items():
        if str(res) == str(kmock.resource(resource)) and ns == namespace and not obj.deleted:
            out[name] = obj.raw
    return out


def get(server: kmock.KubernetesEmulator, resource: str, namespace: str, name: str) -> Any:
    return live(server, resource, namespace).get(name)


def children(server: kmock.KubernetesEmulator, namespace: str) -> dict[tuple[str, str], Any]:
    """(resource, name) -> object for every Deployment, Service and PDB."""
    return {
        (res, name): obj
        for res in CHILD_RESOURCES
        for name, obj in live(server, res, namespace).items()
    }


def events(server: kmock.KubernetesEmulator, namespace: str, pool: str = "") -> list[Any]:
    return [
        e
        for e in live(server, EVENTS, namespace).values()
        if not pool or e.get("involvedObject", {}).get("name") == pool
    ]


def condition(pool: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any]:
    for c in ((pool or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return {}


async def create_pool(server: kmock.KubernetesEmulator, pool: Mapping[str, Any]) -> Any:
    ns = pool["metadata"]["namespace"]
    resp = await server.post(
        f"/apis/preheat.dev/v1alpha1/namespaces/{ns}/inferencepools", json=pool
    )
    assert resp.status in (200, 201), await resp.text()
    return await resp.json()


async def patch_pool(
    server: kmock.KubernetesEmulator, namespace: str, name: str, patch: Mapping[str, Any]
) -> Any:
    resp = await server.patch(
        f"/apis/preheat.dev/v1alpha1/namespaces/{namespace}/inferencepools/{name}",
        json=patch,
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def delete_pool(server: kmock.KubernetesEmulator, namespace: str, name: str) -> None:
    resp = await server.delete(
        f"/apis/preheat.dev/v1alpha1/namespaces/{namespace}/inferencepools/{name}"
    )
    assert resp.status == 200, await resp.text()


async def add_pods(
    server: kmock.KubernetesEmulator,
    namespace: str,
    pool: str,
    count: int,
    *,
    ready: bool = True,
    start: int = 0,
) -> list[str]:
    """Worker pods as the Deployment's ReplicaSet would make them (kmock has no controllers)."""
    names = []
    for i in range(start, start + count):
        name = f"{pool}-workers-{i:04d}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {LABEL_NAME: WORKER_NAME, LABEL_POOL: pool, LABEL_ROLE: "standby"},
            },
            "spec": {"containers": [{"name": "worker", "image": "preheat-worker"}]},
            "status": {"conditions": [{"type": "Ready", "status": str(ready)}]},
        }
        resp = await server.post(f"/api/v1/namespaces/{namespace}/pods", json=pod)
        assert resp.status in (200, 201), await resp.text()
        names.append(name)
    return names


async def set_ready(
    server: kmock.KubernetesEmulator,
    namespace: str,
    names: Iterable[str],
    ready: bool = True,
    since: str | None = None,
) -> None:
    """Sets the pods' Ready condition (``since``: its ``lastTransitionTime``, RFC 3339;
    None: without one, as for a pod whose start was not seen)."""
    condition: dict[str, str] = {"type": "Ready", "status": str(ready)}
    if since is not None:
        condition["lastTransitionTime"] = since
    for name in names:
        resp = await server.patch(
            f"/api/v1/namespaces/{namespace}/pods/{name}/status",
            json={"status": {"conditions": [condition]}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert resp.status == 200, await resp.text()


async def settled(kube: PreheatKube, *, within: float = 20.0) -> None:
    """Wait until the server has served every write already sent to it.

    Call it after the client that sent them stopped (its thread joined): on loopback its
    last bytes are then in the server's socket buffers, read within a few turns of the
    loop, and their handlers entered a few turns later; then none may be left running.
    """
    for _ in range(2):
        for _ in range(20):  # turns of the loop: read the buffers, enter the handlers
            await asyncio.sleep(0)
        await eventually(lambda: kube.writes_in_flight == 0, within=within)


async def eventually(
    check: Callable[[], Any], *, within: float = 20.0, interval: float = 0.05
) -> Any:
    """Poll ``check`` until it returns a truthy value (returned) or fail after ``within`` s."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (AssertionError, KeyError) as e:
            last = e
        else:
            if last:
                return last
        await asyncio.sleep(interval)
    raise AssertionError(f"not reached within {within}s; last: {last!r}")


# --- request accounting ------------------------------------------------------------------


def pool_of_request(request: rendering.Request) -> str | None:
    """The pool a request is about (its name, a child's, an Event's object), or None."""
    data = request.data if isinstance(request.data, Mapping) else {}
    res = str(request.resource) if request.resource is not None else ""
    name = request.name or (data.get("metadata") or {}).get("name") or ""
    if "events" in res:
        return str((data.get("involvedObject") or {}).get("name") or "") or None
    if "inferencepools" in res:
        return name or None
    if "pods" in res:
        return name.rsplit("-workers-", 1)[0] if "-workers-" in name else None
    if name.endswith("-workers"):
        return name.removesuffix("-workers")
    if name.endswith("-workers-control"):  # the pool's control-token Secret
        return name.removesuffix("-workers-control")
    return None


def requests_by_pool(requests: Iterable[rendering.Request]) -> dict[str | None, int]:
    out: dict[str | None, int] = {}
    for r in requests:
        key = pool_of_request(r)
        out[key] = out.get(key, 0) + 1
    return out


def operator_requests(requests: Iterable[rendering.Request]) -> list[rendering.Request]:
    """Requests the operator made (the test's own go through kmock's client)."""
    return [r for r in requests if not str(r.headers.get("User-Agent", "")).startswith("kmock/")]


# --- fixtures ----------------------------------------------------------------------------

NAMESPACE = "serving"


@pytest.fixture(name="no_leaked_tasks")
async def no_leaked_tasks_fixture() -> AsyncIterator[None]:
    """Fails a test that leaves asyncio tasks behind (the operator must stop by itself)."""
    before = set(asyncio.all_tasks())
    yield
    for _ in range(50):
        leaked = {t for t in asyncio.all_tasks() - before if not t.done()}
        leaked.discard(asyncio.current_task())  # type: ignore[arg-type]
        if not leaked:
            return
        await asyncio.sleep(0.05)
    names = sorted(t.get_name() + ":" + repr(t.get_coro()) for t in leaked)
    pytest.fail(f"{len(leaked)} asyncio task(s) leaked: {names[:5]}")


@pytest.fixture(name="kube")
async def kube_fixture(
    no_leaked_tasks: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[PreheatKube]:
    """The emulated API server on loopback, and KUBECONFIG pointing at it."""
    async with PreheatKube() as server, kmock.Server(server):
        declare_resources(server)
        config = write_kubeconfig(tmp_path / "kubeconfig", str(server.url), NAMESPACE)
        monkeypatch.setenv("KUBECONFIG", str(config))
        yield server


class OperatorProcess:
    """The real operator (``preheat.operator.main.serve``) in a thread with its own loop.

    As kopf's ``KopfRunner`` does: kopf cancels every task of its loop that it did not
    start when it stops, so it cannot share the test's loop (pytest's fixture tasks).
    kmock serves in the test's loop; the test awaits, never blocks. Tasks left in the
    operator's loop after it stopped are recorded in ``leaked`` (the fixture fails on them).
    """

    def __init__(
        self,
        namespace: str = NAMESPACE,
        build: Any = None,
        autoscaler: Any = None,
        tracing: Any = None,
    ):
        from preheat.core.manifests import BuildOptions
        from preheat.operator.options import AutoscalerOptions, OperatorOptions

        self.options = OperatorOptions(
            build=build or BuildOptions(),
            namespaces=(namespace,),
            service_monitor="false",
            standalone=True,
            health_port=0,
            kubeconfig=os.environ["KUBECONFIG"],
            autoscaler=autoscaler or AutoscalerOptions(),
        )
        self.tracing = tracing  # preheat.process.tracing.Tracing: its spans (None: off)
        self.stop_flag = threading.Event()
        self.ready = threading.Event()
        self.thread: threading.Thread | None = None
        self.leaked: list[str] = []
        self.error: BaseException | None = None

    def _target(self) -> None:
        from preheat.operator.main import serve

        async def main() -> None:
            ready = asyncio.Event()

            async def relay() -> None:
                await ready.wait()
                self.ready.set()

            relay_task = asyncio.create_task(relay())
            try:
                await serve(
                    self.options,
                    stop_flag=self.stop_flag,
                    ready_flag=ready,
                    tracing=self.tracing,
                )
            finally:
                relay_task.cancel()
                await asyncio.gather(relay_task, return_exceptions=True)
            await asyncio.sleep(0.1)  # let closed connections finish
            me = asyncio.current_task()
            self.leaked = [repr(t.get_coro()) for t in asyncio.all_tasks() if t is not me]

        try:
            asyncio.run(main())
        except BaseException as e:
            self.error = e
            self.ready.set()

    async def start(self) -> OperatorProcess:
        self.stop_flag = threading.Event()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._target, name="operator", daemon=True)
        self.thread.start()
        assert await asyncio.to_thread(self.ready.wait, 20), "the operator did not get ready"
        assert self.error is None, self.error
        return self

    async def stop(self) -> None:
        if self.thread is None:
            return
        self.stop_flag.set()
        await asyncio.to_thread(self.thread.join, 30)
        assert not self.thread.is_alive(), "the operator did not stop within 30 s"
        self.thread = None
        assert self.error is None, self.error
        assert not self.leaked, f"the operator leaked tasks: {self.leaked[:5]}"


@pytest.fixture(name="operator")
async def operator_fixture(kube: PreheatKube) -> AsyncIterator[OperatorProcess]:
    op = OperatorProcess()
    await op.start()
    try:
        yield op
    finally:
        await op.stop()
