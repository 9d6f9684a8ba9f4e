"""The spawner starts children without fork handlers (vfork) and they still die with
their parent: grpc/grpc#43055 killed a child whose parent had gRPC loaded, between fork and
exec, when a ``preexec_fn`` made Python use ``fork()``."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from preheat.process.children import PARENT_ENV, die_with_parent, spawn


def test_die_with_parent_takes_the_variable_and_exits_for_a_wrong_parent() -> None:
    env = {PARENT_ENV: str(os.getppid())}
    die_with_parent(environ=env)  # our real parent: stays
    assert PARENT_ENV not in env
    die_with_parent(environ={})  # not started by spawn: nothing


_WATCHING: list[str] = []  # a marker path while the test below watches for fork handlers


def _after_fork_in_child() -> None:
    for path in _WATCHING:
        with open(path, "w"):
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)  # cannot be unregistered: guarded


async def test_a_child_is_not_forked_with_handlers_and_names_its_parent(tmp_path: Path) -> None:
    """A fork handler registered here would run in a fork()ed child before exec; with
    vfork it never runs. The child also sees its parent's pid in PARENT_ENV."""
    marker = tmp_path / "fork-handler-ran"
    _WATCHING.append(str(marker))
    try:
        code = f"import os; print(os.environ.get({PARENT_ENV!r}, ''))"
        child = await spawn("probe", [sys.executable, "-c", code], None, now=0.0)
        assert child.proc.stdout is not None
        out = await asyncio.wait_for(child.proc.stdout.read(), 30)
        await child.proc.wait()
    finally:
        _WATCHING.clear()
    assert out.decode().strip() == str(os.getpid())
    assert not marker.exists(), "the child ran the parent's fork handlers (fork, not vfork)"
