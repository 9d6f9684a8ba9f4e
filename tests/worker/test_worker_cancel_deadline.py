"""Client cancellation, the gRPC deadline and ttft_deadline_ms reach the engine."""

from __future__ import annotations

import grpc
import pytest
from workerkit import (
    FakeEngine,
    NoDeadlineContext,
    eventually,
    gen_request,
    make_sim_engine,
    running_worker,
)


async def test_client_cancel_mid_stream_frees_the_sequence_in_the_sim() -> None:
    engine = make_sim_engine(time_scale=5.0)
    async with running_worker(engine) as c:
        call = c.inference.Generate(gen_request(max_tokens=200, request_id="to-cancel"))
        await call.read()
        await call.read()
        assert engine.stats().num_running == 1
        call.cancel()
        await eventually(lambda: engine.stats().num_running == 0 and not c.server.in_flight)
        assert engine.stats().num_waiting == 0
        async with c.http.get(c.http_url + "/metrics") as resp:
            text = await resp.text()
        assert 'preheat_worker_requests_total{outcome="cancelled"} 1.0' in text
        assert "preheat_worker_in_flight 0.0" in text


async def test_grpc_deadline_aborts_in_the_sim() -> None:
    """The client's deadline passes mid-generation (200 tokens at 5x an H100's step take
    about 8 s; the deadline is 2 s, and the first token is read before it, so a loaded
    machine cannot let it pass before the worker has the request)."""
    engine = make_sim_engine(time_scale=5.0)
    async with running_worker(engine) as c:
        call = c.inference.Generate(gen_request(max_tokens=200), timeout=2.0)
        await call.read()

        async def drain() -> None:
            while await call.read() is not grpc.aio.EOF:
                pass

        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await drain()
        assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        await eventually(lambda: engine.stats().num_running == 0 and not c.server.in_flight)

        async def counted() -> bool:
            async with c.http.get(c.http_url + "/metrics") as resp:
                text = await resp.text()
            return 'preheat_worker_requests_total{outcome="deadline"} 1.0' in text

        await eventually(counted)


async def test_cancel_closes_the_engine_stream() -> None:
    engine = FakeEngine(token_interval_s=0.01)
    async with running_worker(engine) as c:
        call = c.inference.Generate(gen_request(max_tokens=200, request_id="to-cancel"))
        await call.read()
        call.cancel()
        await eventually(lambda: not engine.running and not c.server.in_flight)
        assert engine.aborted == ["to-cancel"]


async def test_ttft_deadline_gives_deadline_exceeded_and_aborts() -> None:
    engine = FakeEngine()
    engine.hold_first_token.clear()
    async with running_worker(engine) as c:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await c.generate(gen_request(max_tokens=5, ttft_deadline_ms=50))
        assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "ttft_deadline_ms=50" in (exc.value.details() or "")
        await eventually(lambda: not engine.running and not c.server.in_flight)
        assert len(engine.aborted) == 1
        engine.hold_first_token.set()
        chunks = await c.generate(gen_request(max_tokens=3, ttft_deadline_ms=5000))
        assert chunks[-1].usage.completion_tokens == 3


async def test_ttft_deadline_with_the_sim() -> None:
    # A simulated prefill 20 times slower than an H100 (~0.5 s) misses a 50 ms budget.
    engine = make_sim_engine(time_scale=20.0)
    async with running_worker(engine) as c:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await c.generate(gen_request(max_tokens=5, ttft_deadline_ms=50))
        assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        await eventually(lambda: engine.stats().num_running == 0)


async def test_a_stream_abandoned_at_a_chunk_counts_as_cancelled_not_as_an_error() -> None:
    # gRPC cancels the RPC while it is sending a chunk, an await outside the stream: the
    # stream, suspended at its yield, is then closed (GeneratorExit), not cancelled. It was
    # counted and traced as an error (the router's trace of a cancel then missed the
    # worker's "cancelled" event, once in a full run).
    engine = FakeEngine(token_interval_s=0.01)
    async with running_worker(engine) as c:
        stream = c.server.generate(
            gen_request(max_tokens=200, request_id="gone"), NoDeadlineContext()
        )
        await anext(stream)  # suspended at its yield, as while gRPC sends the chunk
        await stream.aclose()
        assert "gone" not in c.server._in_flight
        await eventually(lambda: not engine.running)
        async with c.http.get(c.http_url + "/metrics") as resp:
            text = await resp.text()
        assert 'preheat_worker_requests_total{outcome="cancelled"} 1.0' in text
        assert 'preheat_worker_requests_total{outcome="error"} 0.0' in text
