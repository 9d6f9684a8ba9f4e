"""Generate on an in-process worker over loopback gRPC."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from workerkit import Client, FakeEngine, eventually, gen_request, make_sim_engine, running_worker

from preheat.proto.preheat.v1 import inference_pb2


async def test_stream_carries_tokens_then_a_final_chunk(fake_client: Client) -> None:
    chunks = await fake_client.generate(gen_request(max_tokens=5, request_id="r-1"))
    assert all(c.request_id == "r-1" and c.worker_id == "w-test" for c in chunks)
    assert [t for c in chunks for t in c.token_ids] == [0, 1, 2, 3, 4]
    assert "".join(c.text for c in chunks) == " t0 t1 t2 t3 t4"
    assert all(c.finish_reason == inference_pb2.FINISH_REASON_UNSPECIFIED for c in chunks[:-1])
    last = chunks[-1]
    assert last.finish_reason == inference_pb2.FINISH_REASON_LENGTH
    assert last.usage.prompt_tokens == 3
    assert last.usage.completion_tokens == 5
    assert last.timing.queue_ms == pytest.approx(1.0)
    assert last.timing.ttft_ms == pytest.approx(3.0)
    assert last.timing.e2e_ms == pytest.approx(6.0)


async def test_sim_stream_completes_with_usage_and_timing(client: Client) -> None:
    chunks = await client.generate(gen_request(prompt="a b c d e f g h i j", max_tokens=12))
    assert sum(len(c.token_ids) for c in chunks) == 12
    assert "".join(c.text for c in chunks)
    last = chunks[-1]
    assert last.finish_reason == inference_pb2.FINISH_REASON_LENGTH
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (10, 12)
    t = last.timing
    assert t.prefill_ms > 0
    assert t.decode_ms > 0
    assert t.ttft_ms == pytest.approx(t.queue_ms + t.prefill_ms)
    assert t.e2e_ms == pytest.approx(t.ttft_ms + t.decode_ms)


async def test_sim_full_engine_gives_resource_exhausted() -> None:
    # one running, one waiting; a third request is refused
    engine = make_sim_engine(max_num_seqs=1, max_waiting=1, time_scale=10.0)
    async with running_worker(engine) as c:
        calls = [c.inference.Generate(gen_request(max_tokens=200))]
        await calls[0].read()  # running
        calls.append(c.inference.Generate(gen_request(max_tokens=200)))
        await eventually(lambda: engine.stats().num_waiting == 1)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await c.generate(gen_request(max_tokens=3))
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "queue is full" in (exc.value.details() or "")
        for call in calls:
            call.cancel()
        await eventually(lambda: engine.stats().num_running + engine.stats().num_waiting == 0)
        chunks = await c.generate(gen_request(max_tokens=2))  # the worker keeps serving
        assert chunks[-1].usage.completion_tokens == 2


async def test_empty_request_id_gets_a_generated_one(client: Client) -> None:
    chunks = await client.generate(gen_request(max_tokens=2))
    ids = {c.request_id for c in chunks}
    assert len(ids) == 1
    (rid,) = ids
    assert len(rid) == 32
    int(rid, 16)


async def test_prompt_token_ids_are_passed_through(
    fake_client: Client, fake_engine: FakeEngine
) -> None:
    req = inference_pb2.GenerateRequest(
        prompt_token_ids=inference_pb2.TokenIds(ids=[5, 6, 7, 8, 9]),
        sampling=inference_pb2.SamplingParams(max_tokens=1, temperature=0.0, seed=7),
        priority=inference_pb2.PRIORITY_INTERACTIVE,
    )
    chunks = await fake_client.generate(req)
    assert chunks[-1].usage.prompt_tokens == 5
    sent = fake_engine.requests[-1]
    assert sent.prompt_token_ids == (5, 6, 7, 8, 9)
    assert sent.sampling.temperature == 0.0
    assert sent.sampling.seed == 7
    assert sent.priority == 0


async def test_stop_string_truncates_and_finishes_with_stop() -> None:
    words = ["Hello", " wor", "ld", "!", " more", " text"]
    engine = FakeEngine(token_text=lambda i: words[i % len(words)])
    async with running_worker(engine) as c:
        req = gen_request(
            sampling=inference_pb2.SamplingParams(max_tokens=6, stop=["world!", "zzz"])
        )
        chunks = await c.generate(req)
        assert "".join(ch.text for ch in chunks) == "Hello "
        assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_STOP
        assert chunks[-1].usage.completion_tokens == 4
        await eventually(lambda: not engine.running)
        assert len(engine.aborted) == 1  # the engine's sequence was closed early


async def test_full_engine_gives_resource_exhausted() -> None:
    engine = FakeEngine(max_num_seqs=1)
    engine.hold_first_token.clear()
    async with running_worker(engine) as c:
        first = c.inference.Generate(gen_request(max_tokens=3))
        reader = asyncio.ensure_future(first.read())
        await eventually(lambda: bool(engine.running))
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await c.generate(gen_request(max_tokens=3))
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "engine is full" in (exc.value.details() or "")
        engine.hold_first_token.set()
        chunks = [await reader]
        while (ch := await first.read()) is not grpc.aio.EOF:
            chunks.append(ch)
        assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH
        # and the worker keeps serving
        assert (await c.generate(gen_request(max_tokens=1)))[-1].usage.completion_tokens == 1
