"""The chart wires the router's credentials: a Secret per credential, mounted read-only,
named by a flag; nothing when the values leave them empty (the default: open)."""

from __future__ import annotations

from typing import Any

from test_chart_helm import needs_helm, render


def _router(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (dep,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-router")
    ]
    spec: dict[str, Any] = dep["spec"]["template"]["spec"]
    return spec


@needs_helm
def test_router_credentials_come_from_secrets_mounted_as_files() -> None:
    spec = _router(
        render(
            [
                "--set",
                "router.auth.apiKeys.secretName=keys",
                "--set",
                "router.auth.pickToken.secretName=gw",
                "--set",
                "router.auth.pickToken.key=t",
                "--set",
                "router.auth.tenantHeader=x-tenant",
            ]
        )
    )
    (c,) = spec["containers"]
    assert "--api-keys-file=/etc/preheat/api-keys/api-keys" in c["args"]
    assert "--pick-token-file=/etc/preheat/pick-token/t" in c["args"]
    assert "--tenant-header=x-tenant" in c["args"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["api-keys"]["readOnly"] is True
    assert mounts["pick-token"]["mountPath"] == "/etc/preheat/pick-token"
    secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert secrets == {"api-keys": "keys", "pick-token": "gw"}


@needs_helm
def test_router_is_open_by_default() -> None:
    spec = _router(render([]))
    (c,) = spec["containers"]
    assert not [a for a in c["args"] if "file=" in a or "tenant" in a]
    assert not [v for v in spec["volumes"] if "secret" in v]
