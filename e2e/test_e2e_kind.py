"""End-to-end on a kind cluster (``e2e/run.sh``); skipped with the reason where it cannot run.

Run: ``.venv/bin/pytest e2e -q`` (not part of ``tests/``: it needs Docker with a running
engine, kind, kubectl and helm, and takes minutes).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("run.sh")
TOOLS = ("docker", "kind", "kubectl", "helm")


def missing_reason() -> str | None:
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        return f"not on PATH: {', '.join(absent)}"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False)
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
