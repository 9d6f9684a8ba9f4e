"""Suite-wide test plumbing.

``@pytest.mark.needs_shared(path, ...)``: the test reads files from ``../shared`` (the traces
and calibration beside the repository). Where one is missing the test skips, unless
``CI=true``: then it fails, so CI cannot pass by skipping what it was meant to run.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs_shared(*paths): files from ../shared the test reads; skips without them, "
        "fails instead under CI=true",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("needs_shared")
    if marker is None:
        return
    missing = [str(p) for p in marker.args if not Path(p).exists()]
    if not missing:
        return
    why = f"shared data not present: {', '.join(missing)} (../shared beside the repository)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why}; CI=true, so this fails instead of skipping", pytrace=False)
    pytest.skip(why)
