"""Start a ``preheat worker`` as a child process and find its ports (bench, demo, tests)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

_READY = re.compile(r"worker_ready")
_PORT = re.compile(r"\"?(grpc_port|http_port)\"?\s*[=:]\s*(\d+)")


@dataclass
class WorkerProcess:
    proc: asyncio.subprocess.Process
    grpc_port: int
    http_port: int
    log: list[str]

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


def _parse_ready(line: str) -> tuple[int, int] | None:
    if not _READY.search(line):
        return None
    ports: dict[str, int] = {}
    with contextlib.suppress(ValueError):
        obj = json.loads(line)
        if isinstance(obj, dict):
            ports = {k: int(obj[k]) for k in ("grpc_port", "http_port") if k in obj}
    if len(ports) < 2:
        ports = {k: int(v) for k, v in _PORT.findall(line)}
    if "grpc_port" in ports and "http_port" in ports:
        return ports["grpc_port"], ports["http_port"]
    return None


async def _pump(stream: asyncio.StreamReader, log: list[str], echo: bool) -> None:
    while line := await stream.readline():
        text = line.decode(errors="replace").rstrip()
        log.append(text)
        if echo:
            print(text, file=sys.stderr)


@contextlib.asynccontextmanager
async def spawn_worker(
    worker_args: Sequence[str], *, ready_timeout_s: float = 120.0, echo: bool = False
) -> AsyncIterator[WorkerProcess]:
    """Runs ``preheat worker <worker_args> --grpc-port 0 --http-port 0`` until the block ends,
    then sends SIGTERM (the worker drains) and waits for it to exit."""
    cmd = [sys.executable, "-m", "preheat.cli", "worker", "--host", "127.0.0.1"]
    cmd += ["--grpc-port", "0", "--http-port", "0", *worker_args]
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    log: list[str] = []
    pump: asyncio.Task[None] | None = None
    try:
        ports = await asyncio.wait_for(_wait_ready(proc.stdout, log), ready_timeout_s)
        pump = asyncio.create_task(_pump(proc.stdout, log, echo))
        yield WorkerProcess(proc, ports[0], ports[1], log)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 60)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if pump is not None:
            await pump


async def _wait_ready(stream: asyncio.StreamReader, log: list[str]) -> tuple[int, int]:
    while line := await stream.readline():
        text = line.decode(errors="replace").rstrip()
        log.append(text)
        ports = _parse_ready(text)
        if ports is not None:
            return ports
    tail = "\n".join(log[-20:])
    raise RuntimeError(f"worker exited before it was ready; its last output:\n{tail}")
