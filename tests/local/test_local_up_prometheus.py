"""`preheat up --prometheus URL`: the autoscaler reads its signals from a real Prometheus
(Debian's package) that scrapes the workers `preheat up` lists in its file_sd targets file;
an unreachable URL falls back to the direct scrape, with a warning.

Without the binary the Prometheus test skips, unless ``CI=true``: then it fails.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from localkit import autoscaled_pool
from promkit import file_sd_prometheus
from upkit import up_state

from preheat.process.ports import ReservedPort

REPO = Path(__file__).resolve().parents[2]

POOL = autoscaled_pool("promtest")


def _wait(pred: object, timeout_s: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise AssertionError(f"timed out waiting for {what}\n{tail}")


def _up(run: Path, pool: Path, prometheus: str) -> subprocess.Popen[bytes]:
    run.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
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
            "--prometheus",
            prometheus,
        ],
        stdout=(run / "up.log").open("wb"),
        stderr=subprocess.STDOUT,
    )


def _up_targets(url: str) -> int:
    """Targets of the pool Prometheus scrapes successfully now."""
    query = urllib.parse.urlencode({"query": 'up{pool="promtest"} == 1'})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=2) as resp:
            return len(json.load(resp)["data"]["result"])
    except (OSError, ValueError, KeyError):
        return 0


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A Prometheus scraping ``RUN/prometheus-targets.json`` every second: (url, RUN)."""
    run = tmp_path / "run"
    run.mkdir()
    with file_sd_prometheus(tmp_path, run) as url:
        yield url, run


def _load(target: str, tmp: Path, seconds: float, rate: float) -> None:
    """Requests through the router with `preheat load` (our own JSONL trace format)."""
    trace = tmp / "trace.jsonl"
    lines = [
        json.dumps({"timestamp_ms": int(i * 1000 / rate), "input_tokens": 2048, "output_tokens": 8})
        for i in range(int(seconds * rate))
    ]
    trace.write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "preheat.cli",
            "load",
            "--target",
            target,
            "--trace",
            str(trace),
            "--no-progress",
            "--out",
            str(tmp / "load"),
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_signals_from_prometheus_scale_the_pool_up(prometheus: tuple[str, Path]) -> None:
    url, run = prometheus
    pool = run.parent / "pool.yaml"
    pool.write_text(POOL)
    up = _up(run, pool, url)
    log = run / "up.log"
    try:

        def warm() -> bool:
            counts = up_state(run).get("counts") or {}
            return isinstance(counts, dict) and counts.get("active") == counts.get("standby") == 1

        _wait(warm, 60, "an active and a standby worker", log)
        _wait(lambda: _up_targets(url) >= 3, 60, "Prometheus to scrape them and the router", log)
        assert up_state(run)["metrics"] == f"prometheus {url}"
        targets = json.loads((run / "prometheus-targets.json").read_text())
        assert targets[0]["labels"] == {"pool": "promtest", "component": "worker"}
        assert len(targets[0]["targets"]) == 2  # the active and the standby
        assert targets[1]["labels"] == {"pool": "promtest", "component": "router"}
        router = up_state(run)["router"]
        assert isinstance(router, dict)
        _load(str(router["grpc"]), run.parent, seconds=20, rate=3.0)
    finally:
        code = _stop(up)
    assert code == 0
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    ups = [e for e in events if e["kind"] == "scale_up"]
    assert ups, log.read_text()[-3000:]
    assert "ttft p95" in ups[0]["reason"]
    assert "prometheus_unreachable" not in log.read_text()


def test_unreachable_prometheus_falls_back_to_direct_scrape(tmp_path: Path) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text(POOL)
    run = tmp_path / "run"
    with ReservedPort() as nothing:  # held, never listening: connections are refused
        up = _up(run, pool, f"http://{nothing.address}")
        log = run / "up.log"
        try:
            _wait(lambda: up_state(run).get("ready") is True, 60, "the pool to be ready", log)
            assert up_state(run)["metrics"] == "direct scrape"
        finally:
            code = _stop(up)
    assert code == 0
    text = log.read_text()
    assert "prometheus_unreachable" in text
    assert "using=" in text
