"""The user's path on the cluster in a box: ``helm template`` of the chart with default
values, every object applied (CRDs included), the operator and the router running from
their rendered Deployments; then pools applied, edited, broken and deleted as a user
would, each step asserted (see README.md here for what the box emulates).

The steps share one cluster and run in file order (each leaves the state the next starts
from); a failed step's message carries the tail of every container's log.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from box_cluster import Cluster, helm_template, hooks, install_order
from box_controllers import is_ready, terminating
from box_traffic import Answer, chat

from preheat.operator.status import observe_pod

ROOT = Path(__file__).resolve().parents[2]
RELEASE, RELEASE_NS, NS = "preheat", "preheat-system", "default"
POOLS = "preheat.dev/v1alpha1/inferencepools"
WORKER_ROLE = "preheat.dev/role"
POOL_LABEL = "preheat.dev/pool"
SECOND = "sim-fast"
FINALIZER = "preheat.dev/operator"  # kopf's (operator/handlers.py startup)

# Seconds a step may take: the sim engine's default load and warm-up (pool-minimal) plus
# the probes' periods, on a busy 2-core machine.
WARM_S = 90.0


def second_pool() -> dict[str, Any]:
    """Another model beside pool-minimal: a warm standby, and a quick sim to load."""
    return {
        "apiVersion": "preheat.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": SECOND, "namespace": NS},
        "spec": {
            "model": {"name": "sim-fast-model"},
            "engine": {"kind": "sim", "args": {"loadTime": "1s", "warmupTime": "1s"}},
            "replicas": {"min": 1, "max": 3, "warmStandby": 1},
        },
    }


def minimal_pool() -> dict[str, Any]:
    pool: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "pool-minimal.yaml").read_text())
    pool["metadata"].setdefault("namespace", NS)  # kubectl apply's default namespace
    return pool


@pytest.fixture(scope="module")
def box(box_ready: None) -> Iterator[Cluster]:
    cluster = Cluster(backoff_s=1.0).start()
    try:
        cluster.call(_namespace(cluster, RELEASE_NS))  # helm install --create-namespace
        cluster.apply(install_order(helm_template(RELEASE, RELEASE_NS)))
        yield cluster
    finally:
        pids = [p for pod in cluster.processes().values() for p in pod.values() if p]
        cluster.stop()
        alive = [p for p in pids if _alive(p)]
        assert not alive, f"processes left running after the cluster stopped: {alive}"


@pytest.fixture(autouse=True)
def nothing_forbidden(box: Cluster) -> Iterator[None]:
    """Every request the pods made was allowed by the chart's RBAC (403 otherwise, as on a
    cluster; the emulator records them)."""
    yield
    denied = list(box.server.denied)
    assert not denied, f"requests the chart's RBAC forbids: {denied[:10]}"


async def _namespace(cluster: Cluster, name: str) -> None:
    cluster.add_namespace(name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# --- reads, as kubectl would show them ----------------------------------------------------


def pool(box: Cluster, name: str) -> dict[str, Any]:
    obj = box.get(POOLS, NS, name)
    assert obj is not None, f"no InferencePool {name}"
    return obj


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return {}


def jsonpath(obj: Any, path: str) -> Any:
    """The subset of kubectl's JSONPath the CRD's printer columns use."""
    for part in re.findall(r"\.([A-Za-z0-9_]+)|\[\?\(@\.(\w+)==\"([^\"]*)\"\)\]", path):
        key, field, value = part
        if key:
            obj = obj.get(key) if isinstance(obj, dict) else None
        else:
            obj = next((x for x in obj or [] if x.get(field) == value), None)
        if obj is None:
            return None
    return obj


def printer_columns(box: Cluster, obj: dict[str, Any]) -> dict[str, Any]:
    """``kubectl get ipool -o wide``: each column's value, from the CRD as applied."""
    [crd] = box.objects("apiextensions.k8s.io/v1/customresourcedefinitions")
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    return {c["name"]: jsonpath(obj, c["jsonPath"]) for c in columns}


def pool_pods(box: Cluster, name: str, *, live: bool = True) -> list[dict[str, Any]]:
    return [
        p
        for p in box.objects("v1/pods", NS)
        if (p["metadata"].get("labels") or {}).get(POOL_LABEL) == name
        and not (live and terminating(p))
    ]


def children(box: Cluster, name: str) -> dict[str, list[str]]:
    """The pool's child objects by kind (ownerReferences to the pool, or named after it)."""
    out: dict[str, list[str]] = {}
    for resource in (
        "apps/v1/deployments",
        "v1/services",
        "policy/v1/poddisruptionbudgets",
        "v1/secrets",
    ):
        for obj in box.objects(resource, NS):
            m = obj["metadata"]
            if m["name"].startswith(f"{name}-") or any(
                r.get("name") == name for r in m.get("ownerReferences") or []
            ):
                out.setdefault(resource, []).append(m["name"])
    return out


def converged(box: Cluster, name: str) -> dict[str, Any]:
    """The pool is Ready, its status is of its current spec, its pods are what it wants."""
    obj = pool(box, name)
    status, spec = obj.get("status") or {}, obj["spec"]
    assert condition(obj, "Ready").get("status") == "True", condition(obj, "Ready")
    assert status.get("observedGeneration") == obj["metadata"]["generation"], status
    replicas = status.get("replicas") or {}
    want_active = max(spec["replicas"].get("min", 1), status.get("desiredReplicas", 0))
    assert replicas.get("active") == want_active, replicas
    assert replicas.get("standby") == spec["replicas"].get("warmStandby", 0), replicas
    pods = pool_pods(box, name)
    assert len(pods) == want_active + spec["replicas"].get("warmStandby", 0), [
        p["metadata"]["name"] for p in pods
    ]
    assert all(is_ready(p) for p in pods), "a pod is not Ready"
    # each measures its cold start (creation to Ready: the forecast's default horizon)
    for p in pods:
        measured = observe_pod(p).ready_after
        assert measured is not None, p["status"]["conditions"]
        assert 0 <= measured < 600, p["status"]["conditions"]
    return obj


# --- the install ----------------------------------------------------------------------------


def test_install_runs_the_rendered_deployments(box: Cluster) -> None:
    rendered = install_order(helm_template(RELEASE, RELEASE_NS))  # delete hooks wait
    for doc in rendered:  # every object the chart installs is served back
        path = box.path_of(doc, name=True)
        assert box.call(_get(box, path)) == 200, f"{doc['kind']} {doc['metadata']['name']}"
    deployments = {d["metadata"]["name"]: d for d in rendered if d["kind"] == "Deployment"}
    assert set(deployments) == {f"{RELEASE}-operator", f"{RELEASE}-router"}
    operator = deployments[f"{RELEASE}-operator"]

    def operator_ready() -> list[dict[str, Any]]:
        pods = [
            p
            for p in box.objects("v1/pods", RELEASE_NS)
            if p["metadata"]["name"].startswith(f"{RELEASE}-operator-") and is_ready(p)
        ]
        return pods

    pods = box.wait(operator_ready, within=60, what="the operator pod Ready")
    [pod] = pods
    rendered_container = operator["spec"]["template"]["spec"]["containers"][0]
    container = pod["spec"]["containers"][0]
    assert container["args"] == rendered_container["args"]
    assert container["image"] == rendered_container["image"]
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"
    assert box.processes()[pod["metadata"]["name"]]["operator"], "no operator process"


async def _get(box: Cluster, path: str) -> int:
    resp = await box.server.get(path)
    return int(resp.status)


# --- 1. pools reach Ready -------------------------------------------------------------------


def test_pools_reach_ready_with_their_standby_warm(box: Cluster) -> None:
    box.apply([minimal_pool(), second_pool()])
    for name in ("sim-tiny", SECOND):
        box.wait(lambda n=name: converged(box, n), within=WARM_S, what=f"{name} Ready")
    fast = pool(box, SECOND)
    standby = [
        p for p in pool_pods(box, SECOND) if p["metadata"]["labels"].get(WORKER_ROLE) == "standby"
    ]
    assert len(standby) == 1, "no warm standby pod"
    assert is_ready(standby[0]), "the warm standby is not a Ready pod"
    columns = printer_columns(box, fast)
    assert columns["Model"] == "sim-fast-model"
    assert columns["Engine"] == "sim"
    assert (columns["Active"], columns["Standby"], columns["Ready"]) == (1, 1, "True")
    assert columns["Desired"] == 1
    assert columns["Warming"] == 0
    assert columns["Age"]
    tiny = printer_columns(box, pool(box, "sim-tiny"))
    assert (tiny["Model"], tiny["Active"], tiny["Standby"], tiny["Ready"]) == (
        "sim-tiny",
        1,
        0,
        "True",
    )


# --- 2. a chat completion through the router's Service, per model ------------------------


def router_base(box: Cluster) -> str:
    """The router Service's address (its ClusterIP; kube-proxy picks a router pod)."""
    svc = box.get("v1/services", RELEASE_NS, f"{RELEASE}-router")
    assert svc is not None, "no router Service"
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "http")
    return f"http://{svc['spec']['clusterIP']}:{port}"


MODELS = {"sim-tiny": "sim-tiny", SECOND: "sim-fast-model"}  # pool -> model


def send(box: Cluster, model: str, count: int = 1, **kwargs: Any) -> list[Answer]:
    """``count`` concurrent chat completions through the router's Service."""

    async def go() -> list[Answer]:
        async with aiohttp.ClientSession() as session:
            return await asyncio.gather(
                *(chat(session, router_base(box), model, **kwargs) for _ in range(count))
            )

    return asyncio.run(go())


def models(box: Cluster) -> set[str]:
    async def go() -> set[str]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{router_base(box)}/v1/models") as resp,
        ):
            assert resp.status == 200, await resp.text()
            return {m["id"] for m in (await resp.json())["data"]}

    return asyncio.run(go())


def test_chat_through_the_router_service_reaches_each_models_pool(box: Cluster) -> None:
    box.wait(lambda: set(MODELS.values()) <= models(box), within=60, what="/v1/models lists both")
    for name, model in MODELS.items():
        active = {
            p["metadata"]["name"]
            for p in pool_pods(box, name)
            if p["metadata"]["labels"].get(WORKER_ROLE) == "active"
        }
        for answer in send(box, model, count=3, max_tokens=12):
            assert answer.complete, answer
            assert answer.chunks >= 2, f"not streamed: {answer}"
            assert answer.worker in active, f"{model} served by {answer.worker}, not {active}"
    [unknown] = send(box, "no-such-model")
    assert unknown.status == 404
    assert unknown.body["error"]["code"] == "model_not_found"


# --- 3 (the operator's side). scale up, standby first; scale down, drained -----------------


def test_scale_up_promotes_the_standby_then_scale_down_drains(box: Cluster) -> None:
    before = {p["metadata"]["name"]: p for p in pool_pods(box, SECOND)}
    [standby] = [n for n, p in before.items() if p["metadata"]["labels"][WORKER_ROLE] == "standby"]
    box.patch(pool(box, SECOND), {"spec": {"replicas": {"min": 2}}})

    def promoted() -> bool:
        pod = box.get("v1/pods", NS, standby)
        assert pod is not None, "the standby pod went away"
        return pod["metadata"]["labels"][WORKER_ROLE] == "active"

    box.wait(promoted, within=30, what="the standby promoted")
    obj = box.wait(lambda: converged(box, SECOND), within=WARM_S, what="scaled up to 2+1")
    after = {p["metadata"]["name"]: p for p in pool_pods(box, SECOND)}
    new = set(after) - set(before)
    assert len(new) == 1, f"one new pod for the new standby: {sorted(after)}"
    deployment = box.get("apps/v1/deployments", NS, f"{SECOND}-workers")
    assert deployment is not None
    template = deployment["spec"]["template"]["spec"]["containers"][0]
    for name in new:  # started by the kubelet from the operator's pod template
        assert after[name]["spec"]["containers"][0]["args"] == template["args"]
        assert box.processes()[name]["worker"], f"{name} has no process"
    assert obj["status"]["replicas"]["active"] == 2

    box.patch(pool(box, SECOND), {"spec": {"replicas": {"min": 1}}})
    box.wait(lambda: converged(box, SECOND), within=WARM_S, what="scaled back to 1+1")

    def victim_gone() -> set[str]:
        return set(after) - {p["metadata"]["name"] for p in pool_pods(box, SECOND, live=False)}

    gone = box.wait(victim_gone, within=60, what="the victim drained and deleted")
    assert len(gone) == 1, f"one pod removed: {gone}"
    assert not set(gone) & set(box.processes()), "the victim's process still runs"
    [victim] = gone
    log = (box.root / "pods" / f"{NS}_{victim}" / "worker.log").read_text()
    assert '"drain_started"' in log, "the victim was not drained before it went"
    assert '"drain_done"' in log, "the victim's drain did not finish"
    events = [
        e
        for e in box.objects("v1/events", NS)
        if (e.get("involvedObject") or {}).get("name") == SECOND
    ]
    assert events, "the operator recorded no Event on the pool"


# --- 3 (traffic). a burst scales up (standby first) and down, no stream cut ----------------

BURST = 8  # concurrent streams: four times the pool's per-replica target


def test_a_burst_scales_up_and_back_down_without_cutting_a_stream(box: Cluster) -> None:
    box.patch(
        pool(box, SECOND),
        {
            "spec": {
                "autoscaling": {
                    "objectives": [{"signal": "concurrency", "perReplica": 2}],
                    "window": "10s",
                    "scaleUp": {"cooldown": "0s"},
                    "scaleDown": {"stabilization": "0s", "cooldown": "0s"},
                }
            }
        },
    )
    box.wait(lambda: converged(box, SECOND), within=WARM_S, what="autoscaled pool")
    before = {p["metadata"]["name"]: p for p in pool_pods(box, SECOND)}
    [standby] = [n for n, p in before.items() if p["metadata"]["labels"][WORKER_ROLE] == "standby"]

    def scaled_up() -> bool:
        return int(pool(box, SECOND)["status"].get("desiredReplicas", 1)) >= 2

    async def burst() -> list[Answer]:
        """BURST streams at a time until the autoscaler asks for more (at most 120 s)."""
        answers: list[Answer] = []
        async with aiohttp.ClientSession() as session:
            base = router_base(box)
            deadline = asyncio.get_running_loop().time() + 120
            while not scaled_up() and asyncio.get_running_loop().time() < deadline:
                answers += await asyncio.gather(
                    *(chat(session, base, MODELS[SECOND], max_tokens=300) for _ in range(BURST))
                )
        return answers

    answers = asyncio.run(burst())
    assert scaled_up(), f"the burst did not scale the pool up: {pool(box, SECOND)['status']}"
    assert all(a.complete for a in answers), [a for a in answers if not a.complete][:3]
    pod = box.get("v1/pods", NS, standby)
    assert pod is not None
    assert pod["metadata"]["labels"][WORKER_ROLE] == "active", "the standby was not promoted"
    grown = box.wait(
        lambda: len(pool_pods(box, SECOND)) > len(before) and pool_pods(box, SECOND),
        within=30,
        what="a new pod behind the promoted standby",
    )
    assert {p["metadata"]["name"] for p in grown} - set(before)

    async def trickle() -> list[Answer]:
        """Two long streams at a time (under target) while the pool shrinks back."""
        answers: list[Answer] = []
        async with aiohttp.ClientSession() as session:
            base = router_base(box)
            deadline = asyncio.get_running_loop().time() + 120
            while scaled_up() and asyncio.get_running_loop().time() < deadline:
                answers += await asyncio.gather(
                    *(chat(session, base, MODELS[SECOND], max_tokens=300) for _ in range(2))
                )
        return answers

    answers = asyncio.run(trickle())
    assert not scaled_up(), "the pool did not scale back down"
    assert answers, "no stream ran during the scale-down"
    assert all(a.complete for a in answers), [a for a in answers if not a.complete][:3]
    box.wait(lambda: converged(box, SECOND), within=WARM_S, what="scaled back down")
    box.patch(pool(box, SECOND), {"spec": {"autoscaling": {"objectives": None}}})


# --- 4. a worker SIGKILLed: restarted, routed around, no request hangs ---------------------


def test_a_worker_sigkilled_is_restarted_and_routed_around(box: Cluster) -> None:
    box.patch(pool(box, SECOND), {"spec": {"replicas": {"min": 2}}})
    box.wait(lambda: converged(box, SECOND), within=WARM_S, what="two active workers")
    active = sorted(
        p["metadata"]["name"]
        for p in pool_pods(box, SECOND)
        if p["metadata"]["labels"].get(WORKER_ROLE) == "active"
    )
    victim = active[0]
    pid = box.processes()[victim]["worker"]
    assert pid

    async def go() -> tuple[list[Answer], list[Answer]]:
        async with aiohttp.ClientSession() as session:
            base = router_base(box)
            flight = [
                asyncio.create_task(chat(session, base, MODELS[SECOND], max_tokens=400))
                for _ in range(6)
            ]
            await asyncio.sleep(0.5)
            os.kill(pid, signal.SIGKILL)
            after = [
                await chat(session, base, MODELS[SECOND], max_tokens=8, timeout_s=30)
                for _ in range(10)
            ]
            return list(await asyncio.gather(*flight)), after

    in_flight, after = asyncio.run(go())
    hung = [a for a in in_flight + after if a.status == 0 and "Timeout" in str(a.error)]
    assert not hung, f"requests hung: {hung}"
    for answer in after:  # sent after the kill: served by the other worker
        assert answer.complete, answer
        assert answer.worker != victim or _restarted(box, victim, pid), answer
    assert any(a.complete for a in in_flight)
    cut = [a for a in in_flight if a.worker == victim]
    assert cut, f"no request was on the killed worker: {in_flight}"
    for answer in cut:  # it ends: streamed to the end, or an error event / status, not a hang
        assert answer.complete or answer.error or answer.status >= 500, answer

    box.wait(lambda: _restarted(box, victim, pid), within=30, what="the kubelet restarts it")
    pod = box.get("v1/pods", NS, victim)
    assert pod is not None
    assert pod["status"]["containerStatuses"][0]["restartCount"] >= 1
    box.wait(lambda: converged(box, SECOND), within=WARM_S, what="the pool whole again")
    box.wait(
        lambda: victim in {a.worker for a in send(box, MODELS[SECOND], count=6, max_tokens=4)},
        within=60,
        what="the restarted worker serves again",
    )
    box.patch(pool(box, SECOND), {"spec": {"replicas": {"min": 1}}})
    box.wait(lambda: converged(box, SECOND), within=WARM_S, what="back to one active")


def _restarted(box: Cluster, name: str, old_pid: int) -> bool:
    now = box.processes().get(name, {}).get("worker")
    return bool(now and now != old_pid)


# --- 5. the operator killed mid-reconcile ---------------------------------------------------


def test_operator_killed_mid_reconcile_restarts_and_converges(box: Cluster) -> None:
    [name] = [n for n in box.processes() if n.startswith(f"{RELEASE}-operator-")]
    pid = box.processes()[name]["operator"]
    assert pid
    box.patch(pool(box, SECOND), {"spec": {"replicas": {"warmStandby": 2}}})
    os.kill(pid, signal.SIGKILL)  # the edit is being reconciled, or about to be

    def restarted() -> int | None:
        now = box.processes()[name]["operator"]
        return now if now and now != pid else None

    box.wait(restarted, within=30, what="the kubelet restarts the operator")
    pod = box.get("v1/pods", RELEASE_NS, name)
    assert pod is not None
    assert pod["status"]["containerStatuses"][0]["restartCount"] >= 1
    box.wait(lambda: converged(box, SECOND), within=WARM_S, what="converged after the kill")
    kids = children(box, SECOND)
    assert len(kids["apps/v1/deployments"]) == 1, kids
    assert len(kids["v1/services"]) == 1, kids
    assert len(kids["v1/secrets"]) == 1, kids
    assert len(pool_pods(box, SECOND)) == 1 + 2


# --- 6. edits converge; deletion removes everything -----------------------------------------


def test_edits_converge_and_delete_removes_everything(box: Cluster) -> None:
    obj = pool(box, SECOND)
    box.patch(
        obj,
        {
            "spec": {
                "replicas": {"min": 2, "warmStandby": 0},
                "autoscaling": {
                    "objectives": [{"signal": "queueDepth", "perReplica": 4}],
                },
            }
        },
    )
    after = box.wait(lambda: converged(box, SECOND), within=WARM_S, what="edited pool")
    assert after["status"]["replicas"]["active"] == 2
    assert after["status"]["replicas"]["standby"] == 0

    pods = [p["metadata"]["name"] for p in pool_pods(box, SECOND, live=False)]
    pids = [box.processes()[n]["worker"] for n in pods if n in box.processes()]
    box.delete(pool(box, SECOND))

    def all_gone() -> bool:
        assert box.get(POOLS, NS, SECOND) is None, "the pool is still there"
        assert not children(box, SECOND), children(box, SECOND)
        assert not pool_pods(box, SECOND, live=False), "pods left"
        assert not set(pods) & set(box.processes()), "the kubelet still runs a pod"
        return True

    box.wait(all_gone, within=90, what="the pool and its children deleted")
    alive = [p for p in pids if p and _alive(p)]
    assert not alive, f"worker processes still running: {alive}"
    assert converged(box, "sim-tiny"), "the other pool is untouched"


# --- helm uninstall -------------------------------------------------------------------------


def test_helm_uninstall_leaves_pools_that_delete_without_the_operator(box: Cluster) -> None:
    """Operator issue, item 5: after ``helm uninstall`` the chart's post-delete hook
    (``preheat release-pools``) takes kopf's finalizer off the pools left behind, so
    ``kubectl delete ipool`` completes without the operator and takes the children along.

    Emulated: Helm deletes the release's objects (workloads first; the RBAC once their pods
    are gone, so nothing the pods still send is denied), then creates the hooks in weight
    order; the Job controller's part (one pod from the Job's template) is done here."""
    left = pool(box, "sim-tiny")
    assert FINALIZER in (left["metadata"].get("finalizers") or []), "kopf's finalizer"
    docs = helm_template(RELEASE, RELEASE_NS)
    release = [d for d in reversed(install_order(docs)) if d["kind"] != "CustomResourceDefinition"]
    access = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    for doc in [d for d in release if d["kind"] not in access]:
        box.delete(doc)

    def control_plane_gone() -> bool:
        pods = [p["metadata"]["name"] for p in box.objects("v1/pods", RELEASE_NS)]
        assert not pods, f"release pods still there: {pods}"
        return True

    box.wait(control_plane_gone, within=WARM_S, what="the operator and router pods gone")
    for doc in [d for d in release if d["kind"] in access]:
        box.delete(doc)
    assert FINALIZER in (pool(box, "sim-tiny")["metadata"].get("finalizers") or [])

    post_delete = hooks(docs, "post-delete")
    assert [d["kind"] for d in post_delete][-1] == "Job", post_delete
    box.apply(post_delete[:-1])
    (job,) = box.apply(post_delete[-1:])
    template = job["spec"]["template"]
    runner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **template.get("metadata", {}),
            "name": f"{job['metadata']['name']}-box0",
            "namespace": RELEASE_NS,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job["metadata"]["name"],
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": template["spec"],
    }
    box.apply([runner])

    def hook_succeeded() -> bool:
        pod_now = box.get("v1/pods", RELEASE_NS, runner["metadata"]["name"])
        phase = ((pod_now or {}).get("status") or {}).get("phase")
        assert phase != "Failed", f"the hook failed\n{box.logs()}"
        return phase == "Succeeded"

    box.wait(hook_succeeded, within=WARM_S + 60, what="the release-pools hook to succeed")
    assert FINALIZER not in (pool(box, "sim-tiny")["metadata"].get("finalizers") or [])
    for doc in reversed(post_delete):  # hook-delete-policy: hook-succeeded
        box.delete(doc)

    box.delete(pool(box, "sim-tiny"))

    def all_gone() -> bool:
        assert box.get(POOLS, NS, "sim-tiny") is None, "the pool is still there"
        assert not children(box, "sim-tiny"), children(box, "sim-tiny")
        assert not pool_pods(box, "sim-tiny", live=False), "worker pods left"
        return True

    box.wait(all_gone, within=90, what="the pool and its children deleted without operator")


# --- RBAC: what the chart grants vs what the pods called -----------------------------------

# Grants the box's run does not exercise, each with why it stays. Keyed by (account suffix,
# verb, apiGroup, resource); the test fails on an exception that the run did use, too, so
# the list cannot go stale.
UNEXERCISED: dict[tuple[str, str, str, str], str] = {
    ("operator", "update", "preheat.dev", "inferencepools/finalizers"): (
        "checked by the OwnerReferencesPermissionEnforcement admission plugin (OpenShift) "
        "when a child sets blockOwnerDeletion on its pool; the box runs no admission plugins"
    ),
    **{
        ("operator", verb, "monitoring.coreos.com", "servicemonitors"): (
            "the box serves no monitoring.coreos.com API (no Prometheus Operator), so the "
            "operator makes no ServiceMonitor (tests/operator hold it against kmock)"
        )
        for verb in ("get", "create", "patch")
    },
    ("operator", "patch", "", "services"): (
        "a Service is patched only when it drifts from the spec (a port changed by hand); "
        "no step changes one"
    ),
    ("operator", "patch", "policy", "poddisruptionbudgets"): (
        "a PDB is patched only when it drifts from the spec; no step changes one"
    ),
    ("operator", "patch", "", "secrets"): (
        "the pool's token Secret is patched only to add the workers' cache token "
        "(workerCacheToken.secretName), which the default install does not set"
    ),
}


def _grants(docs: list[dict[str, Any]]) -> dict[str, set[tuple[str, str, str]]]:
    """Service account -> every (verb, apiGroup, resource) its bound roles list."""
    roles = {
        (d["kind"], d["metadata"]["name"]): d
        for d in docs
        if d.get("kind") in ("Role", "ClusterRole")
    }
    out: dict[str, set[tuple[str, str, str]]] = {}
    for binding in docs:
        if binding.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for subject in binding.get("subjects") or []:
            account = f"{subject['namespace']}:{subject['name']}"
            for rule in role.get("rules") or []:
                assert "*" not in rule["verbs"] + rule["resources"], f"wildcard in {rule}"
                out.setdefault(account, set()).update(
                    (verb, group, resource)
                    for verb in rule["verbs"]
                    for group in rule["apiGroups"]
                    for resource in rule["resources"]
                )
    return out


def test_the_charts_rbac_is_what_the_pods_called(box: Cluster) -> None:
    """Last step, after every other: each grant in the rendered chart was used by the pods
    during this run (or is an explained exception), and nothing they called was denied
    (the autouse check). A grant nobody uses is a permission an attacker gets for free."""
    grants = _grants(helm_template(RELEASE, RELEASE_NS))
    used = box.server.allowed
    assert used, "the emulated API server recorded no calls from the pods"
    unused, stale = [], []
    for account, triples in sorted(grants.items()):
        for verb, group, resource in sorted(triples):
            key = (account.rsplit("-", 1)[-1], verb, group, resource)
            if (account, verb, group, resource) in used:
                if key in UNEXERCISED:
                    stale.append(key)
            elif key not in UNEXERCISED:
                unused.append(f"{account} {verb} {group or 'core'}/{resource}")
    assert not unused, "granted by the chart, never called during the run:\n" + "\n".join(unused)
    assert not stale, f"listed as unexercised but called: {stale}"
