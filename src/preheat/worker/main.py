"""``preheat worker``: flags and the process entry point.

On start-up the worker logs ``worker_listening`` with its ports as soon as they are bound,
and once it is warm prints one JSON line to stdout that tests and tools parse::

    {"event": "worker_ready", "worker_id": "...", "grpc_port": 41234, "http_port": 41235,
     "control_port": 41236, "openai_port": 41237}

``control_port`` is 0 when no control token was given (the control port is then not
opened: Promote, Demote and Drain are served nowhere). ``openai_port`` is the port of the
OpenAI HTTP API (vLLM's own, ``--engine vllm``), 0 when there is none (the sim engine, or
``--openai-port -1``). See worker/README.md, "Ports" and "OpenAI API".

SIGTERM or SIGINT drains (refuse new work, finish in-flight within ``--drain-grace-s``,
abort the rest), stops gRPC with ``server.stop(grace)``, shuts the engine down and exits 0.
A worker that a Drain RPC brought to ``stopped`` exits the same way. The drain covers
OpenAI HTTP requests too; uvicorn stops after it. Exit status 1 means
the engine failed to load or warm up, 2 that it could not be built (bad flags, no vLLM).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Coroutine
from typing import Any

from preheat.core.lifecycle import WARM_STATES, LifecycleState
from preheat.engine.base import Engine
from preheat.process import aio
from preheat.process.logs import LOG_FORMATS, fields, setup_logging
from preheat.process.ports import port_number, port_or_off
from preheat.process.tracing import Tracing, add_tracing_flag, setup_tracing
from preheat.wire.controltls import TLSFileError, tls_files
from preheat.wire.tokens import TokenError, read_token
from preheat.worker.engines import ENGINES, EngineUnavailable, build_worker_engine
from preheat.worker.openai_http import AppFactory
from preheat.worker.server import WorkerConfig, WorkerServer, describe

log = logging.getLogger("preheat.worker")


def _env(*names: str, default: str = "") -> str:
    for n in names:
        v = os.environ.get(n)
        if v:
            return v
    return default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("worker")
    g.add_argument("--engine", choices=ENGINES, default="sim", help="engine kind (default sim)")
    g.add_argument("--model", default=None, help="model name/path (default: the engine's)")
    g.add_argument(
        "--host",
        default="127.0.0.1",
        help="address the data ports (gRPC, HTTP) bind (default 127.0.0.1; in a pod 0.0.0.0)",
    )
    g.add_argument("--grpc-port", type=port_number, default=50051, help="gRPC port; 0 = ephemeral")
    g.add_argument("--http-port", type=port_number, default=8080, help="HTTP port; 0 = ephemeral")
    g.add_argument(
        "--control-port",
        type=port_number,
        default=50052,
        help="port of WorkerControl's Promote/Demote/Drain, opened only with a control "
        "token; 0 = ephemeral (default 50052)",
    )
    g.add_argument(
        "--control-host",
        default="",
        help="address the control port binds (default: the same as --host)",
    )
    g.add_argument(
        "--control-token-file",
        default=_env("PREHEAT_CONTROL_TOKEN_FILE"),
        help="file holding the token that control calls must send as 'authorization: Bearer "
        "<token>' (env PREHEAT_CONTROL_TOKEN_FILE, or the token itself in "
        "PREHEAT_CONTROL_TOKEN); without one the control port is not opened",
    )
    for name, what in (
        ("cert", "this worker's certificate"),
        ("key", "its private key"),
        ("ca", "the CA that signs the callers' certificates"),
    ):
        g.add_argument(
            f"--control-tls-{name}",
            default="",
            help=f"PEM file: {what}; with all three, the control port is mutual TLS "
            "(on top of the token); default: plain gRPC",
        )
    g.add_argument(
        "--cache-token-file",
        default=_env("PREHEAT_CACHE_TOKEN_FILE"),
        help="file holding the token that WatchCache on the data port must send (env "
        "PREHEAT_CACHE_TOKEN_FILE, or the token in PREHEAT_CACHE_TOKEN); without one "
        "WatchCache is open to whoever reaches the data port",
    )
    g.add_argument(
        "--worker-id",
        default=_env("PREHEAT_WORKER_ID", "POD_NAME", "HOSTNAME", default=socket.gethostname()),
        help="this worker's id (env PREHEAT_WORKER_ID, POD_NAME, HOSTNAME)",
    )
    g.add_argument("--zone", default=_env("PREHEAT_ZONE"), help="zone (env PREHEAT_ZONE)")
    g.add_argument("--region", default=_env("PREHEAT_REGION"), help="region (env PREHEAT_REGION)")
    g.add_argument(
        "--start-as",
        choices=("active", "standby"),
        default="active",
        help="state once warm (default active)",
    )
    g.add_argument(
        "--drain-grace-s",
        type=float,
        default=30.0,
        help="on SIGTERM/Drain, how long in-flight streams may take before they are aborted",
    )
    g.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=_env("PREHEAT_LOG_FORMAT", default="kv"),
        help="kv (key=value) or json (env PREHEAT_LOG_FORMAT)",
    )
    g.add_argument("--log-level", default="INFO")
    add_tracing_flag(g)

    s = parser.add_argument_group("sim engine")
    s.add_argument("--sim-num-gpu-blocks", type=int, default=None, help="KV blocks")
    s.add_argument("--sim-max-num-seqs", type=int, default=None, help="max running sequences")
    s.add_argument("--sim-max-model-len", type=int, default=None, help="context window")
    s.add_argument("--sim-block-size", type=int, default=None, help="tokens per block")
    s.add_argument(
        "--sim-time-scale",
        type=float,
        default=None,
        help="multiplies every simulated duration (0.1 = ten times faster than the GPU)",
    )
    s.add_argument("--sim-load-s", type=float, default=None, help="simulated load time")
    s.add_argument("--sim-warmup-s", type=float, default=None, help="simulated warm-up time")
    s.add_argument("--sim-seed", type=int, default=None, help="seed for the sim's text")
    s.add_argument(
        "--sim-opt",
        action="append",
        metavar="KEY=VALUE",
        help="any other SimConfig option, e.g. max_waiting=0 (repeatable)",
    )

    parser.add_argument(
        "--engine-args",
        default=None,
        metavar="JSON",
        help="more engine args as a JSON object, keys as in a pool's spec.engine.args "
        "(vLLM's engine arguments in camelCase, e.g. '{\"maxNumBatchedTokens\": 2048}'); "
        "checked against the pinned vLLM's definitions before anything starts (exit 2)",
    )

    v = parser.add_argument_group("vllm engine")
    v.add_argument("--vllm-max-model-len", type=int, default=None)
    v.add_argument("--vllm-max-num-seqs", type=int, default=None)
    v.add_argument("--vllm-gpu-memory-utilization", type=float, default=None)
    v.add_argument("--vllm-block-size", type=int, default=None)
    v.add_argument("--vllm-dtype", default=None)
    v.add_argument(
        "--vllm-enforce-eager",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="skip graph capture (the engine's default: on)",
    )
    v.add_argument("--vllm-tensor-parallel-size", type=int, default=None)

    o = parser.add_argument_group(
        "OpenAI API (--engine vllm: vLLM's own OpenAI server, as `vllm serve`, over this engine)"
    )
    o.add_argument(
        "--openai-port",
        type=port_or_off,
        default=8000,
        help="port of the OpenAI HTTP API on --host (default 8000 like vllm serve; "
        "0 = ephemeral; -1 = off). The sim engine serves none (openai_port 0)",
    )
    o.add_argument(
        "--served-model-name",
        default=None,
        help="the model's name in requests, Status and metrics (default: --model)",
    )
    o.add_argument("--chat-template", default=None, help="as vllm serve's (a file or a template)")
    o.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        default=False,
        help="as vllm serve's (needs --tool-call-parser)",
    )
    o.add_argument("--tool-call-parser", default=None, help="as vllm serve's, e.g. hermes")
    o.add_argument("--reasoning-parser", default=None, help="as vllm serve's, e.g. deepseek_r1")
    o.add_argument(
        "--vllm-serve-arg",
        action="append",
        metavar="FLAG[=VALUE]",
        help="any other vllm serve flag, e.g. --vllm-serve-arg=--max-log-len=100 "
        "(repeatable; checked by vLLM's own parser, an unknown one exits 2; engine flags "
        "the worker sets itself are refused, naming the worker flag)",
    )


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, level=args.log_level.upper(), worker_id=args.worker_id)
    try:
        control_token = read_token(args.control_token_file, "PREHEAT_CONTROL_TOKEN")
        cache_token = read_token(args.cache_token_file, "PREHEAT_CACHE_TOKEN")
        control_tls = tls_files(args.control_tls_cert, args.control_tls_key, args.control_tls_ca)
        if control_tls is not None:
            control_tls.read()  # unreadable files fail here, not at bind
    except (TokenError, TLSFileError) as e:
        log.error("bad_credentials", extra=fields(error=str(e)))
        return 2
    try:  # before the engine is built: a vLLM engine loads its model there
        config = WorkerConfig(
            worker_id=args.worker_id,
            host=args.host,
            grpc_port=args.grpc_port,
            http_port=args.http_port,
            control_token=control_token,
            control_host=args.control_host,
            control_port=args.control_port,
            cache_token=cache_token,
            control_tls=control_tls,
            zone=args.zone,
            region=args.region,
            start_as=LifecycleState(args.start_as),
            drain_grace_s=args.drain_grace_s,
            openai_port=max(0, args.openai_port),
        )
    except ValueError as e:  # --drain-grace-s -1 was a traceback, NaN a traceback and a hang
        log.error("bad_flags", extra=fields(error=f"--drain-grace-s: {e}"))
        return 2
    try:
        engine, openai = build_worker_engine(args)
    except EngineUnavailable as e:
        log.error("engine_unavailable", extra=fields(error=str(e)))
        return 2
    tracing = setup_tracing(args.tracing, "preheat-worker")
    try:
        return aio.run(serve(engine, config, openai=openai, tracing=tracing))
    finally:
        if tracing is not None:
            tracing.shutdown()


async def _first(*coros: Coroutine[Any, Any, Any]) -> None:
    """Waits until the first of ``coros`` ends; cancels and awaits the others."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await t


async def serve(
    engine: Engine,
    config: WorkerConfig,
    *,
    openai: AppFactory | None = None,
    tracing: Tracing | None = None,
) -> int:
    """Runs one worker until SIGTERM/SIGINT or a completed drain; returns the exit status."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    server = WorkerServer(engine, config, openai=openai)
    server.tracing = tracing

    def on_signal(signum: int) -> None:
        log.info("signal_received", extra=fields(signal=signal.Signals(signum).name))
        stop.set()
        if server.ports is not None:
            server.begin_drain()  # health and /ready flip at once

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        ports = await server.start()
        await _first(server.wait_warm(), stop.wait())
        if server.state in WARM_STATES:
            print(json.dumps(describe(ports, config.worker_id)), flush=True)
            await _first(stop.wait(), server.wait_stopped())
    finally:
        await server.stop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    return 0 if server.startup_error is None else 1


if __name__ == "__main__":
    from preheat.cli import main

    sys.exit(main(["worker", *sys.argv[1:]]))
