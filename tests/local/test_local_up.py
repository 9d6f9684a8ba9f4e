"""`preheat up` end to end: a real pool of sim worker processes and a router on loopback,
a short trace replayed through the router with the load API.

One scenario (module fixture), several checks: every request accounted for; a scale-up
that promotes the warm standby, then a scale-down; a worker SIGKILLed mid-run is restarted
and the router routes around it; SIGINT drains and leaves no process behind. A second test
SIGKILLs `preheat up` itself: its children die with it (PR_SET_PDEATHSIG).

Margins for a loaded 2-core box: the sim runs 10x slower than an H100 (``timeScale: 10``),
so one worker is overloaded ~1.7x by 3 requests/s of 2k-token prompts (TTFT grows by
seconds, far past the 1.5 s objective) while the CPU work stays small; windows of a few
seconds keep the whole scenario under a minute.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from localkit import autoscaled_pool
from upkit import up_state

from preheat.load.replay import LoadOptions, LoadSummary, replay
from preheat.report.record import REQUESTS_FILE, RunMeta, RunWriter, ScaleEvent, read_run
from preheat.workload.traces import TraceRequest

POOL = autoscaled_pool("itest")

RATE = 3.0  # requests/s
LOAD_S = 24.0
KILL_AT_S = 11.0  # into the load: after the scale-up
INPUT_TOKENS = 2048
OUTPUT_TOKENS = 8


def _requests() -> list[TraceRequest]:
    n = int(RATE * LOAD_S)
    return [
        TraceRequest(
            arrival_s=i / RATE,
            input_tokens=INPUT_TOKENS,
            output_tokens=OUTPUT_TOKENS,
            session_id=f"s{i}",
            prefix_block_ids=(10_000 + i,),  # distinct prompts: no prefix-cache shortcut
            index=i,
        )
        for i in range(n)
    ]


def _gone(pid: int) -> bool:
    """No such process (or only a zombie): checked in /proc, no psutil."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def _wait_for(pred: Any, timeout_s: float, what: str, run: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        await asyncio.sleep(0.2)
    log = (run / "up.log").read_text()[-3000:] if (run / "up.log").exists() else ""
    raise AssertionError(f"timed out waiting for {what}; up.json: {up_state(run)}\n{log}")


def _start_up(run: Path, pool: Path, *extra: str) -> subprocess.Popen[bytes]:
    run.mkdir(parents=True, exist_ok=True)
    log = (run / "up.log").open("wb")
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
            "--drain-grace-s",
            "5",
            *extra,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


@dataclass
class Scenario:
    run: Path
    load_dir: Path
    summary: LoadSummary
    killed: str
    killed_pid: int
    kill_t_s: float  # on the load's time axis (seconds since the replay began)
    exit_code: int
    pids: list[int]
    events: list[ScaleEvent]


async def _scenario(tmp: Path) -> Scenario:
    pool = tmp / "pool.yaml"
    pool.write_text(POOL)
    run, load_dir = tmp / "run", tmp / "load"
    up = _start_up(run, pool)
    try:
        await _wait_for(lambda: up_state(run).get("ready") is True, 60, "the pool to be ready", run)
        target = up_state(run)["router"]["grpc"]
        writer = RunWriter(load_dir, RunMeta(name="load"), parts=(REQUESTS_FILE,))
        options = LoadOptions(request_timeout_s=40.0, drain_s=5.0)
        load = asyncio.create_task(replay(target, _requests(), options, writer))
        started = time.monotonic()

        # mid-run, after the scale-up: SIGKILL one active worker
        await _wait_for(
            lambda: time.monotonic() - started >= KILL_AT_S or load.done(), 60, "kill time", run
        )
        workers = up_state(run)["workers"]
        actives = sorted(n for n, w in workers.items() if w["state"] == "active")
        assert len(actives) >= 2, f"expected a scaled-up pool at {KILL_AT_S} s: {workers}"
        killed = actives[0]
        killed_pid = int(workers[killed]["pid"])
        os.kill(killed_pid, signal.SIGKILL)
        kill_t_s = time.monotonic() - started

        summary = await asyncio.wait_for(load, 90)
        writer.close()

        def scaled_down() -> bool:
            s = up_state(run)
            return s.get("desired") == 1 and s.get("counts", {}).get("active") == 1

        await _wait_for(scaled_down, 40, "the scale-down after the load", run)
        pids = list(up_state(run)["pids"])
        up.send_signal(signal.SIGINT)
        exit_code = up.wait(timeout=40)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    return Scenario(
        run=run,
        load_dir=load_dir,
        summary=summary,
        killed=killed,
        killed_pid=killed_pid,
        kill_t_s=kill_t_s,
        exit_code=exit_code,
        pids=pids,
        events=read_run(run).events,
    )


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return asyncio.run(_scenario(tmp_path_factory.mktemp("up")))


def _first(events: list[ScaleEvent], kind: str, worker: str | None = None) -> ScaleEvent:
    for e in events:
        if e.kind == kind and (worker is None or e.worker == worker):
            return e
    raise AssertionError(f"no {kind} event{f' for {worker}' if worker else ''}: {events}")


def test_every_request_is_accounted_for(scenario: Scenario) -> None:
    s = scenario.summary
    outcomes = read_run(scenario.load_dir).requests
    assert s.scheduled == int(RATE * LOAD_S)
    assert s.sent == s.scheduled  # nothing dropped, nothing left unsent
    assert len(outcomes) == s.sent
    assert len({o.request_id for o in outcomes}) == s.sent
    assert s.ok + s.rejected + s.error == s.sent
    assert s.cancelled == 0  # no request hung until the load generator gave up on it
    assert all("DEADLINE_EXCEEDED" not in o.error for o in outcomes)


def test_scale_up_promotes_the_warm_standby_first(scenario: Scenario) -> None:
    events = scenario.events
    up = _first(events, "scale_up")
    assert up.to_replicas > up.from_replicas >= 1
    assert "ttft p95" in up.reason
    # what the scale-up did first was a promotion, before any worker was started
    actions = [e for e in events[events.index(up) + 1 :] if e.kind in ("promote", "start")]
    assert actions, "nothing promoted or started after the scale-up"
    first = actions[0]
    assert first.kind == "promote", actions
    # the promoted worker was warm (a standby) before the decision: no cold start
    ready = _first(events, "ready", first.worker)
    assert ready.t_s < up.t_s


def test_scale_down_after_the_burst(scenario: Scenario) -> None:
    events = scenario.events
    up = _first(events, "scale_up")
    down = [e for e in events if e.kind == "scale_down" and e.t_s > up.t_s]
    assert down, f"no scale-down after {up}"
    assert down[-1].to_replicas == 1
    assert any(e.kind == "drain" and e.t_s >= down[0].t_s for e in events)


def test_killed_worker_is_restarted(scenario: Scenario) -> None:
    events = scenario.events
    crash = _first(events, "crash", scenario.killed)
    assert "SIGKILL" in crash.reason
    assert str(scenario.killed_pid) in crash.reason
    restart = _first(events, "restart", scenario.killed)
    assert restart.t_s >= crash.t_s
    new_pid = restart.reason.rsplit("pid ", 1)[1]
    assert new_pid != str(scenario.killed_pid)
    # The new process, under the same name, either came back warm, or a scale-down decided
    # before it was warm removed it: a pod still starting is the first the reconciler drops
    # (which of the two depends on how soon the load ebbs, so both are right).
    after = [e for e in events if e.worker == scenario.killed and e.t_s >= restart.t_s]
    warm = [e for e in after if e.kind == "ready" and f"pid {new_pid})" in e.reason]
    drained = [e for e in after if e.kind == "drain" and f"pid {new_pid}:" in e.reason]
    assert warm or drained, after
    if not warm:
        downs = [e for e in events if e.kind == "scale_down"]
        assert any(restart.t_s <= e.t_s <= drained[0].t_s for e in downs), events


def test_router_routes_around_the_killed_worker(scenario: Scenario) -> None:
    outcomes = read_run(scenario.load_dir).requests
    # the router's admission may turn requests away while the pool is overloaded (429 with
    # Retry-After: router/README.md, Overload); those are refusals, not failures
    errors = [o for o in outcomes if o.outcome not in ("ok", "rejected")]
    # only streams the killed worker was serving when it died may fail (mid-stream: the
    # router does not retry after the first token), each recorded with its reason
    assert all(f"worker {scenario.killed} failed" in o.error for o in errors), errors
    assert all(o.t_s < scenario.kill_t_s for o in errors)
    sent_before = [o for o in outcomes if o.t_s < scenario.kill_t_s]
    assert len(errors) < len(sent_before)
    # requests sent once the router has seen it gone all succeed, on the other workers
    later = [o for o in outcomes if o.t_s > scenario.kill_t_s + 3.0]
    assert later, "the load ended too soon after the kill"
    assert [o.error for o in later if o.outcome not in ("ok", "rejected")] == []
    assert any(o.outcome == "ok" for o in later)
    assert scenario.killed not in {o.endpoint for o in later if o.t_s < scenario.kill_t_s + 4.0}


def test_roles_come_over_the_control_port_and_the_router_holds_the_cache_token(
    scenario: Scenario,
) -> None:
    """The runtime promoted its workers on their control port with the run's token, and
    the router followed their WatchCache with the run's cache token: no worker refused a
    call for a missing or wrong token, and none was sent a role change on its data port."""
    lines = [
        line
        for p in sorted((scenario.run / "logs").glob("w-*.log"))
        for line in p.read_text().splitlines()
        if line.startswith("{")
    ]
    events = [(e.get("event"), e.get("rpc")) for e in map(json.loads, lines)]
    assert ("control_call", "Promote") in events
    assert not [e for e in events if e[0] in ("control_unauthenticated", "control_on_data_port")]


def test_router_admits_against_the_pools_ttft_objective(scenario: Scenario) -> None:
    """The router's default TTFT target (requests that name no deadline) is the pool's TTFT
    objective (1500 ms in localkit's pool), not the router's built-in 2000 ms."""
    routing = yaml.safe_load((scenario.run / "routing.yaml").read_text())
    assert routing["defaultTtftTargetMs"] == 1500


def test_sigint_drains_and_leaves_no_process(scenario: Scenario) -> None:
    assert scenario.exit_code == 0
    assert len(scenario.pids) >= 5  # router, 2 at start, 1+ scaled up, 1 restart
    left = [p for p in scenario.pids if not _gone(p)]
    assert left == []
    state = up_state(scenario.run)
    assert state["stopped"] is True
    assert _first(scenario.events, "shutdown").t_s > 0


def test_sigkill_of_up_takes_its_children_with_it(tmp_path: Path) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text(POOL)
    run = tmp_path / "run"
    up = _start_up(run, pool)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and up_state(run).get("ready") is not True:
            assert up.poll() is None, (run / "up.log").read_text()[-2000:]
            time.sleep(0.2)
        pids = list(up_state(run)["pids"])
        assert len(pids) == 3  # router, active, standby
        assert not any(_gone(p) for p in pids)
        up.send_signal(signal.SIGKILL)
        up.wait()
        deadline = time.monotonic() + 20  # they drain (nothing in flight) and exit
        while time.monotonic() < deadline and not all(_gone(p) for p in pids):
            time.sleep(0.2)
        assert [p for p in pids if not _gone(p)] == []
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()


WAKE_POOL = """\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {name: wake}
spec:
  model: {name: sim-8b}
  engine:
    kind: sim
    args: {loadTime: 300ms, warmupTime: 200ms}
  replicas: {min: 0, max: 2, warmStandby: 1}
  autoscaling:
    objectives:
      - {signal: ttft, percentile: 95, targetMs: 1500}
    window: 5s
"""


async def _wake(tmp: Path) -> tuple[LoadSummary, list[ScaleEvent], int]:
    pool = tmp / "pool.yaml"
    pool.write_text(WAKE_POOL)
    run = tmp / "run"
    up = _start_up(run, pool, "--router-arg=--queue-timeout-s=60")
    try:
        await _wait_for(lambda: "router" in up_state(run), 60, "the router", run)
        await asyncio.sleep(2.0)
        assert up_state(run)["workers"] == {}  # at zero: no worker at all
        target = up_state(run)["router"]["grpc"]
        writer = RunWriter(tmp / "load", RunMeta(name="wake"), parts=(REQUESTS_FILE,))
        one = [TraceRequest(arrival_s=0.0, input_tokens=64, output_tokens=4, index=0)]
        summary = await replay(target, one, LoadOptions(request_timeout_s=60.0), writer)
        writer.close()
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=40)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    return summary, read_run(run).events, code


def test_a_pool_at_zero_wakes_for_a_request_the_router_holds(tmp_path: Path) -> None:
    summary, events, code = asyncio.run(_wake(tmp_path))
    assert summary.ok == 1
    wake = _first(events, "scale_up")
    assert (wake.from_replicas, wake.to_replicas) == (0, 1)
    assert "waking" in wake.reason
    assert code == 0


SLOW_POOL = (
    WAKE_POOL.replace("name: wake", "name: slow")
    .replace("loadTime: 300ms", "loadTime: 30s")
    .replace("min: 0", "min: 1")
)


def test_a_worker_not_warm_in_time_is_killed_and_restarted(tmp_path: Path) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text(SLOW_POOL)
    run = tmp_path / "run"
    up = _start_up(run, pool, "--startup-timeout-s", "2")

    def crashed() -> bool:
        text = (run / "events.jsonl").read_text() if (run / "events.jsonl").exists() else ""
        return '"kind":"restart"' in text

    try:
        asyncio.run(_wait_for(crashed, 30, "a restart", run))
    finally:
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=40)
    events = read_run(run).events
    crash = _first(events, "crash")
    assert "SIGKILL: not warm 2 s after start" in crash.reason
    assert _first(events, "restart", crash.worker).t_s >= crash.t_s
    assert code == 0
    assert all(_gone(p) for p in up_state(run)["pids"])
