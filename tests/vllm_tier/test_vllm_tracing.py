"""A vLLM worker that traces (``--tracing``) turns on vLLM's own request tracing
(``otlp_traces_endpoint``, the worker's OTLP endpoint): a request through the worker's
OpenAI API, the path the router passes vLLM pools' requests through, gets vLLM's span as a
child of its ``traceparent``, with vLLM's queue/prefill/decode timings and token counts
(issue 19: the worker's side of a passed-through request)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="needs the vLLM CPU build (run in .venv-vllm)")

import aiohttp
import pytest_asyncio
from otlpkit import Receiver, serve_receiver
from test_worker_openai import MODEL, parse, worker_flags

from preheat.worker.engines import build_worker_engine
from preheat.worker.server import WorkerConfig, WorkerServer

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def traced(tiny_model: Path) -> AsyncIterator[tuple[str, Receiver]]:
    with contextlib.contextmanager(serve_receiver)() as (endpoint, receiver):
        saved = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
        try:
            args = parse([*worker_flags(tiny_model), "--tracing"])
            engine, factory = build_worker_engine(args)
        finally:
            if saved is None:
                os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
            else:
                os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = saved
        config = WorkerConfig(worker_id="w-traced", stop_grace_s=1.0, openai_port=0)
        server = WorkerServer(engine, config, openai=factory)
        ports = await server.start()
        try:
            await asyncio.wait_for(server.wait_warm(), 240)
            yield f"http://127.0.0.1:{ports.openai}/v1", receiver
        finally:
            await asyncio.wait_for(server.stop(), 60)
            # vLLM installed its tracer provider for the process: flush it into the receiver
            # now, not at interpreter exit into a closed port
            from opentelemetry import trace

            provider: Any = trace.get_tracer_provider()
            if hasattr(provider, "shutdown"):
                await asyncio.to_thread(provider.shutdown)


async def test_a_passed_through_request_has_vllms_span_under_its_traceparent(
    traced: tuple[str, Receiver],
) -> None:
    base, receiver = traced
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    headers = {"traceparent": f"00-{trace_id}-{parent}-01"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base}/chat/completions", json=body, headers=headers) as resp,
    ):
        assert resp.status == 200, await resp.text()
        usage = (await resp.json())["usage"]
    spans = await asyncio.to_thread(
        receiver.wait_for, lambda got: any(s.trace_id == trace_id for s in got), 60.0
    )
    mine = [s for s in spans if s.trace_id == trace_id]
    assert [s.parent_id for s in mine] == [parent], mine  # vLLM's span, a child of ours
    attrs = mine[0].attributes
    assert attrs.get("gen_ai.usage.completion_tokens") == usage["completion_tokens"]
    assert attrs.get("gen_ai.usage.prompt_tokens") == usage["prompt_tokens"]
    assert "gen_ai.latency.time_to_first_token" in attrs
