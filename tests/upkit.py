"""A `preheat up` run as the live tests outside tests/local watch it (tests/tracing,
tests/dashboards): its state file and a bounded wait that shows the run's log on failure.
Importable from every test folder (tests/ is on sys.path through its conftest.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def up_state(run: Path) -> dict[str, Any]:
    """``RUN/up.json`` (pool, router addresses, worker counts); {} until it is written."""
    try:
        data: dict[str, Any] = json.loads((run / "up.json").read_text())
        return data
    except (OSError, ValueError):
        return {}


def wait_for(pred: Callable[[], bool], timeout_s: float, what: str, log: Path) -> None:
    """Polls ``pred`` until true; fails after ``timeout_s`` with the tail of ``log``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise AssertionError(f"timed out waiting for {what}\n{tail}")
