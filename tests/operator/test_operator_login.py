"""kopf's login in a pod: the API server is where the kubelet's env says, not kopf's fixed
``https://kubernetes.default.svc`` (which needs cluster DNS and port 443)."""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from preheat.operator import handlers
from preheat.operator.kube import in_cluster_server


def test_in_cluster_server_from_the_env() -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    assert in_cluster_server(env) == "https://10.0.0.1:6443"
    v6 = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert in_cluster_server(v6) == "https://[fd00::1]:443"
    assert in_cluster_server({}) == ""
    assert in_cluster_server({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == ""


def test_login_uses_the_service_env(monkeypatch: pytest.MonkeyPatch) -> None:
    token = kopf.ConnectionInfo(server="https://kubernetes.default.svc", token="t")

    def service_account(**_: Any) -> kopf.ConnectionInfo:
        return token

    monkeypatch.setattr(kopf, "login_with_service_account", service_account)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.9.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "41234")
    info = handlers.login(settings=kopf.OperatorSettings())
    assert info is not None
    assert info.server == "https://127.9.0.1:41234"
    assert info.token == "t"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    info = handlers.login(settings=kopf.OperatorSettings())
    assert info is not None
    assert info.server == "https://kubernetes.default.svc"
