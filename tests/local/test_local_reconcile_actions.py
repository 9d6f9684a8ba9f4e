"""The runtime's reconcile with fake processes and a recorded role RPC (issue 12, E): the
demote order (out of the router's set before the Demote RPC) and a bounded start burst."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from localkit import NullView

from preheat.api.poolfile import parse_pool
from preheat.local import workers as local_workers
from preheat.local.runtime import LocalPool, LocalWorker, UpOptions
from preheat.process.children import Child

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


def _pool(tmp_path: Path, text: str = POOL, **options: Any) -> LocalPool:
    pool = parse_pool(yaml.safe_load(text), "unit.yaml")
    return LocalPool(pool, UpOptions(out=tmp_path / "run", **options), NullView())


def _worker(name: str, state: str, pid: int, port: int) -> LocalWorker:
    proc: Any = FakeProc(pid)
    child = Child(name=name, argv=[], proc=proc, log_path=Path("/dev/null"), started_at=0.0)
    w = LocalWorker(name, port, port + 1, child, state=state, answered=True, ready_seen=True)
    w.control_port = port + 2
    return w


def _discovered(run: Path) -> dict[str, dict[str, Any]]:
    return {e["id"]: e for e in json.loads((run / "endpoints.yaml").read_text())}


async def test_demote_leaves_the_routers_set_before_its_rpc(tmp_path, monkeypatch):
    """A worker being demoted is not routable in the discovery file when its Demote RPC
    goes out (issue 12, E: a just-demoted worker was sent a request and returned 503)."""
    lp = _pool(tmp_path)
    for i, name in enumerate(("w-1", "w-2", "w-3")):
        lp.workers[name] = _worker(name, local_workers.ACTIVE, 1000 + i, 40000 + 3 * i)
    lp.desired = 1  # scaled down: 1 active + 1 standby of 3 actives: one drains, one demotes
    lp._write_discovery(force=True)
    seen: list[tuple[str, str, dict[str, Any]]] = []

    async def set_role(address: str, role: str, **_: Any) -> None:
        name = next(
            w.name
            for w in lp.workers.values()
            if address in (w.address, getattr(w, "control_address", ""))
        )
        seen.append((name, role, _discovered(lp.out).get(name, {})))

    monkeypatch.setattr("preheat.local.runtime.workerctl.set_role", set_role)
    await lp._reconcile(100.0)
    await lp._reconcile(100.5)
    await lp._reconcile(102.0)  # the hand-off time (1.5 s) has passed
    demotes = [(n, entry) for n, role, entry in seen if role == "standby"]
    assert len(demotes) == 1, seen
    name, entry = demotes[0]
    assert entry["role"] != local_workers.ACTIVE, entry  # not routable when the RPC went out
    after = _discovered(lp.out)[name]
    assert after["role"] == local_workers.STANDBY
    assert lp.workers[name].view().state == local_workers.STANDBY


async def test_a_start_burst_is_bounded(tmp_path, monkeypatch):
    """`replicas: {min: 1000}` started hundreds of processes in one go: at most
    --max-starting start at once, the rest wait for those to be warm."""
    big = POOL.replace("{min: 1, max: 3, warmStandby: 1}", "{min: 50, max: 50}")
    lp = _pool(tmp_path, big)  # the default --max-starting: 2
    started: list[str] = []

    async def fake_start(name: str, *, restarts: int = 0) -> LocalWorker:
        w = _worker(name, local_workers.STARTING, 2000 + len(started), 41000 + 3 * len(started))
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
        w.state, w.ready_seen = local_workers.STANDBY, True
    await lp._reconcile(1.0)
    assert len(started) == 4


def test_a_second_stop_kills_every_child_at_once(tmp_path):
    """A second Ctrl-C while draining: SIGKILL to every worker (and the router), no wait."""
    lp = _pool(tmp_path)
    for i, name in enumerate(("w-1", "w-2")):
        lp.workers[name] = _worker(name, local_workers.ACTIVE, 3000 + i, 42000 + 3 * i)
    lp.stop()
    assert all(w.child.proc.signals == [] for w in lp.workers.values())
    lp.stop()
    assert all(w.child.proc.signals == [signal.SIGKILL] for w in lp.workers.values())
