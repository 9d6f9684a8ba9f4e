"""The chart hands the workers' cache token to the operator and the routers (one Secret in
the release namespace, mounted read-only, named by a flag), and nothing by default."""

from __future__ import annotations

from typing import Any

from test_chart_helm import needs_helm, render


def _spec(docs: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    (dep,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith(suffix)
    ]
    spec: dict[str, Any] = dep["spec"]["template"]["spec"]
    return spec


@needs_helm
def test_the_cache_token_secret_reaches_the_operator_and_the_routers() -> None:
    docs = render(["--set", "workerCacheToken.secretName=wc", "--set", "workerCacheToken.key=k"])
    for suffix, path in (
        ("-operator", "/etc/preheat-cache-token/k"),
        ("-router", "/etc/preheat/cache-token/k"),
    ):
        spec = _spec(docs, suffix)
        (c,) = spec["containers"]
        assert f"--worker-cache-token-file={path}" in c["args"], suffix
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["cache-token"]["readOnly"] is True
        assert path.startswith(mounts["cache-token"]["mountPath"] + "/")
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["cache-token"]["secret"] == {"secretName": "wc"}


@needs_helm
def test_no_cache_token_by_default() -> None:
    docs = render([])
    for suffix in ("-operator", "-router"):
        spec = _spec(docs, suffix)
        (c,) = spec["containers"]
        assert not [a for a in c["args"] if "cache-token" in a]
        assert "cache-token" not in {v["name"] for v in spec["volumes"]}
