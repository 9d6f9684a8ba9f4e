"""``preheat up`` for the live benchmarks: one pool file run in a child process on loopback
until the block ends (SIGINT, then a kill after a minute), with its router's addresses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _state(run: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((run / "up.json").read_text())
        return data
    except (OSError, ValueError):
        return {}


@contextmanager
def preheat_up(
    pool_text: str,
    folder: Path,
    name: str,
    *,
    router_args: Sequence[str] = (),
    worker_args: Sequence[str] = (),
    ready_timeout_s: float = 120.0,
) -> Iterator[dict[str, Any]]:
    """Runs ``preheat up`` on ``pool_text`` (written to FOLDER/NAME.yaml; run folder
    FOLDER/run-NAME, log FOLDER/up-NAME.log) and yields its state (``up.json``) once its
    one worker is active and it is ready: ``state["router"]`` has ``grpc``, ``http``, ``pid``."""
    folder.mkdir(parents=True, exist_ok=True)
    pool, run, log = folder / f"{name}.yaml", folder / f"run-{name}", folder / f"up-{name}.log"
    pool.write_text(pool_text)
    argv = [sys.executable, "-m", "preheat.cli", "up", "-f", str(pool), "--out", str(run),
            "--no-ui", "--router-grpc-port", "0", "--router-http-port", "0"]  # fmt: skip
    argv += [f"--router-arg={a}" for a in router_args]
    argv += [f"--worker-arg={a}" for a in worker_args]
    with log.open("wb") as out:
        up = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=os.environ)
    try:
        deadline = time.monotonic() + ready_timeout_s
        while True:
            state = _state(run)
            if (state.get("counts") or {}).get("active") == 1 and state.get("ready"):
                break
            if up.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                raise SystemExit(f"preheat up ({name}) did not get ready:\n{tail}")
            time.sleep(0.2)
        yield state
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks
