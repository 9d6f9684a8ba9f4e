"""Kubernetes credentials (``preheat.process.kubeconfig``), as the operator and the router
find them, and what each says when there are none (a traceback before, in both)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from preheat.process.kubeconfig import KubeConfigError, load


@pytest.fixture
def outside_a_pod(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    return tmp_path


async def test_each_source_tried_is_named_with_why_it_failed(
    outside_a_pod: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(
        KubeConfigError, match=r"not in a pod .*, and ~/\.kube/config: no such file$"
    ):
        await load()
    with pytest.raises(KubeConfigError, match=r"and --kubeconfig /nope: no such file$"):
        await load(kubeconfig="/nope")
    empty = outside_a_pod / "kc"
    empty.write_text("{}\n")
    monkeypatch.setenv("KUBECONFIG", str(empty))
    with pytest.raises(KubeConfigError, match=rf"and KUBECONFIG={empty}: Invalid kube-config"):
        await load()


def test_the_router_outside_a_cluster_says_so_and_exits_2(outside_a_pod: Path) -> None:
    # with no --discovery the router follows the cluster's InferencePools: with no cluster it
    # logged pool_discovery_failed with a traceback, then "Invalid kube-config file"
    proc = subprocess.run(
        [sys.executable, "-m", "preheat.cli", "router", "--grpc-port", "0", "--http-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=dict(os.environ),
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "event=discovery_failed" in proc.stderr
    assert "~/.kube/config: no such file" in proc.stderr
    assert "Traceback" not in proc.stderr
