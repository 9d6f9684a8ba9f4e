"""KubernetesDiscovery: the pure pod mapping and folding, then the watch loop against a fake
API server (aiohttp on loopback: pod list + watch stream, node get)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from endpointkit import eventually, running_store, sim_workers

from preheat.router.endpoints import DiscoveredEndpoint
from preheat.router.endpoints.kubernetes import KubernetesDiscovery, PodSet, pod_endpoint

pytest.importorskip("kubernetes_asyncio")


def make_pod(
    name: str,
    *,
    ip: str = "10.0.0.1",
    node: str = "n1",
    ready: bool = True,
    role: str = "active",
    grpc_port: int | None = None,
    http_port: int | None = None,
    deleting: bool = False,
    version: str = "1",
) -> dict[str, Any]:
    ports = []
    if grpc_port:
        ports.append({"name": "grpc", "containerPort": grpc_port})
    if http_port:
        ports.append({"name": "http", "containerPort": http_port})
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "labels": {"app": "pool", "preheat.dev/role": role},
        "resourceVersion": version,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "worker", "ports": ports}]},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


NODE = {"topology.kubernetes.io/zone": "eu-a", "topology.kubernetes.io/region": "eu"}


@pytest.mark.parametrize(
    ("pod", "want"),
    [
        (
            make_pod("p"),
            DiscoveredEndpoint("10.0.0.1:50051", "p", "eu-a", "eu", True, "active"),
        ),
        (
            make_pod("p", grpc_port=7000, http_port=8000),
            DiscoveredEndpoint(
                "10.0.0.1:7000", "p", "eu-a", "eu", True, "active", "http://10.0.0.1:8000/metrics"
            ),
        ),
        (
            make_pod("p", ready=False, role="standby"),
            DiscoveredEndpoint("10.0.0.1:50051", "p", "eu-a", "eu", False, "standby"),
        ),
        (
            make_pod("p", deleting=True),
            DiscoveredEndpoint("10.0.0.1:50051", "p", "eu-a", "eu", False, "active"),
        ),
        (
            make_pod("p", ip="fd00::1"),
            DiscoveredEndpoint("[fd00::1]:50051", "p", "eu-a", "eu", True, "active"),
        ),
        (make_pod("p", ip=""), None),
    ],
)
def test_pod_endpoint(pod: dict[str, Any], want: DiscoveredEndpoint | None) -> None:
    assert pod_endpoint(pod, NODE, grpc_port=50051) == want


def test_pod_without_node_labels_has_no_topology() -> None:
    ep = pod_endpoint(make_pod("p"), None, grpc_port=1, metrics_port=9)
    assert ep is not None
    assert (ep.zone, ep.region, ep.metrics_url) == ("", "", "http://10.0.0.1:9/metrics")


def test_podset_folding() -> None:
    s = PodSet()
    s.reset([make_pod("a"), make_pod("b", node="n2")])
    assert s.node_names() == {"n1", "n2"}
    assert s.apply("MODIFIED", make_pod("b", node="n2", role="standby"))
    assert not s.apply("DELETED", make_pod("zz"))
    assert s.apply("DELETED", make_pod("a"))
    assert not s.apply("BOOKMARK", {"metadata": {"resourceVersion": "9"}})
    assert s.apply("ADDED", make_pod("c"))
    eps = s.endpoints({"n1": NODE}, grpc_port=1)
    assert [(e.id, e.role, e.zone) for e in eps] == [("b", "standby", ""), ("c", "active", "eu-a")]


class FakeApi:
    """Answers list and watch of pods and get of nodes, like the API server (enough of it)."""

    def __init__(self, pods: list[dict[str, Any]], nodes: dict[str, dict[str, str]]) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.nodes = nodes
        self.node_reads: list[str] = []
        self.lists = 0
        self.events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.port = 0

    async def list_or_watch(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") in ("true", "True", "1"):
            resp = web.StreamResponse()
            resp.content_type = "application/json"
            await resp.prepare(request)
            while (ev := await self.events.get()) is not None:
                await resp.write(json.dumps(ev).encode() + b"\n")
            await resp.write_eof()
            return resp
        self.lists += 1
        return web.json_response(
            {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": "1"},
                "items": list(self.pods.values()),
            }
        )

    async def node(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.node_reads.append(name)
        if name not in self.nodes:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        return web.json_response({"metadata": {"name": name, "labels": self.nodes[name]}})

    def push(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.pods.pop(pod["metadata"]["name"], None)
        else:
            self.pods[pod["metadata"]["name"]] = pod
        self.events.put_nowait({"type": kind, "object": pod})


@contextlib.asynccontextmanager
async def fake_api(api: FakeApi) -> AsyncIterator[Any]:
    from kubernetes_asyncio.client import ApiClient, Configuration

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/pods", api.list_or_watch)
    app.router.add_get("/api/v1/nodes/{name}", api.node)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    api.port = runner.addresses[0][1]
    cfg = Configuration(host=f"http://127.0.0.1:{api.port}")
    client = ApiClient(cfg)
    try:
        yield client
    finally:
        api.events.put_nowait(None)
        await client.close()
        await runner.cleanup()


async def test_watch_loop_against_fake_api() -> None:
    api = FakeApi(
        [make_pod("p1", ip="10.0.0.1"), make_pod("p2", ip="10.0.0.2", role="standby")],
        {"n1": NODE},
    )
    async with fake_api(api) as client:
        source = KubernetesDiscovery("ns", "app=pool", api_client=client, grpc_port=9)
        seen: asyncio.Queue[tuple[DiscoveredEndpoint, ...]] = asyncio.Queue()

        async def follow() -> None:
            async for eps in source.changes():
                seen.put_nowait(eps)

        task = asyncio.create_task(follow())
        try:
            first = await asyncio.wait_for(seen.get(), 5)
            assert [(e.id, e.address, e.role, e.zone) for e in first] == [
                ("p1", "10.0.0.1:9", "active", "eu-a"),
                ("p2", "10.0.0.2:9", "standby", "eu-a"),
            ]
            api.push("MODIFIED", make_pod("p2", ip="10.0.0.2", version="2"))
            second = await asyncio.wait_for(seen.get(), 5)
            assert [e.role for e in second] == ["active", "active"]
            api.push("ADDED", make_pod("p3", ip="10.0.0.3", node="n9", version="3"))
            third = await asyncio.wait_for(seen.get(), 5)
            assert [(e.id, e.zone) for e in third][-1] == ("p3", "")  # unknown node: no zone
            api.push("DELETED", make_pod("p1", version="4"))
            fourth = await asyncio.wait_for(seen.get(), 5)
            assert [e.id for e in fourth] == ["p2", "p3"]
            assert api.node_reads.count("n1") == 1  # cached
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_store_over_kubernetes_discovery_with_sim_workers() -> None:
    async with sim_workers(2) as workers:
        pods = [
            make_pod(
                w.server.worker_id,
                ip="127.0.0.1",
                grpc_port=w.grpc_port,
                http_port=w.http_port,
            )
            for w in workers
        ]
        api = FakeApi(pods, {"n1": NODE})
        async with fake_api(api) as client:
            source = KubernetesDiscovery("ns", "app=pool", api_client=client)
            async with running_store(source, pool="pool") as store:
                await store.wait_ready(2, timeout_s=10)
                assert [(e.id, e.zone, e.region) for e in store.snapshot()] == [
                    ("w-0", "eu-a", "eu"),
                    ("w-1", "eu-a", "eu"),
                ]
                # relabelled to standby by the operator: no longer routable
                api.push(
                    "MODIFIED",
                    make_pod(
                        "w-1",
                        ip="127.0.0.1",
                        role="standby",
                        grpc_port=workers[1].grpc_port,
                        version="2",
                    ),
                )
                await eventually(lambda: [e.id for e in store.snapshot()] == ["w-0"])
                api.push("DELETED", pods[0])
                await eventually(lambda: store.snapshot() == ())
                assert [v.id for v in store.all_endpoints()] == ["w-1"]
