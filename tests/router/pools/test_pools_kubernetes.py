"""Kubernetes pool discovery: the pure mapping of InferencePools and worker pods (table
tests), then the list + watch loop against the operator tests' emulated API server."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from preheat.core.manifests import LABEL_NAME, LABEL_POOL, LABEL_ROLE, WORKER_NAME
from preheat.router.endpoints import DiscoveredEndpoint
from preheat.router.pools import PoolSpec
from preheat.router.pools.kubernetes import (
    ALIASES_ANNOTATION,
    KubernetesPools,
    ObjectSet,
    pool_spec,
    pool_specs,
)

pytest.importorskip("kubernetes_asyncio")
sys.path.insert(0, str(Path(__file__).parents[2] / "operator"))  # the emulator's kit
import kmock
from kmockkit import PreheatKube, declare_resources, write_kubeconfig


def make_pool(
    name: str,
    ns: str = "serving",
    *,
    model: str = "llama",
    aliases: str | None = None,
    margin: float | None = None,
    ttft: list[float] = (),  # type: ignore[assignment]
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if aliases is not None:
        meta["annotations"] = {ALIASES_ANNOTATION: aliases}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"model": {"name": model}, "replicas": {"min": 1, "max": 2}}
    if margin is not None:
        spec["routing"] = {"sessionTTL": "10m", "hotspotMarginMs": margin}
    if ttft:
        spec["autoscaling"] = {
            "objectives": [{"signal": "ttft", "percentile": 95, "targetMs": t} for t in ttft]
            + [{"signal": "queueDepth", "perReplica": 4}]
        }
    return {
        "apiVersion": "preheat.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": meta,
        "spec": spec,
    }


def make_pod(
    name: str,
    pool: str,
    ns: str = "serving",
    *,
    ip: str = "10.0.0.1",
    port: int = 50051,
    role: str = "active",
    ready: bool = True,
    worker: bool = True,
) -> dict[str, Any]:
    labels = {LABEL_POOL: pool, LABEL_ROLE: role}
    if worker:
        labels[LABEL_NAME] = WORKER_NAME
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "worker", "ports": [{"name": "grpc", "containerPort": port}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


NODES = {"n1": {"topology.kubernetes.io/zone": "z-a", "topology.kubernetes.io/region": "r"}}


@pytest.mark.parametrize(
    ("obj", "want"),
    [
        (make_pool("p"), PoolSpec(name="p", namespace="serving", model="llama")),
        (
            make_pool("p", aliases=" chat, default ,chat,llama", margin=40, ttft=[800, 400]),
            PoolSpec(
                name="p",
                namespace="serving",
                model="llama",
                aliases=("chat", "default"),
                routing={"hotspotMarginMs": 40, "defaultTtftTargetMs": 400.0},
            ),
        ),
        (make_pool("p", deleting=True), None),
        ({"metadata": {"name": "p", "namespace": "s"}, "spec": {}}, None),
    ],
)
def test_pool_spec(obj: dict[str, Any], want: PoolSpec | None) -> None:
    assert pool_spec(obj, (), NODES) == want


def test_pool_spec_maps_its_pods() -> None:
    pods = [make_pod("p-2", "p", ip="10.0.0.2", role="standby"), make_pod("p-1", "p")]
    spec = pool_spec(make_pool("p"), pods, NODES)
    assert spec is not None
    assert spec.endpoints == (
        DiscoveredEndpoint("10.0.0.1:50051", "p-1", "z-a", "r", True, "active"),
        DiscoveredEndpoint("10.0.0.2:50051", "p-2", "z-a", "r", True, "standby"),
    )


def test_object_set_folds_lists_per_namespace_and_events() -> None:
    s = ObjectSet()
    s.reset([make_pool("a", "ns1"), make_pool("b", "ns2")], None)
    s.reset([make_pool("c", "ns1")], "ns1")  # a relist of ns1 only
    assert sorted(s.objects) == [("ns1", "c"), ("ns2", "b")]
    assert s.apply("ADDED", make_pool("d", "ns2"))
    assert s.apply("DELETED", make_pool("b", "ns2"))
    assert not s.apply("DELETED", make_pool("b", "ns2"))
    assert not s.apply("BOOKMARK", {"metadata": {"resourceVersion": "9"}})
    assert sorted(s.objects) == [("ns1", "c"), ("ns2", "d")]


def test_pool_specs_group_worker_pods_by_namespace_and_pool() -> None:
    pools, pods = ObjectSet(), ObjectSet()
    pools.reset([make_pool("p", "a"), make_pool("p", "b", model="other")], None)
    pods.reset(
        [
            make_pod("w-1", "p", "a"),
            make_pod("w-2", "p", "b", ip="10.0.0.2"),
            make_pod("x-1", "p", "a", worker=False),  # not a preheat worker
            make_pod("w-3", "gone", "a"),  # its pool does not exist
        ],
        None,
    )
    specs = pool_specs(pools, pods, NODES)
    assert [(s.key, s.model, [e.id for e in s.endpoints]) for s in specs] == [
        ("a/p", "llama", ["w-1"]),
        ("b/p", "other", ["w-2"]),
    ]


@pytest.fixture
async def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[PreheatKube]:
    async with PreheatKube() as server, kmock.Server(server):
        declare_resources(server)
        config = write_kubeconfig(tmp_path / "kubeconfig", str(server.url), "serving")
        monkeypatch.setenv("KUBECONFIG", str(config))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        yield server


async def _post(server: PreheatKube, obj: dict[str, Any]) -> None:
    ns = obj["metadata"]["namespace"]
    if obj["kind"] == "Pod":
        url = f"/api/v1/namespaces/{ns}/pods"
    else:
        url = f"/apis/preheat.dev/v1alpha1/namespaces/{ns}/inferencepools"
    resp = await server.post(url, json=obj)
    assert resp.status in (200, 201), await resp.text()


async def _next(changes: AsyncIterator[tuple[PoolSpec, ...]]) -> tuple[PoolSpec, ...]:
    import asyncio

    return await asyncio.wait_for(anext(changes), 10)


async def test_the_loop_follows_pools_and_pods(kube: PreheatKube) -> None:
    await _post(kube, make_pool("chat", model="m-chat", aliases="chat"))
    await _post(kube, make_pod("chat-w-1", "chat"))
    await _post(kube, make_pool("code", "other", model="m-code"))
    source = KubernetesPools(("serving",), min_backoff_s=0.05)
    changes = source.changes()
    try:
        (chat,) = await _next(changes)  # only the watched namespace
        assert (chat.key, chat.model, chat.aliases) == ("serving/chat", "m-chat", ("chat",))
        assert [e.id for e in chat.endpoints] == ["chat-w-1"]
        assert chat.endpoints[0].routable

        await _post(kube, make_pool("code", model="m-code"))  # added
        specs = await _next(changes)
        assert [s.key for s in specs] == ["serving/chat", "serving/code"]

        await _post(kube, make_pod("code-w-1", "code", ip="10.0.0.9"))
        specs = await _next(changes)
        assert [e.address for e in specs[1].endpoints] == ["10.0.0.9:50051"]

        resp = await kube.patch(  # changed
            "/apis/preheat.dev/v1alpha1/namespaces/serving/inferencepools/chat",
            json={"spec": {"routing": {"hotspotMarginMs": 7}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert resp.status == 200
        specs = await _next(changes)
        assert specs[0].routing == {"hotspotMarginMs": 7}

        resp = await kube.delete(
            "/apis/preheat.dev/v1alpha1/namespaces/serving/inferencepools/chat"
        )
        assert resp.status == 200
        specs = await _next(changes)  # deleted
        assert [s.key for s in specs] == ["serving/code"]
    finally:
        await changes.aclose()


async def test_every_namespace_when_none_is_named(kube: PreheatKube) -> None:
    await _post(kube, make_pool("chat", model="m-chat"))
    await _post(kube, make_pool("code", "other", model="m-code"))
    changes = KubernetesPools(()).changes()
    try:
        specs = await _next(changes)
        assert [s.key for s in specs] == ["other/code", "serving/chat"]
    finally:
        await changes.aclose()
