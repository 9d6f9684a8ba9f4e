"""The one process spawner: child processes that cannot outlive their parent.

``preheat up`` starts its workers and router with it (output to one log file per child), and
the benchmarks and tests start ``preheat worker``/``preheat router`` with it too
(:mod:`preheat.bench.workerproc`: output to a pipe they read for the ready line). Every
child is started

- in its own process group (a Ctrl-C in the terminal reaches only the parent, which then
  drains the children in order), and
- with ``PR_SET_PDEATHSIG`` = SIGTERM (Linux ``prctl``): if the parent dies, even by
  SIGKILL, the kernel sends every child SIGTERM and each drains and exits. The child sets
  it itself as it starts (:func:`die_with_parent`, called first thing by ``preheat`` and
  the benchmark's helpers, when :data:`PARENT_ENV` names its parent), and a child whose
  parent died before the ``prctl`` took effect exits at once (it checks its parent id
  right after).

No ``preexec_fn``: with one, Python forks with ``fork()`` and runs the parent's fork
handlers in the child before ``exec``; gRPC's restart its poller there, which then fails on
the epoll descriptor ``close_fds`` closed (``epoll_wait error: Bad file descriptor``) and
kills the child before it runs (grpc/grpc#43055). Without one (and with
``process_group=0``), Python uses ``vfork()``, which runs no fork handlers.

Output goes to a log file (appended) or, without one, to a pipe the caller reads
(``child.proc.stdout``). ``preheat up`` reserves its children's ports
(:class:`preheat.process.ports.ReservedPort`, held while the child may bind them) and passes
them on the command line, so a child's address is known before it is ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        return ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None


PARENT_ENV = "PREHEAT_DIE_WITH_PARENT"
"""Set by :func:`spawn` to the parent's pid: the child's :func:`die_with_parent` reads it."""


def die_with_parent(sig: int = signal.SIGTERM, environ: Any = None) -> None:
    """In a child :func:`spawn` started (``PARENT_ENV`` set): have the kernel send ``sig``
    when the parent dies, and exit at once if it died already. Takes the variable out of
    the environment (its own children get their own). Nothing without it."""
    env = os.environ if environ is None else environ
    raw = env.pop(PARENT_ENV, "")
    if not raw:
        return
    libc = _libc()
    if libc is not None:
        libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if str(os.getppid()) != raw:  # the parent died before prctl: nobody to serve
        os._exit(1)


@dataclass
class Child:
    """A running child process."""

    name: str
    argv: list[str]
    proc: asyncio.subprocess.Process
    log_path: Path | None  # None: output goes to the pipe ``proc.stdout``
    started_at: float
    signalled: list[int] = field(default_factory=list)  # signals we sent it

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    def send(self, sig: int) -> None:
        """Signal the child (never its group: a stray signal must not reach others)."""
        if self.proc.returncode is None:
            self.signalled.append(sig)
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    async def stop(self, grace_s: float) -> int:
        """SIGTERM (once: a second one would cut a drain short), then SIGKILL after
        ``grace_s``; returns the exit status."""
        if signal.SIGTERM not in self.signalled:
            self.send(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.proc.wait(), grace_s)
        except TimeoutError:
            self.send(signal.SIGKILL)
            return await self.proc.wait()


async def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path | None,
    *,
    now: float,
    env: dict[str, str] | None = None,
) -> Child:
    """Starts ``argv`` in its own process group, dying with this process, output (stdout and
    stderr) to ``log_path`` (appended: a restarted child keeps its earlier lines) or, when it
    is None, to a pipe the caller reads (``child.proc.stdout``)."""
    full_env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
        PARENT_ENV: str(os.getpid()),
    }
    if log_path is None:
        proc = await _exec(argv, asyncio.subprocess.PIPE, full_env)
    else:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as out:
            proc = await _exec(argv, out, full_env)
    return Child(name=name, argv=list(argv), proc=proc, log_path=log_path, started_at=now)


async def _exec(argv: Sequence[str], out: Any, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=out,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        process_group=0,  # its own group; no preexec_fn: vfork, no fork handlers (above)
    )


def preheat_argv(command: str, *args: str) -> list[str]:
    """``python -m preheat.cli COMMAND ARGS`` with this interpreter."""
    return [sys.executable, "-m", "preheat.cli", command, *args]


__all__ = ["Child", "die_with_parent", "preheat_argv", "spawn"]
