"""The two OpenAI servers the parity tests compare, started as processes on loopback.

- :func:`vllm_serve`: ``vllm serve``'s own API server (vLLM's
  ``vllm.entrypoints.launchers.api_server.entry.run_server_worker``, the function ``vllm
  serve`` runs for a single API server) in a child process. The child binds its socket on
  127.0.0.1 port 0 itself, prints the port the kernel gave as one JSON line, and hands the
  socket to vLLM (no fixed port, no port picked and let go). ``vllm`` the console script is
  not used: the CPU build's distribution name breaks it (shared NOTES).
- :func:`preheat_up`: ``preheat up --engine vllm`` over a one-worker pool of the same model
  (router + one vLLM worker), read from its run folder's ``up.json``.

Both get the same engine settings (:class:`EngineSettings`): the worker's own defaults that no
pool field sets (prefix caching on, seed 0, enforce-eager on CPU, priority scheduling, a
512 MiB CPU KV cache: ``preheat.engine.vllm``) are given to ``vllm serve`` as flags, and
the ones a pool sets go into both. At most one of each runs at a time (2 cores, 24 GiB).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 60.0

#: the child that runs vllm serve's API server on a socket it bound on port 0
VLLM_SERVE_CHILD = """\
import json, sys
import uvloop
from vllm.entrypoints.launchers.api_server.entry import run_server_worker
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.entrypoints.launchers.launcher import create_server_socket, validate_api_server_args
from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
from vllm.utils.argparse_utils import FlexibleArgumentParser

cli_env_setup()
args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])
validate_parsed_serve_args(args)
validate_api_server_args(args)
sock = create_server_socket(("127.0.0.1", 0), reuse_port=False)
args.host, args.port = "127.0.0.1", sock.getsockname()[1]
print(json.dumps({"vllm_serve_port": args.port}), flush=True)
uvloop.run(run_server_worker(f"http://127.0.0.1:{args.port}", sock, args))
"""


@dataclass(frozen=True)
class EngineSettings:
    """What both engines run with."""

    served_model_name: str = "tiny-llama"
    max_model_len: int = 512
    block_size: int = 32
    max_num_seqs: int = 4
    dtype: str = "float32"
    seed: int = 0  # VllmEngineConfig.seed's default
    kv_cache_bytes: int = 512 << 20  # preheat.engine.vllm.CPU_DEFAULT_KV_CACHE_BYTES
    # vLLM refuses a named tool_choice without a tool-call parser (renderers/online_renderer),
    # and makes one only with --enable-auto-tool-choice (parser/parser_manager); a named
    # call's arguments come from structured outputs, whatever the parser
    tool_call_parser: str = "pythonic"

    def vllm_serve_args(self, model: Path) -> list[str]:
        return [
            "--model",
            str(model),
            "--served-model-name",
            self.served_model_name,
            "--max-model-len",
            str(self.max_model_len),
            "--block-size",
            str(self.block_size),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--dtype",
            self.dtype,
            "--seed",
            str(self.seed),
            "--kv-cache-memory-bytes",
            str(self.kv_cache_bytes),
            "--enable-prefix-caching",
            "--enforce-eager",
            "--scheduling-policy",
            "priority",
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            self.tool_call_parser,
            "--disable-uvicorn-access-log",
        ]

    def worker_args(self) -> list[str]:
        """``preheat worker`` flags beyond the pool's (given with ``--worker-arg``)."""
        return ["--enable-auto-tool-choice", f"--tool-call-parser={self.tool_call_parser}"]

    def pool_yaml(self, name: str, model: Path) -> str:
        return f"""\
apiVersion: preheat.dev/v1alpha1
kind: InferencePool
metadata: {{name: {name}}}
spec:
  model: {{name: {self.served_model_name}, source: "hostpath://{model}"}}
  engine:
    kind: vllm
    args:
      maxModelLen: {self.max_model_len}
      blockSize: {self.block_size}
      maxNumSeqs: {self.max_num_seqs}
      dtype: {self.dtype}
      enforceEager: true
  replicas: {{min: 1, max: 1, warmStandby: 0}}
  resources: {{memory: 4Gi}}
"""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


async def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    """Until ``url`` answers 200; fails at once if ``proc`` exits."""
    deadline = time.monotonic() + START_TIMEOUT_S
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{what} exited ({proc.returncode}):\n{_tail(log)}")
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with http.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.5)
    raise RuntimeError(f"{what} not ready in {START_TIMEOUT_S:g} s:\n{_tail(log)}")


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _read_port(log: Path, proc: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for line in _tail(log, 1 << 20).splitlines():
            if line.startswith('{"vllm_serve_port"'):
                return int(json.loads(line)["vllm_serve_port"])
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited ({proc.returncode}):\n{_tail(log)}")
        await asyncio.sleep(0.2)
    raise RuntimeError(f"vllm serve printed no port in {START_TIMEOUT_S:g} s:\n{_tail(log)}")


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Starts ``argv`` in its own session, its output to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=child_env(), start_new_session=True
        )


@contextlib.asynccontextmanager
async def vllm_serve(model: Path, settings: EngineSettings, workdir: Path) -> AsyncIterator[str]:
    """``vllm serve`` of ``model`` on loopback; yields its base URL (``http://host:port``)."""
    log = workdir / "vllm-serve.log"
    argv = [sys.executable, "-c", VLLM_SERVE_CHILD, *settings.vllm_serve_args(model)]
    proc = _spawn(argv, log)
    try:
        port = await _read_port(log, proc)
        base = f"http://127.0.0.1:{port}"
        await _wait_http(base + "/v1/models", proc, log, "vllm serve")
        yield base
    finally:
        await asyncio.to_thread(_stop, proc, signal.SIGINT)


@dataclass
class PreheatUp:
    run: Path
    http: str  # the router's OpenAI base URL (http://127.0.0.1:PORT)
    state: dict[str, Any]

    def endpoints(self) -> list[dict[str, Any]]:
        """The router's discovery file (the workers' addresses and metrics URLs)."""
        import yaml

        data = yaml.safe_load((self.run / "endpoints.yaml").read_text())
        rows = data.get("endpoints", data) if isinstance(data, dict) else data
        return list(rows)


def _up_state(run: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((run / "up.json").read_text())
        return data
    except (OSError, ValueError):
        return {}


@contextlib.asynccontextmanager
async def preheat_up(
    model: Path, settings: EngineSettings, workdir: Path, *router_args: str
) -> AsyncIterator[PreheatUp]:
    """``preheat up --engine vllm`` of a one-worker pool of ``model``; yields once the pool
    is ready and the router answers ``/v1/models``."""
    pool = workdir / "pool.yaml"
    run = workdir / "run"
    argv = [sys.executable, "-m", "preheat.cli", "up", "-f", str(pool), "--out", str(run)]
    argv += ["--no-ui", "--engine", "vllm", "--max-workers", "1", "--drain-grace-s", "5"]
    argv += [f"--worker-arg={a}" for a in settings.worker_args()]
    argv += [f"--router-arg={a}" for a in router_args]
    log = workdir / "up.log"
    _write(pool, settings.pool_yaml("parity", model))
    proc = _spawn(argv, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while _up_state(run).get("ready") is not True:
            if proc.poll() is not None or time.monotonic() > deadline:
                logs = "".join(_tail(p, 3000) for p in sorted((run / "logs").glob("*.log")))
                raise RuntimeError(f"preheat up not ready:\n{_tail(log)}\n{logs}")
            await asyncio.sleep(0.5)
        state = _up_state(run)
        http = str(state["router"]["http"])
        await _wait_http(http + "/v1/models", proc, log, "the router")
        yield PreheatUp(run=run, http=http, state=state)
    finally:
        await asyncio.to_thread(_stop, proc, signal.SIGINT)
