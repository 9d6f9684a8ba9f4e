"""`preheat up` reserves the ports it hands its children (``preheat.process.ports``): from before a
child starts, nothing else on the machine can take them; a worker's go back once it exited."""

from __future__ import annotations

import errno
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from localkit import autoscaled_pool

from preheat.api.poolfile import load_pool
from preheat.local import runtime
from preheat.local.runtime import LocalPool, UpOptions
from preheat.local.view import LogView

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="ports are held on Linux only"
)


def _taken(port: int) -> bool:
    """Whether a program that picked ``port`` (a bind without SO_REUSEADDR) would fail."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            return True
    return False


def _pool(tmp_path: Path) -> LocalPool:
    path = tmp_path / "pool.yaml"
    path.write_text(autoscaled_pool("ports"))
    return LocalPool(load_pool(path), UpOptions(out=tmp_path / "run"), LogView())


def test_the_router_ports_are_held_from_the_start(tmp_path: Path) -> None:
    pool = _pool(tmp_path)
    try:
        assert pool.router_grpc != pool.router_http
        assert _taken(pool.router_grpc)
        assert _taken(pool.router_http)
    finally:
        pool._release_ports(keep=lambda _owner: False)
    assert not _taken(pool.router_grpc)


async def test_a_workers_ports_are_held_until_it_exited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_spawn = runtime.spawn

    async def idle_child(name: str, argv: Any, log_path: Path, **kw: Any) -> Any:
        # a child that binds nothing and exits: the ports are held by the runtime alone
        code = "pass"
        return await real_spawn(name, [sys.executable, "-c", code], log_path, **kw)

    monkeypatch.setattr(runtime, "spawn", idle_child)
    pool = _pool(tmp_path)
    try:
        first = await pool._start_worker("w-1")
        ports = (first.grpc_port, first.http_port, first.control_port)
        assert len(set(ports)) == 3
        assert all(_taken(p) for p in ports)
        await first.child.stop(10.0)
        assert all(_taken(p) for p in ports)  # exited, not yet seen: still reserved
        del pool.workers["w-1"]  # what supervision does with an exited worker
        second = await pool._start_worker("w-1", restarts=1)
        try:
            assert not any(_taken(p) for p in ports)
            assert _taken(second.grpc_port)
            assert _taken(second.http_port)
            assert _taken(second.control_port)
        finally:
            await second.child.stop(10.0)
    finally:
        pool._release_ports(keep=lambda _owner: False)
