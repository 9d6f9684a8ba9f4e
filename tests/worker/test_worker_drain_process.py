"""Acceptance (a): SIGTERM to a real ``preheat worker --engine sim`` process during 10
in-flight streams: all 10 complete in full, a new request during the drain gets
UNAVAILABLE, and the process exits 0."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc

NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
MAX_TOKENS = 120
STREAMS = 10


async def _pump(stream: asyncio.StreamReader, sink: list[str]) -> None:
    while line := await stream.readline():
        sink.append(line.decode(errors="replace"))


async def _start_worker(*extra: str) -> tuple[asyncio.subprocess.Process, int]:
    cmd = [sys.executable, "-m", "preheat.cli", "worker", "--engine", "sim"]
    cmd += ["--host", "127.0.0.1", "--grpc-port", "0", "--http-port", "0"]
    cmd += ["--worker-id", "w-drain", "--sim-load-s", "0", "--sim-warmup-s", "0", *extra]
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    async with asyncio.timeout(60):
        while line := await proc.stdout.readline():
            obj = json.loads(line) if line.startswith(b"{") else {}
            if obj.get("event") == "worker_ready":
                return proc, int(obj["grpc_port"])
    proc.kill()
    _, err = await proc.communicate()
    raise AssertionError(f"worker exited before it was ready:\n{err.decode()[-3000:]}")


async def _stream(
    stub: inference_pb2_grpc.InferenceStub, i: int, started: asyncio.Event
) -> list[inference_pb2.GenerateResponse]:
    req = inference_pb2.GenerateRequest(
        request_id=f"drain-{i}",
        prompt=f"request number {i} with a few words of prompt",
        sampling=inference_pb2.SamplingParams(max_tokens=MAX_TOKENS),
    )
    out = []
    async for chunk in stub.Generate(req, timeout=120):
        out.append(chunk)
        if chunk.token_ids:
            started.set()
    return out


@pytest.mark.timeout(180)
async def test_sigterm_during_ten_streams_finishes_them_all_and_exits_zero() -> None:
    # time scale 3: a decode step takes ~20-30 ms, so 120 tokens are ~3 s in flight.
    proc, port = await _start_worker("--sim-time-scale", "3", "--drain-grace-s", "60")
    assert proc.stderr is not None
    log: list[str] = []
    pump = asyncio.create_task(_pump(proc.stderr, log))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = inference_pb2_grpc.InferenceStub(channel)
            started = [asyncio.Event() for _ in range(STREAMS)]
            tasks = [asyncio.create_task(_stream(stub, i, started[i])) for i in range(STREAMS)]
            async with asyncio.timeout(60):
                await asyncio.gather(*(e.wait() for e in started))
            assert not any(t.done() for t in tasks), "streams ended before SIGTERM"

            proc.send_signal(signal.SIGTERM)
            # Health flips to NOT_SERVING, then new work is refused while the ten finish.
            health = health_pb2_grpc.HealthStub(channel)
            check = health_pb2.HealthCheckRequest(service="preheat.v1.Inference")
            watch = health.Watch(check)
            async with asyncio.timeout(30):
                async for resp in watch:
                    if resp.status == NOT_SERVING:
                        break
            watch.cancel()
            late = inference_pb2.GenerateRequest(
                prompt="late", sampling=inference_pb2.SamplingParams(max_tokens=1)
            )
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await stub.Generate(late).read()
            assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "worker is draining" in (exc.value.details() or "")
            assert not all(t.done() for t in tasks), "the drain refusal came too late to count"

            results = await asyncio.gather(*tasks)
        for i, chunks in enumerate(results):
            last = chunks[-1]
            assert last.request_id == f"drain-{i}"
            assert last.finish_reason == inference_pb2.FINISH_REASON_LENGTH
            assert last.usage.completion_tokens == MAX_TOKENS
            assert sum(len(c.token_ids) for c in chunks) == MAX_TOKENS
            assert {c.worker_id for c in chunks} == {"w-drain"}
        async with asyncio.timeout(60):
            rc = await proc.wait()
        assert rc == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await pump
    text = "".join(log)
    assert "event=drain_started" in text
    assert "event=worker_stopped" in text


@pytest.mark.timeout(120)
async def test_sigterm_while_loading_exits_zero_without_waiting_for_the_load() -> None:
    cmd = [sys.executable, "-m", "preheat.cli", "worker", "--engine", "sim", "--host"]
    cmd += ["127.0.0.1", "--grpc-port", "0", "--http-port", "0", "--log-format", "json"]
    cmd += ["--sim-load-s", "600"]
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(60):
            while line := await proc.stderr.readline():
                if json.loads(line).get("event") == "worker_listening":
                    break
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()[-2000:]
        assert b"worker_ready" not in out
        events = [json.loads(x)["event"] for x in err.splitlines() if x.startswith(b"{")]
        assert "worker_stopped" in events
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
