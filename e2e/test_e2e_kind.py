"""End-to-end on a kind cluster (``e2e/run.sh``); skipped with the reason where it cannot run.

Run: ``.venv/bin/pytest e2e -q`` (not part of ``tests/``: it needs Docker with a running
engine, kind, kubectl and helm, and takes minutes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("run.sh")
TOOLS = ("docker", "kind", "kubectl", "helm")
# helm as `make helm` (and `make test`) installs it; run.sh puts this folder first on PATH
TOOLS_DIR = Path(__file__).resolve().parents[1] / ".cache" / "tools"


def search_path(tools_dir: Path = TOOLS_DIR, path: str | None = None) -> str:
    """PATH as run.sh sees it: ``tools_dir`` first when it holds helm."""
    path = os.environ.get("PATH", "") if path is None else path
    if (tools_dir / "helm").is_file() and os.access(tools_dir / "helm", os.X_OK):
        return os.pathsep.join([str(tools_dir), path])
    return path


def missing_reason(tools_dir: Path = TOOLS_DIR, path: str | None = None) -> str | None:
    search = search_path(tools_dir, path)
    absent = [t for t in TOOLS if shutil.which(t, path=search) is None]
    if absent:
        return f"not on PATH (nor in {tools_dir}): {', '.join(absent)}"
    try:
        docker = shutil.which("docker", path=search) or "docker"
        info = subprocess.run([docker, "info"], capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"`docker info` failed: {e}"
    if info.returncode != 0:
        first = (info.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
        return f"`docker info` failed (no container engine): {first}"
    return None


def test_pool_scales_with_traffic_on_kind() -> None:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(f"e2e needs a container engine and kind: {reason}")
    result = subprocess.run(["bash", str(SCRIPT)], timeout=1500, check=False)
    assert result.returncode == 0, "e2e/run.sh failed: see its log above"
