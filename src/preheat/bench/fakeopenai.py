"""A fake vLLM worker for the router bench's OpenAI passthrough part.

``python -m preheat.bench.fakeopenai [--sim-time-scale S] [--token-interval-ms D]`` runs, in
one process:

- a sim worker (:class:`~preheat.worker.server.WorkerServer` over a fast
  :class:`~preheat.engine.sim.SimEngine`): gRPC Generate, Status, health and ``/metrics``, as
  ``preheat worker --engine sim`` serves them, except that its Status names the fake API
  below as ``openai_port`` (as a vLLM worker's does), so a router passes OpenAI requests
  through to it;
- a fake OpenAI API on 127.0.0.1, port 0: ``/v1/chat/completions`` and ``/v1/completions``
  answer ``max_tokens`` (default 16) tokens of fixed text, streamed as vLLM streams them (a
  role chunk, one event per token, a finish chunk, the usage chunk when
  ``stream_options.include_usage``, ``data: [DONE]``) or whole; ``--token-interval-ms``
  between tokens (0: as fast as the writes drain). No tokenizer, no model: what it costs is
  the floor of any OpenAI HTTP upstream in Python.

It prints one ready line, like a worker's::

    {"event": "fakeopenai_ready", "grpc_port": 41234, "http_port": 41235, "openai_port": 41236}

and stops on SIGTERM. Used by ``preheat bench router --part openai`` only; it is not part of
the product.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from preheat.engine.sim import SimConfig, SimEngine
from preheat.process import aio
from preheat.process.httpserve import serve
from preheat.proto.preheat.v1 import worker_pb2
from preheat.worker.server import WorkerConfig, WorkerServer

MODEL = "fake-model"
DEFAULT_MAX_TOKENS = 16


def _event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class FakeOpenAI:
    """The fake API: fixed tokens (``" tok"``), one SSE event each."""

    def __init__(self, token_interval_s: float) -> None:
        self.token_interval_s = token_interval_s
        self.requests = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        data = json.loads(await request.read())
        chat = request.path.endswith("/chat/completions")
        n = int(data.get("max_completion_tokens") or data.get("max_tokens") or DEFAULT_MAX_TOKENS)
        prompt = json.dumps(data.get("messages") if chat else data.get("prompt"))
        usage = {
            "prompt_tokens": len(prompt.split()),
            "completion_tokens": n,
            "total_tokens": len(prompt.split()) + n,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        rid = f"{'chatcmpl' if chat else 'cmpl'}-fake{self.requests}"
        obj = "chat.completion" if chat else "text_completion"
        created = int(time.time())
        if not data.get("stream"):
            text = " tok" * n
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            body = {"id": rid, "object": obj, "created": created, "model": MODEL}
            return web.json_response(body | {"choices": [choice], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        head = {"id": rid, "object": obj + (".chunk" if chat else ""), "created": created}
        head["model"] = MODEL

        def chunk(text: str | None, finish: str | None = None) -> bytes:
            c: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                c["delta"] = {"content": text} if text is not None else {"role": "assistant"}
            else:
                c["text"] = text or ""
            return _event(head | {"choices": [c], "usage": None})

        if chat:
            await resp.write(chunk(None))
        for i in range(n):
            if self.token_interval_s > 0 and i > 0:
                await asyncio.sleep(self.token_interval_s)
            await resp.write(chunk(" tok", "length" if i == n - 1 else None))
        if (data.get("stream_options") or {}).get("include_usage"):
            await resp.write(_event(head | {"choices": [], "usage": usage}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m preheat.bench.fakeopenai")
    p.add_argument("--worker-id", default="w0")
    p.add_argument("--sim-time-scale", type=float, default=0.01, help="the sim worker's speed")
    p.add_argument("--token-interval-ms", type=float, default=0.0, help="fake API, per token")
    return p


async def _run(args: argparse.Namespace) -> int:
    fake = FakeOpenAI(args.token_interval_ms / 1e3)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    app.router.add_post("/v1/completions", fake.handle)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    openai_port = await serve(runner, "127.0.0.1", 0)
    engine = SimEngine(
        SimConfig.from_options(
            {"model": MODEL, "time_scale": args.sim_time_scale, "load_s": 0.1, "warmup_s": 0.1}
        )
    )
    server = WorkerServer(engine, WorkerConfig(worker_id=args.worker_id, stop_grace_s=1.0))
    status = server.status

    def with_openai_port() -> worker_pb2.WorkerStatus:
        st = status()
        st.openai_port = openai_port
        return st

    server.status = with_openai_port  # type: ignore[method-assign]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        ports = await server.start()
        await server.wait_warm()
        ready = {"event": "fakeopenai_ready", "grpc_port": ports.grpc, "http_port": ports.http}
        print(json.dumps(ready | {"openai_port": openai_port}), flush=True)
        await stop.wait()
    finally:
        await server.stop()
        await runner.cleanup()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return aio.run(_run(args))


if __name__ == "__main__":
    sys.exit(main())
