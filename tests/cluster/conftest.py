"""The cluster tier's plumbing: the emulator's helpers from tests/operator, and the check
that this machine can run a cluster in a box (root for mount namespaces, cc, openssl,
helm); where it cannot, the tier skips and says why, unless ``CI=true``: then it fails."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from box_cluster import HELM


def missing_tools() -> list[str]:
    missing = [t for t in ("cc", "openssl", "unshare", "mount") if shutil.which(t) is None]
    if not HELM.is_file():
        missing.append(f"helm ({HELM}: scripts/get_helm.sh .cache/tools)")
    if os.geteuid() != 0:
        missing.append("root (each pod's mount namespace)")
    return missing


@pytest.fixture(scope="session")
def box_ready() -> None:
    missing = missing_tools()
    if not missing:
        return
    why = f"the cluster in a box needs: {', '.join(missing)}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why}; CI=true, so this fails instead of skipping", pytrace=False)
    pytest.skip(why)
