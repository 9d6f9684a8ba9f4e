"""The router with no --discovery: InferencePools and their worker pods from the Kubernetes
API (the operator tests' emulated API server), requests routed by model to sim workers."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from frontendkit import eventually, workers

from preheat.core.manifests import LABEL_NAME, LABEL_POOL, LABEL_ROLE, WORKER_NAME
from preheat.router.app import RouterConfig, RouterServer
from preheat.router.pools.kubernetes import KubernetesPools

pytest.importorskip("kubernetes_asyncio")
sys.path.insert(0, str(Path(__file__).parents[2] / "operator"))  # the emulator's kit
import kmock
from kmockkit import PreheatKube, declare_resources, write_kubeconfig

NS = "serving"


@pytest.fixture
async def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[PreheatKube]:
    async with PreheatKube() as server, kmock.Server(server):
        declare_resources(server)
        config = write_kubeconfig(tmp_path / "kubeconfig", str(server.url), NS)
        monkeypatch.setenv("KUBECONFIG", str(config))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        yield server


def pool(name: str, model: str) -> dict[str, Any]:
    return {
        "apiVersion": "preheat.dev/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"model": {"name": model}, "replicas": {"min": 1, "max": 1}},
    }


def pod(name: str, pool: str, address: str) -> dict[str, Any]:
    ip, port = address.rsplit(":", 1)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {LABEL_NAME: WORKER_NAME, LABEL_POOL: pool, LABEL_ROLE: "active"},
        },
        "spec": {
            "containers": [
                {"name": "worker", "ports": [{"name": "grpc", "containerPort": int(port)}]}
            ]
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


async def test_requests_reach_the_pool_of_their_model(kube: PreheatKube) -> None:
    specs = [
        {"id": "chat-w", "engine": {"model": "m-chat"}},
        {"id": "code-w", "engine": {"model": "m-code"}},
    ]
    async with workers(specs) as ws:
        for p, model, w in (("chat", "m-chat", ws[0]), ("code", "m-code", ws[1])):
            assert (
                await kube.post(
                    f"/apis/preheat.dev/v1alpha1/namespaces/{NS}/inferencepools",
                    json=pool(p, model),
                )
            ).status in (200, 201)
            assert (
                await kube.post(
                    f"/api/v1/namespaces/{NS}/pods", json=pod(w.id, p, w.endpoint.address)
                )
            ).status in (200, 201)
        server = RouterServer(
            None,
            RouterConfig(refresh_interval_s=0.1),
            pool_source=KubernetesPools((NS,)),
        )
        ports = await server.start()
        try:
            await server.wait_ready(1, timeout_s=10)
            url = f"http://127.0.0.1:{ports.http}"
            async with aiohttp.ClientSession() as http:
                models = await (await http.get(url + "/v1/models")).json()
                assert [m["id"] for m in models["data"]] == ["m-chat", "m-code"]
                for model, worker in (("m-chat", "chat-w"), ("m-code", "code-w")):
                    resp = await http.post(
                        url + "/v1/completions",
                        json={"model": model, "prompt": "hi", "max_tokens": 2},
                    )
                    assert resp.status == 200, await resp.text()
                    assert resp.headers["X-Preheat-Worker"] == worker
                resp = await kube.delete(
                    f"/apis/preheat.dev/v1alpha1/namespaces/{NS}/inferencepools/code"
                )
                assert resp.status == 200
                await eventually(lambda: server.models() == ["m-chat"], 10)
                resp = await http.post(
                    url + "/v1/completions", json={"model": "m-code", "prompt": "hi"}
                )
                assert resp.status == 404
                assert (await resp.json())["error"]["code"] == "model_not_found"
        finally:
            await server.stop()
