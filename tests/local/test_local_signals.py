"""`preheat up` and signals (issue 12, E): a SIGTERM in the middle of a start burst stops
it with no child left and no worker started after it; Ctrl-C turns new requests away at
once (503 with Retry-After) while the ones in flight finish; a worker stopped by an
outside SIGTERM is a stop, not a crash, and is replaced once.

Every process binds 127.0.0.1; at most a router and five sim workers at a time. Time
limits here are hang guards, not speed assertions.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from localkit import NullView
from upkit import up_state

from preheat.api.poolfile import parse_pool
from preheat.local.runtime import LocalPool, UpOptions
from preheat.process import children
from preheat.report.record import read_run


def _pool_text(name: str, replicas: str, args: str = "loadTime: 300ms, warmupTime: 200ms") -> str:
    return f"""\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {{name: {name}}}
spec:
  model: {{name: sim-8b}}
  engine:
    kind: sim
    args: {{{args}}}
  replicas: {replicas}
"""


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _wait(pred: Any, timeout_s: float, what: str, run: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    log = (run / "up.log").read_text()[-3000:] if (run / "up.log").exists() else ""
    raise AssertionError(f"timed out waiting for {what}; up.json: {up_state(run)}\n{log}")


def _start_up(tmp: Path, text: str, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    pool = tmp / "pool.yaml"
    pool.write_text(text)
    run = tmp / "run"
    run.mkdir()
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "preheat.cli",
            "up",
            "-f",
            str(pool),
            "--out",
            str(run),
            "--no-ui",
            "--interval-s",
            "1",
            *extra,
        ],
        stdout=(run / "up.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    return up, run


def _finish(up: subprocess.Popen[bytes]) -> None:
    if up.poll() is None:
        up.kill()
        up.wait()


async def test_sigterm_in_a_start_burst_starts_nothing_more_and_leaves_no_child(
    tmp_path, monkeypatch
):
    """A machine so loaded that each start takes a while (here: 0.3 s before each spawn),
    and SIGTERM arrives while the second worker is being started: nothing is started after
    it, and every child started is gone when run() returns."""
    text = _pool_text("burst", "{min: 5, max: 5}", "loadTime: 30s")
    lp = LocalPool(
        parse_pool(yaml.safe_load(text), "burst.yaml"), UpOptions(out=tmp_path / "run"), NullView()
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, lp.stop)  # as `preheat up` does (main._serve)
    real_spawn = children.spawn
    calls: list[str] = []
    signalled = asyncio.Event()
    after_signal: list[str] = []
    pids: list[int] = []

    async def slow_spawn(name: str, *args: Any, **kwargs: Any) -> children.Child:
        calls.append(name)
        if name != "router" and len(calls) == 3:  # the router, w-1, then this one
            os.kill(os.getpid(), signal.SIGTERM)
            signalled.set()
        await asyncio.sleep(0.3)
        child = await real_spawn(name, *args, **kwargs)
        pids.append(child.pid)
        if signalled.is_set():
            after_signal.append(name)
        return child

    monkeypatch.setattr("preheat.local.runtime.spawn", slow_spawn)
    try:
        code = await asyncio.wait_for(lp.run(), 60)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
    assert signalled.is_set(), calls
    assert after_signal == []
    assert code == 0
    assert pids
    assert [p for p in pids if not _gone(p)] == []
    kinds = [e.kind for e in read_run(lp.out).events]
    assert "shutdown" in kinds


def test_sigterm_while_starting_exits_with_no_child_left(tmp_path):
    """`preheat up` on a pool of five workers slow to load, SIGTERM while they start: at
    most --max-starting (2) were started, it exits 0, and no child is left."""
    up, run = _start_up(tmp_path, _pool_text("starting", "{min: 5, max: 5}", "loadTime: 30s"))
    try:
        _wait(lambda: len(up_state(run).get("workers", {})) >= 1, 60, "a worker", run)
        time.sleep(1.0)  # a few ticks: a bounded burst starts no more
        started = len(up_state(run)["workers"])
        up.send_signal(signal.SIGTERM)
        code = up.wait(timeout=60)
    finally:
        _finish(up)
    assert code == 0
    assert started <= 2
    pids = up_state(run)["pids"]
    assert len(pids) <= 3  # the router and two workers
    assert [p for p in pids if not _gone(p)] == []


async def _stream_then_sigint(
    run: Path, up: subprocess.Popen[bytes]
) -> tuple[int, dict[str, Any], str, str]:
    http = up_state(run)["router"]["http"]
    body = {"model": "sim-8b", "prompt": "hello " * 50, "max_tokens": 60, "stream": True}
    timeout = aiohttp.ClientTimeout(total=90)
    async with (
        aiohttp.ClientSession(timeout=timeout) as s,
        s.post(f"{http}/v1/completions", json=body) as first,
    ):
        assert first.status == 200
        await first.content.readline()  # a first chunk: it is in flight
        up.send_signal(signal.SIGINT)
        # the router has been told (its /ready turns 503), the stream goes on
        for _ in range(200):
            async with s.get(f"{http}/ready") as r:
                if r.status == 503:
                    break
            await asyncio.sleep(0.05)
        async with s.post(f"{http}/v1/completions", json={**body, "stream": False}) as new:
            status = new.status
            error = await new.json()
            retry_after = new.headers.get("Retry-After", "")
        rest = (await first.content.read()).decode()
    return status, error, retry_after, rest


def test_ctrl_c_answers_new_requests_at_once_while_in_flight_ones_finish(tmp_path):
    up, run = _start_up(
        tmp_path,
        _pool_text(
            "drain", "{min: 1, max: 1}", "timeScale: 10, loadTime: 300ms, warmupTime: 200ms"
        ),
        "--drain-grace-s",
        "30",
    )
    try:
        _wait(lambda: up_state(run).get("ready") is True, 60, "the pool", run)
        status, error, retry_after, rest = asyncio.run(_stream_then_sigint(run, up))
        code = up.wait(timeout=60)
    finally:
        _finish(up)
    assert status == 503, error
    assert "shutting down" in error["error"]["message"], error
    assert retry_after
    assert int(retry_after) >= 1
    assert "[DONE]" in rest  # the stream in flight finished
    assert '"finish_reason": "length"' in rest or '"finish_reason":"length"' in rest, rest[-500:]
    assert code == 0
    assert [p for p in up_state(run)["pids"] if not _gone(p)] == []


def test_a_worker_stopped_from_outside_is_replaced_once_not_restarted(tmp_path):
    up, run = _start_up(tmp_path, _pool_text("outside", "{min: 1, max: 1}"))
    try:
        _wait(lambda: up_state(run).get("ready") is True, 60, "the pool", run)
        ((name, w),) = up_state(run)["workers"].items()
        os.kill(int(w["pid"]), signal.SIGTERM)  # not `preheat up`: someone else

        def replaced() -> bool:
            s = up_state(run)
            ws = s.get("workers", {})
            return s.get("ready") is True and name not in ws and _gone(int(w["pid"]))

        _wait(replaced, 60, "a replacement", run)
        time.sleep(2.0)  # a few more ticks: nothing else is started
        workers = up_state(run)["workers"]
        pids = up_state(run)["pids"]
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=60)
    finally:
        _finish(up)
    events = read_run(run).events
    mine = [e for e in events if e.worker == name]
    assert not [e for e in mine if e.kind in ("crash", "restart")], mine
    assert any(e.kind == "stop" and "stopped from outside" in e.reason for e in mine), mine
    assert len(workers) == 1
    assert name not in workers
    assert len(pids) == 3  # router, the stopped worker, its one replacement
    assert code == 0
