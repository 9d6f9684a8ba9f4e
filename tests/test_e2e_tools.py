"""``make e2e`` finds helm where ``make helm`` put it (.cache/tools), not only on PATH: both
the pytest wrapper (``e2e/test_e2e_kind.py``, which decides whether to skip) and the script
it runs (``e2e/run.sh``)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def _e2e_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("e2e_kind", REPO / "e2e" / "test_e2e_kind.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tool(folder: Path, name: str, code: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\nexit {code}\n")
    path.chmod(0o755)


def _fake_bin(tmp_path: Path) -> Path:
    """docker (no running engine), kind and kubectl; no helm."""
    bin_dir = tmp_path / "bin"
    _tool(bin_dir, "docker", code=1)
    _tool(bin_dir, "kind")
    _tool(bin_dir, "kubectl")
    return bin_dir


def test_the_wrapper_finds_helm_in_the_tools_folder(tmp_path: Path) -> None:
    e2e = _e2e_module()
    bin_dir = _fake_bin(tmp_path)
    tools = tmp_path / "tools"
    assert "helm" in e2e.missing_reason(tools, str(bin_dir))  # nowhere: named
    _tool(tools, "helm")
    reason = e2e.missing_reason(tools, str(bin_dir))
    assert "helm" not in reason
    assert "docker info" in reason  # the next thing it checks: the fake docker has no engine


def test_run_sh_finds_helm_in_the_tools_folder(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "e2e").mkdir(parents=True)
    shutil.copy(REPO / "e2e" / "run.sh", root / "e2e" / "run.sh")
    _tool(root / ".cache" / "tools", "helm")
    bin_dir = _fake_bin(tmp_path)
    system = ":".join(p for p in ("/usr/bin", "/bin") if Path(p).is_dir())
    proc = subprocess.run(
        ["bash", str(root / "e2e" / "run.sh")],
        env={"PATH": f"{bin_dir}:{system}", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "missing helm" not in proc.stderr
    assert "docker has no running engine" in proc.stderr
