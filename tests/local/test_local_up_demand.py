"""`preheat up` end to end (issue 12, item B): requests with a TTFT deadline that one worker
cannot keep up with go unserved (the worker aborts them at their deadline: 504 at the
router); the served latency stays far under the pool's objective, and yet the pool grows,
because the autoscaler reads the router's refusals (``preheat_router_refused_total``, here
with reason ``deadline``) against its arrivals as demand. Before, it stayed at one worker.

The sim runs 10x slower than an H100, so 3 requests/s of 2k-token prompts overload one
worker about 1.7x (as in test_local_up.py) while the CPU work stays small.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

from upkit import up_state

from preheat.load.replay import LoadOptions, replay
from preheat.report.record import REQUESTS_FILE, RunMeta, RunWriter, count_outcomes, read_run
from preheat.workload.traces import TraceRequest

POOL = """\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {name: refusing}
spec:
  model: {name: sim-8b}
  engine:
    kind: sim
    args: {timeScale: 10, loadTime: 300ms, warmupTime: 200ms}
  replicas: {min: 1, max: 3, warmStandby: 0}
  autoscaling:
    objectives:
      - {signal: ttft, percentile: 95, targetMs: 30000}
    window: 5s
    scaleUp: {stabilization: 0s, cooldown: 2s, maxStep: 2}
    scaleDown: {stabilization: 120s, cooldown: 2s, maxStep: 1}
"""
RATE = 3.0
LOAD_S = 20.0
DEADLINE_MS = 4000


def _requests() -> list[TraceRequest]:
    return [
        TraceRequest(
            arrival_s=i / RATE,
            input_tokens=2048,
            output_tokens=8,
            session_id=f"s{i}",
            prefix_block_ids=(20_000 + i,),
            index=i,
        )
        for i in range(int(RATE * LOAD_S))
    ]


async def _ready(run: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if up_state(run).get("ready") is True:
            return
        await asyncio.sleep(0.2)
    log = (run / "up.log").read_text()[-3000:] if (run / "up.log").exists() else ""
    raise AssertionError(f"the pool was not ready in {timeout_s:g} s\n{log}")


def _start_up(run: Path, pool: Path) -> subprocess.Popen[bytes]:
    run.mkdir()
    with (run / "up.log").open("wb") as log:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "preheat.cli", "up", "-f", str(pool), "--out", str(run)),
                *("--no-ui", "--interval-s", "1", "--drain-grace-s", "5"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


async def _run(tmp: Path) -> tuple[Path, Path, int]:
    pool = tmp / "pool.yaml"
    pool.write_text(POOL)
    run, load_dir = tmp / "run", tmp / "load"
    up = _start_up(run, pool)
    try:
        await _ready(run, 60)
        target = up_state(run)["router"]["grpc"]
        writer = RunWriter(load_dir, RunMeta(name="load"), parts=(REQUESTS_FILE,))
        options = LoadOptions(request_timeout_s=40.0, drain_s=5.0, ttft_deadline_ms=DEADLINE_MS)
        await asyncio.wait_for(replay(target, _requests(), options, writer), 120)
        writer.close()
        max_active = int(up_state(run).get("counts", {}).get("active", 0))
        up.send_signal(signal.SIGINT)
        up.wait(timeout=40)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    return run, load_dir, max_active


def test_a_pool_whose_router_refuses_requests_grows(tmp_path: Path) -> None:
    run, load_dir, active_after = asyncio.run(_run(tmp_path))
    outcomes = count_outcomes(read_run(load_dir).requests)
    # requests the pool did not serve in time (the worker aborts them at the deadline)
    assert outcomes["error"] > 0, outcomes
    events = read_run(run).events
    ups = [e for e in events if e.kind == "scale_up"]
    log = "\n".join(f"{e.t_s:.1f} {e.kind} {e.reason}" for e in events)
    assert ups, f"the pool never grew although its router refused {outcomes}:\n{log}"
    # What grows it is the demand the router saw, refused requests included: either the
    # refusals themselves (A / (A - R)) or the capacity estimate, which sizes the pool from
    # the router's arrival rate (refused arrivals counted); which of the two asks first
    # depends on timing (the capacity estimate came after this test was written).
    first = ups[0].reason
    assert first.startswith("router refused ") or "capacity: " in first, log
    if first.startswith("router refused "):
        assert "needs " in first
        assert "ms < 30000 ms" in first  # the served latency alone asked for nothing
    assert active_after >= 2
