"""The chart's router: the args it renders are accepted by ``preheat router`` and run (no
--discovery: InferencePools from the API in the operator's namespaces); its RBAC is what
the router calls, read-only."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from preheat.cli import build_parser
from preheat.router.main import build_config, build_sources, parse_namespaces
from preheat.router.pools.kubernetes import KubernetesPools

sys.path.insert(0, str(Path(__file__).parents[1] / "operator"))  # chart + emulator kits
import kmock
from kmockkit import PreheatKube, declare_resources, write_kubeconfig
from test_chart_helm import needs_helm, render


def _router(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (dep,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-router")
    ]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return dict(c)


def _rules(docs: list[dict[str, Any]]) -> dict[tuple[str, str], set[tuple[str, str, str]]]:
    """(kind, namespace) -> {(apiGroup, resource, verb)} of the router's roles."""
    out: dict[tuple[str, str], set[tuple[str, str, str]]] = {}
    for d in docs:
        if d["kind"] in ("ClusterRole", "Role") and d["metadata"]["name"].endswith("-router"):
            key = (d["kind"], d["metadata"].get("namespace", ""))
            out[key] = {
                (g, r, v)
                for rule in d["rules"]
                for g in rule["apiGroups"]
                for r in rule["resources"]
                for v in rule["verbs"]
            }
    return out


# list + watch only: the router never reads one object by name (the cluster tier checks
# every grant against the calls: tests/cluster/test_cluster_box.py)
READ = {("preheat.dev", "inferencepools", v) for v in ("list", "watch")} | {
    ("", "pods", v) for v in ("list", "watch")
}


@needs_helm
@pytest.mark.parametrize(
    ("values", "namespaces"), [([], ()), (["--set", "operator.watchNamespaces={a,b}"], ("a", "b"))]
)
def test_the_rendered_args_parse_and_discover_pools(
    values: list[str], namespaces: tuple[str, ...]
) -> None:
    docs = render(values)
    c = _router(docs)
    assert not [a for a in c["args"] if a.startswith("--discovery")]
    assert not [e for e in c.get("env", []) if e["name"] == "PREHEAT_DISCOVERY"]
    parser, _ = build_parser("router")
    args = parser.parse_args(c["args"])
    build_config(args)
    discovery, pools = build_sources(
        args.discovery, args.pool, args.model, parse_namespaces(args.namespaces)
    )
    assert discovery is None
    assert isinstance(pools, KubernetesPools)
    assert pools.namespaces == namespaces
    rules = _rules(docs)
    if namespaces:
        assert rules.pop(("ClusterRole", "")) == {("", "nodes", "get")}
        assert rules == {("Role", ns): READ for ns in namespaces}
    else:
        assert rules == {("ClusterRole", ""): READ | {("", "nodes", "get")}}


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[tuple[PreheatKube, Path]]:
    async with PreheatKube() as server, kmock.Server(server):
        declare_resources(server)
        yield server, write_kubeconfig(tmp_path / "kubeconfig", str(server.url), "serving")


@needs_helm
async def test_the_rendered_router_runs_and_serves_the_pools_models(
    kube: tuple[PreheatKube, Path],
) -> None:
    server, kubeconfig = kube
    for name, model in (("chat", "m-chat"), ("code", "m-code")):
        resp = await server.post(
            "/apis/preheat.dev/v1alpha1/namespaces/serving/inferencepools",
            json={
                "metadata": {"name": name, "namespace": "serving"},
                "spec": {"model": {"name": model}, "replicas": {"min": 0, "max": 1}},
            },
        )
        assert resp.status in (200, 201)
    args = _router(render([]))["args"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(KUBECONFIG=str(kubeconfig), PREHEAT_LOG_FORMAT="kv")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "preheat.cli",
        *args,
        "--host=127.0.0.1",  # loopback and ephemeral ports instead of the pod's
        "--grpc-port=0",
        "--http-port=0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        port = json.loads(line)["http_port"]
        async with aiohttp.ClientSession() as http, asyncio.timeout(20):
            while True:
                ready = await http.get(f"http://127.0.0.1:{port}/ready")
                if ready.status == 200:
                    break
                await asyncio.sleep(0.1)
            models = await (await http.get(f"http://127.0.0.1:{port}/v1/models")).json()
            assert [m["id"] for m in models["data"]] == ["m-chat", "m-code"]
    finally:
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 30) == 0
