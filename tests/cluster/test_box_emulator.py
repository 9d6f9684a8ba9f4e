"""The cluster in a box's own parts, against the Kubernetes semantics they emulate (no
processes started): label selectors, graceful pod deletion, garbage collection, status
subresources, CRDs, the Deployment controller's scale-down ranking and rolling update, and
the image -> Dockerfile mapping (so the chart, the operator and the Dockerfiles cannot
drift apart)."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest
from box_apiserver import BoxKube, label_match
from box_cluster import HELM, helm_template
from box_controllers import DELETION_COST, DeploymentController, objects_of, victim_rank
from box_images import DOCKERFILES, ROOT, image_for, read_dockerfile, repository

from preheat.cli import build_parser
from preheat.core.manifests import BuildOptions

MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture(name="api")
async def api_fixture() -> AsyncIterator[BoxKube]:
    async with BoxKube() as server, kmock.Server(server):
        server.declare_builtin()
        yield server


def pod(name: str, labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": labels or {}, **meta},
        "spec": {"terminationGracePeriodSeconds": 7, "containers": [{"name": "c"}]},
    }


async def create(api: BoxKube, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    resp = await api.post(path, json=obj)
    assert resp.status in (200, 201), await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


# --- label selectors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("app=a", True),
        ("app==a", True),
        ("app=b", False),
        ("app!=b", True),
        ("app!=a", False),
        ("app in (a, b)", True),
        ("app in (b,c)", False),
        ("app notin (b)", True),
        ("app notin (a)", False),
        ("tier", True),
        ("!tier", False),
        ("!zone", True),
        ("app=a,tier=web", True),
        ("app=a,tier=db", False),
        ("zone", False),
    ],
)
def test_label_selector_syntax(selector: str, matches: bool) -> None:
    assert label_match(selector, {"app": "a", "tier": "web"}) is matches


async def test_list_and_watch_filter_by_label_selector(api: BoxKube) -> None:
    await create(api, "/api/v1/namespaces/ns/pods", pod("a", {"pool": "x"}))
    await create(api, "/api/v1/namespaces/ns/pods", pod("b", {"pool": "y"}))
    resp = await api.get("/api/v1/namespaces/ns/pods?labelSelector=pool%3Dx")
    assert [p["metadata"]["name"] for p in (await resp.json())["items"]] == ["a"]

    events: list[tuple[str, str]] = []

    async def watch() -> None:
        resp = await api.get("/api/v1/namespaces/ns/pods?watch=true&labelSelector=pool%3Dx")
        async for line in resp.content:
            if line.strip():
                import json

                event = json.loads(line)
                events.append((event["type"], event["object"]["metadata"]["name"]))

    task = asyncio.create_task(watch())
    try:
        for _ in range(100):
            if events:
                break
            await asyncio.sleep(0.02)
        # b starts matching: ADDED; a stops matching: DELETED (as the watch cache sends)
        await api.patch(
            "/api/v1/namespaces/ns/pods/b",
            json={"metadata": {"labels": {"pool": "x"}}},
            headers=MERGE,
        )
        await api.patch(
            "/api/v1/namespaces/ns/pods/a",
            json={"metadata": {"labels": {"pool": "z"}}},
            headers=MERGE,
        )
        for _ in range(100):
            if len(events) >= 3:
                break
            await asyncio.sleep(0.02)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert events == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]


# --- deletion and garbage collection ------------------------------------------------------


async def test_pod_delete_is_graceful_until_the_kubelet_finishes(api: BoxKube) -> None:
    await create(api, "/api/v1/namespaces/ns/pods", pod("a"))
    resp = await api.delete("/api/v1/namespaces/ns/pods/a")
    assert resp.status == 200
    [live] = objects_of(api, "v1/pods")
    assert live["metadata"]["deletionTimestamp"]
    assert live["metadata"]["deletionGracePeriodSeconds"] == 7
    resp = await api.delete("/api/v1/namespaces/ns/pods/a?gracePeriodSeconds=0")
    assert resp.status == 200
    assert objects_of(api, "v1/pods") == []
    resp = await api.delete("/api/v1/namespaces/ns/pods/a")
    assert resp.status == 404


async def test_owner_deleted_its_pods_terminate_and_other_children_go(api: BoxKube) -> None:
    owner = await create(
        api,
        "/apis/apps/v1/namespaces/ns/deployments",
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}},
    )
    ref = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "d",
            "uid": owner["metadata"]["uid"],
        }
    ]
    await create(api, "/api/v1/namespaces/ns/pods", pod("p", ownerReferences=ref))
    await create(
        api,
        "/api/v1/namespaces/ns/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "ownerReferences": ref}},
    )
    assert (await api.delete("/apis/apps/v1/namespaces/ns/deployments/d")).status == 200
    assert objects_of(api, "v1/secrets") == []
    [terminating] = objects_of(api, "v1/pods")
    assert terminating["metadata"]["deletionTimestamp"]


async def test_status_subresource(api: BoxKube) -> None:
    created = await create(
        api, "/api/v1/namespaces/ns/pods", {**pod("a"), "status": {"phase": "X"}}
    )
    assert "status" not in created  # dropped on create
    await api.patch(
        "/api/v1/namespaces/ns/pods/a",
        json={"metadata": {"labels": {"k": "v"}}, "status": {"phase": "Running"}},
        headers=MERGE,
    )
    [live] = objects_of(api, "v1/pods")
    assert live["metadata"]["labels"] == {"k": "v"}
    assert "status" not in live  # the object's PATCH ignores status
    await api.patch(
        "/api/v1/namespaces/ns/pods/a/status",
        json={"metadata": {"labels": {"k": "w"}}, "status": {"phase": "Running"}},
        headers=MERGE,
    )
    [live] = objects_of(api, "v1/pods")
    assert live["status"] == {"phase": "Running"}
    assert live["metadata"]["labels"] == {"k": "v"}  # /status changes only status


@pytest.mark.skipif(not HELM.is_file(), reason=f"no helm at {HELM}: scripts/get_helm.sh")
async def test_an_applied_crd_serves_its_kind_with_defaults(api: BoxKube) -> None:
    [crd] = [d for d in helm_template("t", "ns") if d["kind"] == "CustomResourceDefinition"]
    await create(api, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    pool = {
        "apiVersion": "preheat.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "p"},
        "spec": {"model": {"name": "m"}, "replicas": {"max": 2}},
    }
    made = await create(api, "/apis/preheat.dev/v1alpha1/namespaces/ns/inferencepools", pool)
    assert made["spec"]["replicas"]["min"] == 1  # the schema's default
    assert made["spec"]["replicas"]["warmStandby"] == 0
    resp = await api.get("/apis/preheat.dev/v1alpha1")
    assert resp.status == 200
    kinds = {r["name"]: r for r in (await resp.json())["resources"]}
    assert kinds["inferencepools"]["kind"] == "InferencePool"


# --- the Deployment controller ------------------------------------------------------------


def ranked(cost: int, *, ready: bool = True, uid: int = 1, restarts: int = 0) -> dict[str, Any]:
    return {
        "metadata": {"uid": f"uid-{uid}", "annotations": {DELETION_COST: str(cost)}},
        "spec": {"nodeName": "box"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": str(ready)}],
            "containerStatuses": [{"restartCount": restarts}],
        },
    }


def test_scale_down_ranking_follows_the_replicaset_controller() -> None:
    def first(*pods: dict[str, Any]) -> int:
        return sorted(range(len(pods)), key=lambda i: victim_rank(pods[i]))[0]

    assert first(ranked(5), ranked(-3)) == 1  # lowest pod-deletion-cost first
    assert first(ranked(-3), ranked(5, ready=False)) == 1  # not ready before any cost
    assert first(ranked(0, uid=1), ranked(0, uid=2)) == 1  # then the newest
    assert first(ranked(0, uid=2), ranked(0, uid=1, restarts=3)) == 1  # more restarts first
    unscheduled = ranked(9)
    unscheduled["spec"] = {}
    assert first(ranked(-9), unscheduled) == 1


async def test_rolling_update_surges_one_and_keeps_all_available(api: BoxKube) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "d"}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "i:1"}]},
            },
        },
    }
    await create(api, "/apis/apps/v1/namespaces/ns/deployments", deployment)
    controller = DeploymentController(api, {})

    async def make_ready() -> None:
        for p in objects_of(api, "v1/pods"):
            await api.patch(
                f"/api/v1/namespaces/ns/pods/{p['metadata']['name']}/status",
                json={"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                headers=MERGE,
            )

    await controller.reconcile()
    first = sorted(p["metadata"]["name"] for p in objects_of(api, "v1/pods"))
    assert len(first) == 2
    await make_ready()
    await api.patch(
        "/apis/apps/v1/namespaces/ns/deployments/d",
        json={"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i:2"}]}}}},
        headers=MERGE,
    )
    await controller.reconcile()
    live = [p for p in objects_of(api, "v1/pods") if not p["metadata"].get("deletionTimestamp")]
    assert len(live) == 3, "one surge pod, no old pod removed before it is ready"
    await controller.reconcile()
    live = [p for p in objects_of(api, "v1/pods") if not p["metadata"].get("deletionTimestamp")]
    assert len(live) == 3, "the new pod is not ready: nothing more happens"
    for _ in range(10):  # each step keeps 2 ready (maxUnavailable 0), at most 3 (maxSurge 1)
        await make_ready()
        await controller.reconcile()
        live = [p for p in objects_of(api, "v1/pods") if not p["metadata"].get("deletionTimestamp")]
        ready = [p for p in live if p.get("status", {}).get("conditions")]
        assert len(live) <= 3
        assert len(ready) >= 2
        images = sorted(p["spec"]["containers"][0]["image"] for p in live)
        if images == ["i:2", "i:2"]:
            break
    assert images == ["i:2", "i:2"]
    assert not set(first) & {p["metadata"]["name"] for p in live}


# --- images ---------------------------------------------------------------------------------


@pytest.mark.skipif(not HELM.is_file(), reason=f"no helm at {HELM}: scripts/get_helm.sh")
def test_every_image_the_install_runs_is_a_dockerfile_here() -> None:
    images = {BuildOptions().worker_image}
    for doc in helm_template("t", "ns"):
        spec = ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}
        images.update(c["image"] for c in spec.get("containers") or [])
    assert {repository(i) for i in images} == set(DOCKERFILES)
    for image in images:
        assert image_for(image).entrypoint, f"{image}: no ENTRYPOINT"


@pytest.mark.parametrize("name", sorted(set(DOCKERFILES.values())))
def test_dockerfile_entrypoints_are_preheat_commands(name: str) -> None:
    image = read_dockerfile(ROOT / name)
    argv = [*image.entrypoint, *image.cmd]
    assert argv[0] == "preheat", f"{name}: {shlex.join(argv)}"
    assert (ROOT / ".venv" / "bin" / "preheat").exists()
    if len(argv) > 1 and not argv[1].startswith("-"):  # ENTRYPOINT + CMD parse as the CLI does
        parser, _ = build_parser(argv[1])
        parser.parse_args(argv[1:] + (["--model", "m"] if argv[1] == "worker" else []))
    assert image.env.get("PYTHONUNBUFFERED") == "1"


async def test_a_pod_the_node_does_not_match_stays_pending_unschedulable(api: BoxKube) -> None:
    gpu = pod("gpu")
    gpu["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    await create(api, "/api/v1/namespaces/ns/pods", gpu)
    await create(api, "/api/v1/namespaces/ns/pods", pod("cpu"))
    await DeploymentController(api, {"kubernetes.io/hostname": "box"}).reconcile()
    pods = {p["metadata"]["name"]: p for p in objects_of(api, "v1/pods")}
    assert pods["cpu"]["spec"]["nodeName"] == "box"
    assert "nodeName" not in pods["gpu"]["spec"]
    [scheduled] = pods["gpu"]["status"]["conditions"]
    assert (scheduled["type"], scheduled["status"], scheduled["reason"]) == (
        "PodScheduled",
        "False",
        "Unschedulable",
    )
    [event] = objects_of(api, "v1/events")
    assert event["reason"] == "FailedScheduling"
    assert event["involvedObject"]["name"] == "gpu"


# --- RBAC -----------------------------------------------------------------------------------


def rbac(kind: str, rules: list[dict[str, Any]], namespace: str = "") -> list[dict[str, Any]]:
    role_meta: dict[str, Any] = {"name": "r", **({"namespace": namespace} if namespace else {})}
    binding = "RoleBinding" if kind == "Role" else "ClusterRoleBinding"
    return [
        {"kind": kind, "metadata": role_meta, "rules": rules},
        {
            "kind": binding,
            "metadata": dict(role_meta),
            "roleRef": {"kind": kind, "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "sys"}],
        },
    ]


def test_rbac_grants_what_the_bound_rules_say() -> None:
    from box_apiserver import authorized

    objects = rbac(
        "ClusterRole",
        [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {
                "apiGroups": ["preheat.dev"],
                "resources": ["inferencepools/status"],
                "verbs": ["patch"],
            },
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "verbs": ["get"],
                "resourceNames": ["s1"],
            },
        ],
    )
    sa = ("sys", "sa")
    assert authorized(objects, sa, "watch", "", "pods", "any", "")
    assert not authorized(objects, sa, "patch", "", "pods", "any", "p")
    assert not authorized(objects, ("sys", "other"), "get", "", "pods", "any", "p")
    assert authorized(objects, sa, "patch", "preheat.dev", "inferencepools/status", "ns", "p")
    assert not authorized(objects, sa, "patch", "preheat.dev", "inferencepools", "ns", "p")
    assert authorized(objects, sa, "get", "", "secrets", "ns", "s1")
    assert not authorized(objects, sa, "get", "", "secrets", "ns", "s2")
    namespaced = rbac("Role", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], "team")
    assert authorized(namespaced, sa, "delete", "apps", "deployments", "team", "d")
    assert not authorized(namespaced, sa, "delete", "apps", "deployments", "other", "d")


async def test_a_pod_token_is_refused_what_its_role_does_not_grant(api: BoxKube) -> None:
    for obj in rbac("ClusterRole", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]):
        group = "/apis/rbac.authorization.k8s.io/v1"
        plural = obj["kind"].lower() + "s"
        await create(
            api, f"{group}/{plural}", {"apiVersion": "rbac.authorization.k8s.io/v1", **obj}
        )
    token = {"Authorization": "Bearer box:sys:sa"}
    assert (await api.get("/api/v1/namespaces/ns/pods", headers=token)).status == 200
    resp = await api.get("/api/v1/namespaces/ns/secrets", headers=token)
    assert resp.status == 403
    assert (await resp.json())["reason"] == "Forbidden"
    assert api.denied == ["sys:sa list /secrets ns=ns name="]
    assert (await api.get("/api/v1/namespaces/ns/secrets")).status == 200  # the tests: admin


async def test_watch_true_as_go_parses_it(api: BoxKube) -> None:
    """kubernetes_asyncio sends ?watch=True; the API server's ParseBool takes it."""
    await create(api, "/api/v1/namespaces/ns/pods", pod("a"))
    resp = await api.get("/api/v1/namespaces/ns/pods?watch=True", timeout=None)
    line = await asyncio.wait_for(resp.content.readline(), 5)
    import json

    event = json.loads(line)
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "a")
    resp.close()


def test_a_cluster_that_fails_to_start_leaves_nothing(
    box_ready: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import box_cluster

    def no_openssl(into: Any, api_ip: str) -> Any:
        raise RuntimeError("openssl failed")

    monkeypatch.setattr(box_cluster, "make_certs", no_openssl)
    cluster = box_cluster.Cluster()
    with pytest.raises(RuntimeError, match="openssl failed"):
        cluster.start()
    assert not cluster.thread.is_alive()
    assert not cluster.root.exists()
