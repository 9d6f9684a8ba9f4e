"""The cluster in a box, assembled: the API server (TLS on a loopback address, the
in-cluster way; plain HTTP on 127.0.0.1 for the tests), the Deployment controller and
scheduler, kube-proxy and the kubelet, all in one thread with its own event loop. Tests
drive it with blocking calls (:meth:`Cluster.call` runs a coroutine there)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import aiohttp.web
import kmock
import yaml
from box_apiserver import BUILTIN, BoxKube, rkey
from box_controllers import NODE, DeploymentController, ServiceProxy, objects_of
from box_images import ROOT
from box_kubelet import Kubelet, build_podnet

log = logging.getLogger("box")
T = TypeVar("T")
HELM = ROOT / ".cache" / "tools" / "helm"
TICK_S = 0.2


def addresses(rng: random.Random) -> tuple[str, Iterator[str]]:
    """A random 127.A.B.0/24 block of this run: .1 for the API server, then one a pod or
    Service (a second run at the same time takes another block)."""
    a, b = rng.randrange(16, 250), rng.randrange(1, 250)

    def more() -> Iterator[str]:
        for last in range(2, 255):
            yield f"127.{a}.{b}.{last}"
        raise RuntimeError("more than 253 addresses in one cluster")

    return f"127.{a}.{b}.1", more()


def make_certs(into: Path, api_ip: str) -> tuple[Path, Path, Path]:
    """A cluster CA and the API server's certificate for ``api_ip`` (openssl, P-256)."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=into)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
        "-subj", "/CN=box-ca")  # fmt: skip
    run("req", *ec, "-keyout", "api.key", "-out", "api.csr", "-subj", "/CN=kube-apiserver")
    (into / "san.ext").write_text(
        f"subjectAltName=IP:{api_ip},DNS:kubernetes.default.svc,DNS:kubernetes\n"
    )
    run("x509", "-req", "-in", "api.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "api.crt", "-days", "1", "-extfile", "san.ext")  # fmt: skip
    return into / "ca.crt", into / "api.crt", into / "api.key"


def kind_paths(server: BoxKube) -> dict[tuple[str, str], tuple[str, bool]]:
    """(apiVersion, kind) -> (collection path without namespace, namespaced)."""
    out = {}
    for key, info in server.resources.items():
        group_version, plural = rkey(key).rsplit("/", 1)
        base = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        out[(group_version, str(info.kind))] = (f"{base}|{plural}", bool(info.namespaced))
    return out


class Cluster:
    """Start with :meth:`start`, always :meth:`stop` (every process it started ends)."""

    def __init__(self, *, backoff_s: float = 1.0, seed: int | None = None):
        self.rng = random.Random(seed)
        self.api_ip, self._addresses = addresses(self.rng)
        self.backoff_s = backoff_s
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run_loop, name="box", daemon=True)
        self.root = Path(tempfile.mkdtemp(prefix="preheat-box-", dir="/var/tmp"))
        self.server: BoxKube
        self.kubelet: Kubelet
        self.url = ""
        self.api_port = 0
        self._stack: contextlib.AsyncExitStack | None = None
        self._ticker: asyncio.Task[None] | None = None
        self.errors: list[str] = []

    # -- lifecycle --

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Awaitable[T], timeout: float = 60.0) -> T:
        future = asyncio.run_coroutine_threadsafe(_wrap(coro), self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def start(self) -> Cluster:
        """Everything up; on a failure, whatever started is stopped before it raises."""
        self.thread.start()
        try:
            podnet = build_podnet(self.root)
            ca, cert, key = make_certs(self.root, self.api_ip)
            self.ca_cert = ca
            self.call(self._start(podnet, ca, cert, key))
        except BaseException:
            self.stop()
            raise
        return self

    async def _start(self, podnet: Path, ca: Path, cert: Path, key: Path) -> None:
        stack = contextlib.AsyncExitStack()
        self._stack = stack
        self.server = await stack.enter_async_context(BoxKube())
        http = await stack.enter_async_context(kmock.Server(self.server))
        self.url = str(http.url)
        self.server.declare_builtin()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        lowlevel = aiohttp.web.Server(self.server)
        tls = await asyncio.get_running_loop().create_server(
            lowlevel, host=self.api_ip, port=0, ssl=context
        )
        stack.push_async_callback(lowlevel.shutdown, 1.0)
        stack.callback(tls.close)
        self.api_port = int(tls.sockets[0].getsockname()[1])
        self.kubelet = Kubelet(
            self.server,
            root=self.root,
            podnet=podnet,
            ca_cert=ca,
            api_host=self.api_ip,
            api_port=self.api_port,
            host_ip=self.api_ip,
            addresses=self._addresses,
            backoff_s=self.backoff_s,
        )
        stack.push_async_callback(self.kubelet.close)
        self.deployments = DeploymentController(
            self.server, {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux"}
        )
        self.proxy = ServiceProxy(self.server, self.rng)
        stack.push_async_callback(self.proxy.close)
        for name in ("default", "kube-system"):
            self.add_namespace(name)
        await self._create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": NODE, "labels": dict(self.deployments.node_labels)},
                "status": {"addresses": [{"type": "InternalIP", "address": self.api_ip}]},
            }
        )
        self._ticker = asyncio.create_task(self._tick(), name="box-controllers")

    async def _tick(self) -> None:
        while True:
            for step in (self._services, self.deployments.reconcile, self.kubelet.reconcile,
                         self.proxy.reconcile):  # fmt: skip
                try:
                    await step()
                except Exception as e:  # a controller's bug must show, not stop the cluster
                    log.exception("controller step failed")
                    self.errors.append(f"{getattr(step, '__qualname__', step)}: {e!r}")
            await asyncio.sleep(TICK_S)

    async def _services(self) -> None:
        """The API server's ClusterIP allocation for new Services."""
        for svc in objects_of(self.server, "v1/services"):
            spec = svc.get("spec") or {}
            if spec.get("clusterIP") or spec.get("type") == "ExternalName":
                continue
            m = svc["metadata"]
            await self.server.patch(
                f"/api/v1/namespaces/{m['namespace']}/services/{m['name']}",
                json={"spec": {"clusterIP": next(self._addresses)}},
                headers={"Content-Type": "application/merge-patch+json"},
            )

    def stop(self) -> None:
        """Every pod's processes stopped, the servers closed, the thread joined."""
        if self.thread.is_alive():
            with contextlib.suppress(Exception):
                self.call(self._stop(), timeout=60)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
        if not self.thread.is_alive() and not self.loop.is_closed():
            self.loop.close()
        shutil.rmtree(self.root, ignore_errors=True)

    async def _stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
        if self._stack is not None:
            await self._stack.aclose()
        me = asyncio.current_task()
        rest = [t for t in asyncio.all_tasks() if t is not me]  # watches of closed clients
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    # -- objects --

    def add_namespace(self, name: str) -> None:
        """Namespaces go straight into the store: kmock's router cannot parse
        ``/api/v1/namespaces`` as a collection (the README lists it)."""
        key = (kmock.resource("v1/namespaces"), None, name)
        if key not in self.server.objects:
            self.server.objects[key] = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "uid": f"ns-{name}"},
                "status": {"phase": "Active"},
            }

    async def _create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        path = self.path_of(obj)
        resp = await self.server.post(path, json=dict(obj))
        body = await resp.json()
        if resp.status not in (200, 201):
            raise AssertionError(f"create {obj.get('kind')}: {resp.status} {body}")
        return dict(body)

    def path_of(self, obj: Mapping[str, Any], *, name: bool = False) -> str:
        """The collection (or with ``name``, the object) path of ``obj``'s kind."""
        paths = kind_paths(self.server)
        key = (str(obj["apiVersion"]), str(obj["kind"]))
        if key not in paths:
            raise KeyError(f"the API server does not serve {key}")
        collection, namespaced = paths[key]
        base, plural = collection.split("|")
        meta = obj.get("metadata") or {}
        path = (
            f"{base}/namespaces/{meta.get('namespace') or 'default'}/{plural}"
            if namespaced
            else f"{base}/{plural}"
        )
        return f"{path}/{meta['name']}" if name else path

    def apply(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Create each object (``kubectl apply`` of new objects), in order."""
        return [self.call(self._create(d)) for d in docs]

    def patch(self, obj: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            resp = await self.server.patch(
                self.path_of(obj, name=True),
                json=dict(patch),
                headers={"Content-Type": "application/merge-patch+json"},
            )
            body = await resp.json()
            assert resp.status == 200, body
            return dict(body)

        return self.call(go())

    def delete(self, obj: Mapping[str, Any]) -> None:
        async def go() -> None:
            resp = await self.server.delete(self.path_of(obj, name=True))
            assert resp.status == 200, await resp.text()

        self.call(go())

    def objects(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        async def go() -> list[dict[str, Any]]:
            return [
                o
                for o in objects_of(self.server, resource)
                if namespace is None or (o.get("metadata") or {}).get("namespace") == namespace
            ]

        return self.call(go())

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        for o in self.objects(resource, namespace):
            if o["metadata"]["name"] == name:
                return o
        return None

    def processes(self) -> dict[str, dict[str, int | None]]:
        async def go() -> dict[str, dict[str, int | None]]:
            return self.kubelet.processes()

        return self.call(go())

    def wait(self, check: Callable[[], Any], *, within: float, what: str) -> Any:
        """Poll ``check`` until truthy (returned); fail after ``within`` s with ``what``."""
        deadline = time.monotonic() + within
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = check()
            except (AssertionError, KeyError, LookupError) as e:
                last = e
            else:
                if last:
                    return last
            time.sleep(0.2)
        raise AssertionError(f"{what}: not within {within:g} s; last: {last!r}\n{self.logs()}")

    def summary(self) -> str:
        """Deployments (spec/status replicas) and pods (role, deletion cost, Ready, phase)."""
        lines = ["--- deployments"]
        for d in self.objects("apps/v1/deployments"):
            st = d.get("status") or {}
            lines.append(
                f"{d['metadata']['name']}: replicas {d['spec'].get('replicas')} "
                f"status {st.get('replicas')}/{st.get('readyReplicas')} ready"
            )
        lines.append("--- pods")
        for p in self.objects("v1/pods"):
            m = p["metadata"]
            labels, notes = m.get("labels") or {}, m.get("annotations") or {}
            conditions = {
                c["type"]: c["status"] for c in (p.get("status") or {}).get("conditions") or []
            }
            lines.append(
                f"{m['name']}: role={labels.get('preheat.dev/role')} "
                f"cost={notes.get('controller.kubernetes.io/pod-deletion-cost')} "
                f"ready={conditions.get('Ready')} terminating={bool(m.get('deletionTimestamp'))}"
            )
        return "\n".join(lines)

    def logs(self, tail: int = 30) -> str:
        """The last lines of every container's log (for failure messages)."""
        out = [self.summary()]
        for path in sorted((self.root / "pods").glob("*/*.log")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"--- {path.parent.name}/{path.name}\n" + "\n".join(lines))
        if self.errors:
            out.append("--- controller errors\n" + "\n".join(self.errors[-10:]))
        return "\n".join(out)


async def _wrap(coro: Awaitable[T]) -> T:
    return await coro


def helm_template(release: str, namespace: str, *values: str) -> list[dict[str, Any]]:
    """``helm template`` of the chart (CRDs included), as ``helm install`` would render it."""
    out = subprocess.run(
        [str(HELM), "template", release, str(ROOT / "charts" / "preheat"),
         "--namespace", namespace, "--include-crds", *values],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


def _hook(doc: Mapping[str, Any]) -> str:
    return str(((doc.get("metadata") or {}).get("annotations") or {}).get("helm.sh/hook", ""))


def hooks(docs: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    """The chart's hooks for ``event`` (``post-delete``...), in Helm's order: by
    ``helm.sh/hook-weight``, then kind as at install."""

    def weight(d: dict[str, Any]) -> int:
        return int(d["metadata"]["annotations"].get("helm.sh/hook-weight", "0"))

    mine = [d for d in docs if event in _hook(d).split(",")]
    return sorted(install_order(mine, with_hooks=True), key=weight)


def install_order(docs: list[dict[str, Any]], *, with_hooks: bool = False) -> list[dict[str, Any]]:
    """Helm's install order, in short: CRDs, namespaces, accounts, RBAC, config, the rest.
    Hooks are not installed (the chart has only delete hooks), unless ``with_hooks``."""
    docs = [d for d in docs if with_hooks or not _hook(d)]
    first = [
        "CustomResourceDefinition", "Namespace", "ServiceAccount", "Secret", "ConfigMap",
        "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service",
    ]  # fmt: skip
    rank = {kind: i for i, kind in enumerate(first)}
    return sorted(docs, key=lambda d: rank.get(str(d.get("kind")), len(first)))


__all__ = ["BUILTIN", "Cluster", "helm_template", "hooks", "install_order"]
