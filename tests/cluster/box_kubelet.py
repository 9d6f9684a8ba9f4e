"""The kubelet of the cluster in a box: each pod bound to the node runs its containers as
local processes.

- **Image**: the container's image is a Dockerfile of this repository (:mod:`box_images`);
  the process is its ``ENTRYPOINT``/``CMD`` with the pod's ``command``/``args`` (``$(VAR)``
  expanded), its ``ENV`` and then the pod's ``env``/``envFrom`` (values, ``fieldRef``,
  ``secretKeyRef``, ``configMapKeyRef``), ``HOSTNAME`` and ``KUBERNETES_SERVICE_HOST``/
  ``_PORT``; nothing from the test's own environment but ``PATH`` (``.venv/bin`` first).
- **Network**: each pod has its own loopback address (``status.podIP``, in 127.0.0.0/8);
  the LD_PRELOAD shim ``podnet.c`` makes the pod's ``0.0.0.0``/``::``/``127.0.0.1`` that
  address, so every pod keeps the ports its containers declare.
- **Files**: each container runs in a mount namespace of its own (``unshare --mount``): an
  empty ``/run`` (as in a container), the service-account token, ``ca.crt`` and
  ``namespace`` at ``/var/run/secrets/kubernetes.io/serviceaccount`` (unless
  ``automountServiceAccountToken: false``), and the pod's ``configMap``, ``secret`` and
  ``emptyDir`` volumes at their ``mountPath`` (a missing mount point is made in an overlay,
  the host's directories are never written).
- **Conditions**: ``PodScheduled``, ``Initialized``, ``ContainersReady`` and ``Ready``, each
  with the ``lastTransitionTime`` of its last change of status (to the second); a running
  container's ``state.running.startedAt`` is when its current process started.
- **Probes**: ``startupProbe``, then ``readinessProbe`` (the pod's ``Ready`` condition) and
  ``livenessProbe`` (a container failing it is killed and restarted); ``httpGet`` and
  ``tcpSocket``; ``initialDelaySeconds``, ``periodSeconds``, ``timeoutSeconds``,
  ``failureThreshold``, ``successThreshold``.
- **Restarts**: a container that exits is restarted (``restartPolicy: Always``) after a
  back-off that doubles from ``backoff_s`` up to ``backoff_cap_s``; ``restartCount``,
  ``lastState`` and a ``BackOff`` Event record it. With ``Never`` (or ``OnFailure`` and
  exit 0, a Job's pod) it stays stopped and the pod's phase becomes ``Succeeded`` (every
  container exited 0) or ``Failed``.
- **Deletion**: a Terminating pod's containers get their ``preStop`` hook (``sleep`` or
  ``httpGet``), SIGTERM, and SIGKILL when ``deletionGracePeriodSeconds`` (counted from the
  start of the hook) run out; then the kubelet deletes the pod for good.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from box_apiserver import BoxKube, now_rfc3339
from box_controllers import NODE, meta, objects_of, post_event, terminating
from box_images import ROOT, image_for

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
KEEP_ROOT = "/run/preheat-checkout"  # inside the pod's own /run tmpfs
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PODNET_SOURCE = Path(__file__).with_name("podnet.c")


def build_podnet(into: Path) -> Path:
    """Compile the pod-network shim (``cc``, seconds)."""
    out = into / "podnet.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(PODNET_SOURCE), "-ldl"],
        check=True,
        capture_output=True,
    )
    return out


@dataclass
class Probe:
    spec: Mapping[str, Any]

    @property
    def period(self) -> float:
        return float(self.spec.get("periodSeconds", 10))

    @property
    def delay(self) -> float:
        return float(self.spec.get("initialDelaySeconds", 0))

    @property
    def timeout(self) -> float:
        return float(self.spec.get("timeoutSeconds", 1))

    @property
    def failures(self) -> int:
        return int(self.spec.get("failureThreshold", 3))

    @property
    def successes(self) -> int:
        return int(self.spec.get("successThreshold", 1))


@dataclass
class Container:
    spec: dict[str, Any]
    log: Path
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    started: bool = False  # the startup probe passed (or there is none)
    ready: bool = False
    last_exit: int | None = None
    finished: bool = False  # exited and not to be restarted (restartPolicy)
    started_at: str = ""  # RFC 3339: when its current process started (state.running)
    pids: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.spec["name"])


class PodRuntime:
    """One pod on the node: its address, files, containers and their probes."""

    def __init__(self, kubelet: Kubelet, pod: dict[str, Any], ip: str):
        self.kubelet = kubelet
        self.pod = pod
        self.ip = ip
        self.uid = meta(pod)["uid"]
        self.name, self.namespace = meta(pod)["name"], meta(pod)["namespace"]
        self.dir = kubelet.root / "pods" / f"{self.namespace}_{self.name}"
        self.dir.mkdir(parents=True)
        self.containers = [
            Container(dict(c), self.dir / f"{c['name']}.log")
            for c in (pod.get("spec") or {}).get("containers") or []
        ]
        self.stopping = False
        self.tasks: list[asyncio.Task[None]] = []
        self.done = asyncio.Event()
        # each condition's status and when it last changed (its lastTransitionTime)
        self.transitions: dict[str, tuple[str, str]] = {}

    # -- lifecycle --

    def start(self) -> None:
        for c in self.containers:
            self.tasks.append(asyncio.create_task(self._run(c), name=f"{self.name}/{c.name}"))
            self.tasks.append(asyncio.create_task(self._probe(c), name=f"{self.name}/{c.name}:p"))

    async def _run(self, c: Container) -> None:
        backoff = self.kubelet.backoff_s
        while not self.stopping:
            try:
                argv, env = self._command(c)
            except (KeyError, ValueError) as e:
                await post_event(self.kubelet.server, self.pod, "Failed", str(e), kind="Warning")
                await self._status()
                await asyncio.sleep(backoff)
                continue
            log = c.log.open("ab")
            try:
                c.process = await asyncio.create_subprocess_exec(
                    *argv,
                    env=env,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            finally:
                log.close()
            c.pids.append(c.process.pid)
            started_at = time.monotonic()
            c.started_at = now_rfc3339()
            c.started = "startupProbe" not in c.spec
            await self._status()
            c.last_exit = await c.process.wait()
            c.ready = False
            if self.stopping:
                break
            policy = (self.pod.get("spec") or {}).get("restartPolicy") or "Always"
            if policy == "Never" or (policy == "OnFailure" and c.last_exit == 0):
                c.finished = True  # a Job's container: it ran to its end, not restarted
                await self._status()
                break
            c.restarts += 1
            if time.monotonic() - started_at > 600:
                backoff = self.kubelet.backoff_s
            await post_event(
                self.kubelet.server,
                self.pod,
                "BackOff",
                f"Back-off {backoff:g}s restarting failed container {c.name} "
                f"(exit code {c.last_exit})",
                kind="Warning",
            )
            await self._status()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.kubelet.backoff_cap_s)

    async def _probe(self, c: Container) -> None:
        """startup, then readiness and liveness, each on its own period."""
        startup = c.spec.get("startupProbe")
        readiness = c.spec.get("readinessProbe")
        liveness = c.spec.get("livenessProbe")
        seen_pid = 0
        while not self.stopping:
            proc = c.process
            if proc is None or proc.returncode is not None or proc.pid == seen_pid:
                await asyncio.sleep(0.1)
                continue
            seen_pid = proc.pid
            tasks = [asyncio.create_task(self._probe_run(c, proc, startup, readiness, liveness))]
            try:
                await proc.wait()
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _probe_run(
        self,
        c: Container,
        proc: asyncio.subprocess.Process,
        startup: Mapping[str, Any] | None,
        readiness: Mapping[str, Any] | None,
        liveness: Mapping[str, Any] | None,
    ) -> None:
        if startup:
            p = Probe(startup)
            await asyncio.sleep(p.delay)
            fails = 0
            while not await self._check(c, p):
                fails += 1
                if fails >= p.failures:
                    await post_event(
                        self.kubelet.server,
                        self.pod,
                        "Unhealthy",
                        f"Startup probe failed {fails} times; restarting {c.name}",
                        kind="Warning",
                    )
                    await self._kill(c, proc, grace=0)
                    return
                await asyncio.sleep(p.period)
            c.started = True
        if not readiness:
            c.ready = True
            await self._status()
        await asyncio.gather(
            self._readiness(c, Probe(readiness)) if readiness else asyncio.sleep(0),
            self._liveness(c, proc, Probe(liveness)) if liveness else asyncio.sleep(0),
        )

    async def _readiness(self, c: Container, p: Probe) -> None:
        await asyncio.sleep(p.delay)
        ok_run = fail_run = 0
        while True:
            if await self._check(c, p):
                ok_run, fail_run = ok_run + 1, 0
                if not c.ready and ok_run >= p.successes:
                    c.ready = True
                    await self._status()
            else:
                ok_run, fail_run = 0, fail_run + 1
                if c.ready and fail_run >= p.failures:
                    c.ready = False
                    await self._status()
            await asyncio.sleep(p.period)

    async def _liveness(self, c: Container, proc: asyncio.subprocess.Process, p: Probe) -> None:
        await asyncio.sleep(p.delay)
        fails = 0
        while True:
            await asyncio.sleep(p.period)
            if await self._check(c, p):
                fails = 0
                continue
            fails += 1
            if fails >= p.failures:
                await post_event(
                    self.kubelet.server,
                    self.pod,
                    "Unhealthy",
                    f"Liveness probe failed {fails} times; restarting {c.name}",
                    kind="Warning",
                )
                grace = int((self.pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
                await self._kill(c, proc, grace=grace)
                return

    def _port(self, c: Container, port: Any) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for p in c.spec.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
        raise ValueError(f"container {c.name} has no port named {port!r}")

    async def _check(self, c: Container, p: Probe) -> bool:
        try:
            if "httpGet" in p.spec:
                h = p.spec["httpGet"]
                scheme = str(h.get("scheme", "HTTP")).lower()
                host = h.get("host") or self.ip
                url = f"{scheme}://{host}:{self._port(c, h['port'])}{h.get('path', '/')}"
                timeout = aiohttp.ClientTimeout(total=p.timeout)
                async with self.kubelet.http.get(url, timeout=timeout) as resp:
                    return 200 <= resp.status < 400
            if "tcpSocket" in p.spec or "grpc" in p.spec:
                port = self._port(c, (p.spec.get("tcpSocket") or p.spec.get("grpc"))["port"])
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.ip, port), p.timeout
                )
                writer.close()
                return True
        except (OSError, TimeoutError, aiohttp.ClientError, ValueError):
            return False
        return False

    # -- the process --

    def _env(self, c: Container) -> dict[str, str]:
        image = image_for(str(c.spec["image"]))
        env = {
            "PATH": f"{self.kubelet.bin_dir}:{SYSTEM_PATH}",
            "HOME": "/root",
            "HOSTNAME": self.name,
            **image.env,
            "KUBERNETES_SERVICE_HOST": self.kubelet.api_host,
            "KUBERNETES_SERVICE_PORT": str(self.kubelet.api_port),
        }
        for source in c.spec.get("envFrom") or []:
            ref = source.get("configMapRef") or source.get("secretRef") or {}
            data = self._data("v1/configmaps" if "configMapRef" in source else "v1/secrets", ref)
            prefix = source.get("prefix", "")
            env.update({prefix + k: v for k, v in (data or {}).items()})
        for item in c.spec.get("env") or []:
            if "value" in item:
                env[item["name"]] = _expand(str(item["value"]), env)
                continue
            source = item.get("valueFrom") or {}
            value: str | None
            if "fieldRef" in source:
                value = self._field(source["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in source or "configMapKeyRef" in source:
                secret = "secretKeyRef" in source
                ref = source.get("secretKeyRef") or source.get("configMapKeyRef")
                data = self._data("v1/secrets" if secret else "v1/configmaps", ref)
                value = (data or {}).get(ref["key"])
                if value is None and not ref.get("optional"):
                    what = "secret" if secret else "configmap"
                    raise KeyError(
                        f"CreateContainerConfigError: {what} {ref['name']!r} key "
                        f"{ref['key']!r} not found"
                    )
            else:
                raise ValueError(f"env {item['name']}: valueFrom {sorted(source)} not emulated")
            if value is not None:
                env[item["name"]] = value
        env["PREHEAT_BOX_POD_IP"] = self.ip
        env["LD_PRELOAD"] = str(self.kubelet.podnet)
        return env

    def _field(self, path: str) -> str:
        m = meta(self.pod)
        values = {
            "metadata.name": m["name"],
            "metadata.namespace": m["namespace"],
            "metadata.uid": m["uid"],
            "spec.nodeName": NODE,
            "spec.serviceAccountName": (self.pod.get("spec") or {}).get(
                "serviceAccountName", "default"
            ),
            "status.podIP": self.ip,
            "status.hostIP": self.kubelet.host_ip,
        }
        found = re.match(r"metadata\.(labels|annotations)\['(.+)'\]$", path)
        if found:
            return str((m.get(found.group(1)) or {}).get(found.group(2), ""))
        if path not in values:
            raise ValueError(f"fieldRef {path!r} not emulated")
        return str(values[path])

    def _data(self, resource: str, ref: Mapping[str, Any]) -> dict[str, str] | None:
        for obj in objects_of(self.kubelet.server, resource):
            if meta(obj).get("namespace") == self.namespace and meta(obj)["name"] == ref["name"]:
                if resource == "v1/secrets":
                    out = {
                        k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()
                    }
                    out.update(obj.get("stringData") or {})
                    return out
                return {str(k): str(v) for k, v in (obj.get("data") or {}).items()}
        if ref.get("optional"):
            return None
        kind = "secret" if resource == "v1/secrets" else "configmap"
        raise KeyError(f"CreateContainerConfigError: {kind} {ref['name']!r} not found")

    def _volumes(self, c: Container) -> list[tuple[str, Path, bool]]:
        """(mountPath, host directory, read-only) for each of the container's mounts."""
        volumes = {v["name"]: v for v in (self.pod.get("spec") or {}).get("volumes") or []}
        out = []
        for mount in c.spec.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            if volume is None:
                raise ValueError(f"volumeMount {mount['name']!r}: no such volume")
            host = self.dir / "volumes" / mount["name"]
            if not host.exists():
                host.mkdir(parents=True)
                if "configMap" in volume or "secret" in volume:
                    is_secret = "secret" in volume
                    ref = dict(volume.get("configMap") or volume.get("secret") or {})
                    ref.setdefault("name", ref.get("secretName"))
                    data = self._data("v1/secrets" if is_secret else "v1/configmaps", ref) or {}
                    items = ref.get("items")
                    chosen = {i["path"]: data[i["key"]] for i in items} if items else data
                    for path, text in chosen.items():
                        (host / path).parent.mkdir(parents=True, exist_ok=True)
                        (host / path).write_text(text)
                elif "emptyDir" not in volume:
                    raise ValueError(f"volume {mount['name']!r}: {sorted(volume)} not emulated")
            out.append((str(mount["mountPath"]), host, bool(mount.get("readOnly"))))
        return out

    def _service_account(self) -> Path | None:
        spec = self.pod.get("spec") or {}
        if spec.get("automountServiceAccountToken") is False:
            return None
        account = spec.get("serviceAccountName") or "default"
        sa = self.dir / "serviceaccount"
        if not sa.exists():
            sa.mkdir()
            (sa / "token").write_text(f"box:{self.namespace}:{account}")
            (sa / "namespace").write_text(self.namespace)
            (sa / "ca.crt").write_text(self.kubelet.ca_cert.read_text())
        return sa

    def _command(self, c: Container) -> tuple[list[str], dict[str, str]]:
        env = self._env(c)
        image = image_for(str(c.spec["image"]))
        argv = [_expand(a, env) for a in image.argv(c.spec.get("command"), c.spec.get("args"))]
        lines = ["set -e", "mount -t tmpfs -o size=4m tmpfs /run"]
        # The checkout (its .venv: the image's preheat) may sit under a path a volume
        # covers (a clone in /tmp, and the chart mounts an emptyDir at /tmp): keep a handle
        # on it before the volumes go on, and put it back where it was after.
        root = shlex.quote(str(ROOT))
        lines += [f"mkdir -p {KEEP_ROOT}", f"mount --bind {root} {KEEP_ROOT}"]
        mounts = self._volumes(c)
        sa = self._service_account()
        if sa is not None:
            lines += [f"mkdir -p {SA_DIR}", f"mount --bind {shlex.quote(str(sa))} {SA_DIR}"]
        overlays: set[str] = set()
        for path, _, _ in mounts:
            if os.path.exists(path):
                continue
            top = "/" + path.strip("/").split("/", 1)[0]
            if top in overlays or not os.path.isdir(top) or top in ("/run", "/proc", "/dev"):
                continue
            overlays.add(top)
            upper = self.dir / "overlay" / c.name / top.strip("/")
            (upper / "up").mkdir(parents=True, exist_ok=True)
            (upper / "work").mkdir(parents=True, exist_ok=True)
            lines.append(
                f"mount -t overlay overlay -o lowerdir={top},upperdir={upper}/up,"
                f"workdir={upper}/work {top}"
            )
        for path, host, read_only in sorted(mounts, key=lambda m: m[0].count("/")):
            q = shlex.quote(path)
            lines += [f"mkdir -p {q}", f"mount --bind {shlex.quote(str(host))} {q}"]
            if read_only:
                lines.append(f"mount -o remount,bind,ro {q}")
        lines.append(
            f"[ -d {root}/src ] || {{ mkdir -p {root} && mount --bind {KEEP_ROOT} {root}; }}"
        )
        lines.append('exec "$@"')
        script = "; ".join(lines)
        wrapped = [
            "unshare", "--mount", "--propagation", "private", "--",
            "/bin/sh", "-c", script, "sh", *argv,
        ]  # fmt: skip
        return wrapped, env

    async def _kill(self, c: Container, proc: asyncio.subprocess.Process, *, grace: float) -> None:
        if proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        try:
            await asyncio.wait_for(proc.wait(), max(grace, 0.01))
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()

    async def terminate(self, grace_s: float) -> None:
        """preStop, SIGTERM, SIGKILL at the grace period's end; then stop probing."""
        self.stopping = True
        deadline = time.monotonic() + grace_s
        await asyncio.gather(*(self._stop_container(c, deadline) for c in self.containers))
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.done.set()

    async def _stop_container(self, c: Container, deadline: float) -> None:
        proc = c.process
        if proc is None or proc.returncode is not None:
            return
        hook = (c.spec.get("lifecycle") or {}).get("preStop") or {}
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                if "sleep" in hook:
                    await asyncio.sleep(float(hook["sleep"]["seconds"]))
                elif "httpGet" in hook:
                    await self._check(c, Probe({"httpGet": hook["httpGet"], "timeoutSeconds": 30}))
        await self._kill(c, proc, grace=max(0.0, deadline - time.monotonic()))

    def _condition(self, kind: str, status: str) -> dict[str, str]:
        """A pod condition, its ``lastTransitionTime`` the time its status last changed (as
        the kubelet keeps it: what `preheat`'s measured cold start reads off Ready)."""
        before = self.transitions.get(kind)
        if before is None or before[0] != status:
            self.transitions[kind] = (status, now_rfc3339())
        return {"type": kind, "status": status, "lastTransitionTime": self.transitions[kind][1]}

    def _phase(self) -> str:
        """Running, or once every container finished (``restartPolicy`` Never/OnFailure):
        Succeeded when each exited 0, Failed otherwise."""
        if not self.containers or not all(c.finished for c in self.containers):
            return "Running"
        return "Succeeded" if all(c.last_exit == 0 for c in self.containers) else "Failed"

    async def _status(self) -> None:
        ready = all(c.ready for c in self.containers)
        statuses = []
        for c in self.containers:
            running = c.process is not None and c.process.returncode is None
            status: dict[str, Any] = {
                "name": c.name,
                "image": c.spec["image"],
                "ready": c.ready,
                "started": c.started and running,
                "restartCount": c.restarts,
                "state": {"running": {"startedAt": c.started_at or now_rfc3339()}}
                if running
                else {
                    "waiting": {"reason": "CrashLoopBackOff" if c.restarts else "ContainerCreating"}
                },
            }
            if c.last_exit is not None:
                status["lastState"] = {"terminated": {"exitCode": c.last_exit}}
            statuses.append(status)
        conditions = [
            self._condition("PodScheduled", "True"),
            self._condition("Initialized", "True"),
            self._condition("ContainersReady", str(ready)),
            self._condition("Ready", str(ready)),
        ]
        await self.kubelet.server.patch(
            f"/api/v1/namespaces/{self.namespace}/pods/{self.name}/status",
            json={
                "status": {
                    "phase": self._phase(),
                    "podIP": self.ip,
                    "podIPs": [{"ip": self.ip}],
                    "hostIP": self.kubelet.host_ip,
                    "conditions": conditions,
                    "containerStatuses": statuses,
                }
            },
            headers={"Content-Type": "application/merge-patch+json"},
        )


class Kubelet:
    """Starts the pods bound to the node, stops the Terminating ones, reports status."""

    def __init__(
        self,
        server: BoxKube,
        *,
        root: Path,
        podnet: Path,
        ca_cert: Path,
        api_host: str,
        api_port: int,
        host_ip: str,
        addresses: Any,
        backoff_s: float = 10.0,
        backoff_cap_s: float = 300.0,
    ):
        self.server = server
        self.root = root
        self.podnet = podnet
        self.ca_cert = ca_cert
        self.api_host, self.api_port, self.host_ip = api_host, api_port, host_ip
        self.addresses = addresses
        self.backoff_s, self.backoff_cap_s = backoff_s, backoff_cap_s
        self.bin_dir = str(ROOT / ".venv" / "bin")
        self.pods: dict[str, PodRuntime] = {}
        self.stopping: dict[str, asyncio.Task[None]] = {}
        self.http = aiohttp.ClientSession()

    async def reconcile(self) -> None:
        seen = set()
        for pod in objects_of(self.server, "v1/pods"):
            m = meta(pod)
            if (pod.get("spec") or {}).get("nodeName") != NODE:
                continue
            uid = m["uid"]
            seen.add(uid)
            runtime = self.pods.get(uid)
            if runtime is None and not terminating(pod):
                runtime = PodRuntime(self, pod, next(self.addresses))
                self.pods[uid] = runtime
                runtime.start()
                await runtime._status()
            elif runtime is not None and terminating(pod) and uid not in self.stopping:
                grace = float(m.get("deletionGracePeriodSeconds") or 30)
                self.stopping[uid] = asyncio.create_task(self._finish(runtime, grace))
            elif runtime is None and terminating(pod) and uid not in self.stopping:
                self.stopping[uid] = asyncio.create_task(self._forget(pod))
        for uid in set(self.pods) - seen:  # deleted for good while running: stop at once
            if uid not in self.stopping:
                self.stopping[uid] = asyncio.create_task(self._finish(self.pods[uid], 0, False))

    async def _forget(self, pod: Mapping[str, Any]) -> None:
        m = meta(pod)
        await self.server.delete(
            f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}?gracePeriodSeconds=0"
        )

    async def _finish(self, runtime: PodRuntime, grace: float, delete: bool = True) -> None:
        await runtime.terminate(grace)
        self.pods.pop(runtime.uid, None)  # its processes are gone before the pod is
        if delete:
            await self.server.delete(
                f"/api/v1/namespaces/{runtime.namespace}/pods/{runtime.name}?gracePeriodSeconds=0"
            )

    def processes(self) -> dict[str, dict[str, int | None]]:
        """pod name -> container -> its running pid (None between restarts)."""
        return {
            r.name: {
                c.name: c.process.pid
                if c.process is not None and c.process.returncode is None
                else None
                for c in r.containers
            }
            for r in self.pods.values()
        }

    async def close(self) -> None:
        """Every pod stopped: SIGTERM, then SIGKILL after a few seconds."""
        for task in self.stopping.values():
            task.cancel()
        await asyncio.gather(
            *(r.terminate(5.0) for r in self.pods.values()), return_exceptions=True
        )
        await asyncio.gather(*self.stopping.values(), return_exceptions=True)
        await self.http.close()


def _expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (``$$`` escapes), unknown names left as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, text)
