"""Start bounds, how a worker's exit is recorded, and demote order (issue 12, E).

Pure tables for :func:`preheat.local.plan.starts_allowed` and
:func:`preheat.local.plan.exit_kind`; the runtime's reconcile with fake processes and a
recorded role RPC for the demote order and the bounded start burst.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from preheat.api.poolfile import parse_pool
from preheat.local import plan
from preheat.local.procs import Child
from preheat.local.runtime import LocalPool, LocalWorker, UpOptions


@pytest.mark.parametrize(
    ("want", "starting", "alive", "max_starting", "max_workers", "allowed"),
    [
        (1000, 0, 0, 2, 0, 2),  # the burst: two at a time
        (1000, 2, 2, 2, 0, 0),  # two still starting: none more
        (1000, 1, 5, 2, 0, 1),
        (3, 0, 0, 0, 0, 3),  # no bounds
        (5, 0, 6, 4, 8, 2),  # the process cap
        (5, 0, 9, 4, 8, 0),  # over the cap already (draining ones): none
        (0, 0, 0, 2, 8, 0),
    ],
)
def test_starts_allowed(want, starting, alive, max_starting, max_workers, allowed):
    got = plan.starts_allowed(
        want, starting=starting, alive=alive, max_starting=max_starting, max_workers=max_workers
    )
    assert got == allowed


@pytest.mark.parametrize(
    ("code", "told", "killed_because", "kind"),
    [
        (0, False, "", plan.STOP),  # an outside SIGTERM or Drain RPC: drained, exit 0
        (-signal.SIGTERM, False, "", plan.STOP),  # SIGTERM before its handler was set
        (-signal.SIGINT, False, "", plan.STOP),
        (-signal.SIGKILL, False, "", plan.CRASH),  # OOM killer, kill -9
        (-signal.SIGSEGV, False, "", plan.CRASH),
        (1, False, "", plan.CRASH),
        (-signal.SIGKILL, False, "not warm 2 s after start", plan.CRASH),
        (0, True, "", plan.STOP),
        (1, True, "", plan.STOP),  # told to drain: its exit is the stop asked for
    ],
)
def test_exit_kind(code, told, killed_because, kind):
    assert plan.exit_kind(code, told_to_stop=told, killed_because=killed_because) == kind


POOL = """\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {name: unit}
spec:
  model: {name: sim-8b}
  engine: {kind: sim}
  replicas: {min: 1, max: 3, warmStandby: 1}
"""


@dataclass
class FakeProc:
    pid: int
    returncode: int | None = None
    signals: list[int] = field(default_factory=list)

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)

    async def wait(self) -> int:
        self.returncode = 0 if self.returncode is None else self.returncode
        return self.returncode


class NullView:
    def update(self, snapshot: Any) -> None:
        pass

    def event(self, line: Any) -> None:
        pass


def _pool(tmp_path: Path, text: str = POOL, **options: Any) -> LocalPool:
    pool = parse_pool(yaml.safe_load(text), "unit.yaml")
    return LocalPool(pool, UpOptions(out=tmp_path / "run", **options), NullView())


def _worker(name: str, state: str, pid: int, port: int) -> LocalWorker:
    proc: Any = FakeProc(pid)
    child = Child(name=name, argv=[], proc=proc, log_path=Path("/dev/null"), started_at=0.0)
    w = LocalWorker(name, port, port + 1, child, state=state, answered=True, ready_seen=True)
    return w


def _discovered(run: Path) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in json.loads((run / "endpoints.yaml").read_text())}


async def test_demote_leaves_the_routers_set_before_its_rpc(tmp_path, monkeypatch):
    """A worker being demoted is not routable in the discovery file when its Demote RPC
    goes out (issue 12, E: a just-demoted worker was sent a request and returned 503)."""
    lp = _pool(tmp_path, handoff_s=1.0)
    for i, name in enumerate(("w-1", "w-2", "w-3")):
        lp.workers[name] = _worker(name, plan.ACTIVE, 1000 + i, 40000 + 2 * i)
    lp.desired = 1  # scaled down: 1 active + 1 standby of 3 actives: one drains, one demotes
    lp._write_discovery(force=True)
    seen: list[tuple[str, str, dict[str, Any]]] = []

    async def set_role(address: str, role: str, *, timeout_s: float = 0) -> None:
        name = next(w.name for w in lp.workers.values() if w.address == address)
        seen.append((name, role, _discovered(lp.out).get(name, {})))

    monkeypatch.setattr("preheat.local.runtime.workerctl.set_role", set_role)
    await lp._reconcile(100.0)
    await lp._reconcile(100.5)
    await lp._reconcile(101.0)  # the hand-off time has passed
    demotes = [(n, entry) for n, role, entry in seen if role == "standby"]
    assert len(demotes) == 1, seen
    name, entry = demotes[0]
    assert entry["role"] != plan.ACTIVE, entry  # not routable when the RPC went out
    after = _discovered(lp.out)[name]
    assert after["role"] == plan.STANDBY
    assert lp.workers[name].view().state == plan.STANDBY


async def test_a_start_burst_is_bounded(tmp_path, monkeypatch):
    """`replicas: {min: 1000}` started hundreds of processes in one go: at most
    --max-starting start at once, the rest wait for those to be warm."""
    big = POOL.replace("{min: 1, max: 3, warmStandby: 1}", "{min: 50, max: 50}")
    lp = _pool(tmp_path, big, max_starting=2)
    started: list[str] = []

    async def fake_start(name: str, *, restarts: int = 0) -> LocalWorker:
        w = _worker(name, plan.STARTING, 2000 + len(started), 41000 + 2 * len(started))
        w.ready_seen = w.answered = False
        lp.workers[name] = w
        started.append(name)
        return w

    monkeypatch.setattr(lp, "_start_worker", fake_start)
    await lp._reconcile(0.0)
    assert len(started) == 2
    await lp._reconcile(0.5)
    assert len(started) == 2  # both still starting
    for w in lp.workers.values():
        w.state, w.ready_seen = plan.STANDBY, True
    await lp._reconcile(1.0)
    assert len(started) == 4
