"""Start a ``preheat worker`` or ``preheat router`` as a child process and find its ports
(bench, demo, tests): both print one ready line with ``grpc_port`` and ``http_port``.

The child is started by the one spawner, :func:`preheat.process.children.spawn` (its own
process group, dies with this process), with its output on a pipe read here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from preheat.local.capacity import Limits, read_machine, worker_limit
from preheat.process.children import spawn

_STOP_GRACE_S = 60.0
_PORT = re.compile(r"\"?(grpc_port|http_port)\"?\s*[=:]\s*(\d+)")


@dataclass
class ServiceProcess:
    """A running ``preheat`` child process and the ports its ready line announced."""

    proc: asyncio.subprocess.Process
    grpc_port: int
    http_port: int
    log: list[str]
    openai_port: int = 0  # a worker's OpenAI HTTP API (vllm engine); 0: none

    @property
    def openai_url(self) -> str:
        """Base URL of the worker's OpenAI API (``.../v1``)."""
        return f"http://127.0.0.1:{self.openai_port}/v1"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


WorkerProcess = ServiceProcess


def _parse_ready(line: str, event: str = "worker_ready") -> tuple[int, int] | None:
    if event not in line:
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


def _openai_port(line: str) -> int:
    """``openai_port`` of a ready line (0 when it has none)."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return int(json.loads(line).get("openai_port", 0))
    return 0


async def _pump(stream: asyncio.StreamReader, log: list[str], echo: bool) -> None:
    while line := await stream.readline():
        text = line.decode(errors="replace").rstrip()
        log.append(text)
        if echo:
            print(text, file=sys.stderr)


def sim_worker_limit() -> tuple[int, str]:
    """The most sim worker processes a benchmark may start at once on this machine, and
    why (``preheat up``'s rule: ``preheat.local.capacity.worker_limit``)."""
    return worker_limit("sim", read_machine(), Limits())


def check_sim_workers(flag: str, k: int) -> str | None:
    """Why ``k`` sim workers are too many (or too few) for this machine, naming ``flag``;
    None when they fit. ``--workers 100000`` started that many processes at once."""
    most, why = sim_worker_limit()
    if not 1 <= k <= most:
        return f"{flag} must be within [1, {most}] on this machine ({why}), got {k}"
    return None


def spawn_worker(
    worker_args: Sequence[str], *, ready_timeout_s: float = 120.0, echo: bool = False
) -> contextlib.AbstractAsyncContextManager[ServiceProcess]:
    """Runs ``preheat worker <worker_args> --grpc-port 0 --http-port 0 --openai-port 0`` until
    the block ends, then sends SIGTERM (the worker drains) and waits for it to exit."""
    args = [
        "--host",
        "127.0.0.1",
        "--grpc-port",
        "0",
        "--http-port",
        "0",
        "--openai-port",
        "0",
        *worker_args,
    ]
    return spawn_service("worker", args, ready_timeout_s=ready_timeout_s, echo=echo)


def spawn_router(
    router_args: Sequence[str],
    *,
    ready_timeout_s: float = 60.0,
    echo: bool = False,
    env: dict[str, str] | None = None,
) -> contextlib.AbstractAsyncContextManager[ServiceProcess]:
    """Runs ``preheat router <router_args> --grpc-port 0 --http-port 0`` until the block
    ends (ready line ``router_ready``), then sends SIGTERM and waits for it to exit;
    ``env``: variables set for it (e.g. ``OTEL_*``)."""
    args = ["--grpc-port", "0", "--http-port", "0", *router_args]
    return spawn_service(
        "router",
        args,
        ready_event="router_ready",
        ready_timeout_s=ready_timeout_s,
        echo=echo,
        env=env,
    )


def spawn_nullproxy(
    target: str, *, ready_timeout_s: float = 60.0, echo: bool = False
) -> contextlib.AbstractAsyncContextManager[ServiceProcess]:
    """Runs the benchmark's do-nothing gRPC hop (``preheat.bench.nullproxy``) to ``target``."""
    return spawn_service(
        "nullproxy",
        ["--target", target],
        module="preheat.bench.nullproxy",
        ready_event="nullproxy_ready",
        ready_timeout_s=ready_timeout_s,
        echo=echo,
    )


@contextlib.asynccontextmanager
async def spawn_service(
    command: str,
    args: Sequence[str],
    *,
    module: str = "preheat.cli",
    ready_event: str = "worker_ready",
    ready_timeout_s: float = 120.0,
    echo: bool = False,
    env: dict[str, str] | None = None,
) -> AsyncIterator[ServiceProcess]:
    """Runs ``preheat <command> <args>`` (or ``python -m <module> <args>`` for another
    module) until the block ends (ready once it prints a line with ``ready_event`` and both
    ports), then sends SIGTERM and waits for it to exit."""
    head = [command] if module == "preheat.cli" else []
    argv = [sys.executable, "-m", module, *head, *args]
    child = await spawn(command, argv, None, now=0.0, env=env)
    stdout = child.proc.stdout
    assert stdout is not None
    log: list[str] = []
    pump: asyncio.Task[None] | None = None
    try:
        ports = await asyncio.wait_for(
            _wait_ready(stdout, log, command, ready_event), ready_timeout_s
        )
        pump = asyncio.create_task(_pump(stdout, log, echo))
        yield ServiceProcess(child.proc, ports[0], ports[1], log, openai_port=_openai_port(log[-1]))
    finally:
        await child.stop(_STOP_GRACE_S)  # SIGTERM (the child drains), SIGKILL after the grace
        if pump is not None:
            await pump


async def _wait_ready(
    stream: asyncio.StreamReader, log: list[str], command: str, event: str
) -> tuple[int, int]:
    while line := await stream.readline():
        text = line.decode(errors="replace").rstrip()
        log.append(text)
        ports = _parse_ready(text, event)
        if ports is not None:
            return ports
    tail = "\n".join(log[-20:])
    raise RuntimeError(f"{command} exited before it was ready; its last output:\n{tail}")
