"""A fake worker OpenAI API for passthrough tests: an aiohttp app on 127.0.0.1:0 that records
what it gets and answers as told (vLLM's shapes), and sim workers whose Status names its
port (``WorkerStatus.openai_port``). Every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from frontendkit import Worker

from preheat.process.httpserve import serve


def event(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(text: str, i: int = 0, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "sim-model",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
    }


USAGE = {
    "prompt_tokens": 7,
    "completion_tokens": 3,
    "total_tokens": 10,
    "prompt_tokens_details": {"cached_tokens": 0},
}


def stream_events(include_usage: bool = True) -> list[bytes]:
    out = [event(chunk("a")), event(chunk(" b")), event(chunk(" c", finish="length"))]
    if include_usage:
        out.append(event({"id": "chatcmpl-fake", "choices": [], "usage": USAGE}))
    out.append(b"data: [DONE]\n\n")
    return out


WHOLE = {
    "id": "chatcmpl-fake",
    "object": "chat.completion",
    "created": 1,
    "model": "sim-model",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "a b c"},
            "finish_reason": "length",
        }
    ],
    "usage": USAGE,
}


@dataclass
class FakeOpenAI:
    """Modes, one per request in order (the last repeats): ``ok`` (an SSE stream or a JSON
    body, as the request asks), ``error400`` (vLLM's error body), ``error500``,
    ``unavailable`` (503), ``drop`` (closes the connection without an answer), ``break``
    (two events, then the connection breaks), ``hang`` (one event, then nothing until
    cancelled), ``abort`` (one event, then vLLM's ``finish_reason: "abort"`` chunk and
    ``[DONE]``; a JSON body with that finish reason), ``abort_first`` (the abort chunk
    first)."""

    modes: list[str] = field(default_factory=lambda: ["ok"])
    bodies: list[bytes] = field(default_factory=list)
    headers: list[Any] = field(default_factory=list)  # CIMultiDicts
    paths: list[str] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    sent: list[bytes] = field(default_factory=list)  # what the last stream wrote

    def mode(self) -> str:
        i = len(self.bodies) - 1
        return self.modes[min(i, len(self.modes) - 1)]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.bodies.append(raw)
        self.headers.append(request.headers.copy())
        self.paths.append(request.path)
        mode = self.mode()
        if mode == "error400":
            body = {
                "error": {
                    "message": "fake vLLM refusal",
                    "type": "BadRequestError",
                    "param": "tools",
                    "code": 400,
                }
            }
            return web.json_response(body, status=400, headers={"X-Fake": "1"})
        if mode == "error500":
            return web.json_response({"error": {"message": "boom", "code": 500}}, status=500)
        if mode == "unavailable":
            return web.json_response({"error": {"message": "draining"}}, status=503)
        if mode == "drop":
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError
        data = json.loads(raw)
        if not data.get("stream"):
            if mode.startswith("abort"):
                choice = {**WHOLE["choices"][0], "finish_reason": "abort"}  # type: ignore[index]
                return web.json_response({**WHOLE, "choices": [choice]})
            return web.json_response(WHOLE)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        include = bool((data.get("stream_options") or {}).get("include_usage"))
        events = stream_events(include)
        if mode == "abort":
            events = [events[0], event(chunk("", finish="abort")), events[-1]]
        elif mode == "abort_first":
            events = [event(chunk("", finish="abort")), events[-1]]
        self.sent = []
        try:
            if mode == "break":
                for e in events[:2]:
                    self.sent.append(e)
                    await resp.write(e)
                await asyncio.sleep(0.05)
                assert request.transport is not None
                request.transport.abort()
                return resp
            if mode == "hang":
                await resp.write(events[0])
                await asyncio.sleep(30)
                return resp
            for e in events:
                self.sent.append(e)
                await resp.write(e)
            await resp.write_eof()
            return resp
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


@contextlib.asynccontextmanager
async def fake_openai(modes: list[str] | None = None) -> AsyncIterator[FakeOpenAI]:
    fake = FakeOpenAI(modes=modes or ["ok"])
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    app.router.add_post("/v1/completions", fake.handle)
    runner = web.AppRunner(app, handle_signals=False, handler_cancellation=True)
    fake.port = await serve(runner, "127.0.0.1", 0)
    try:
        yield fake
    finally:
        await asyncio.wait_for(runner.cleanup(), 10)


def serve_openai(w: Worker, port: int) -> None:
    """Makes ``w``'s Status name ``port`` as its OpenAI API (as a vLLM worker's does)."""
    status = w.server.status

    def with_port() -> Any:
        st = status()
        st.openai_port = port
        return st

    w.server.status = with_port  # type: ignore[method-assign]
