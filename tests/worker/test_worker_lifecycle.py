"""Lifecycle, health and readiness: loading -> warming -> standby/active -> draining -> stopped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2
from workerkit import (
    Client,
    FakeEngine,
    NoDeadlineContext,
    eventually,
    gen_request,
    make_sim_engine,
    running_worker,
)

from preheat.core.lifecycle import LifecycleState
from preheat.engine.base import EngineOutput, EngineRequest
from preheat.proto.preheat.v1 import inference_pb2, worker_pb2

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def ready(c: Client) -> tuple[int, str]:
    async with c.http.get(c.http_url + "/ready") as resp:
        return resp.status, await resp.text()


async def test_not_serving_until_warm_then_serving() -> None:
    engine = FakeEngine()
    engine.load_gate.clear()
    engine.warm_gate.clear()
    async with running_worker(engine, wait_warm=False) as c:
        assert await c.state() == worker_pb2.LIFECYCLE_STATE_LOADING
        for svc in ("", "preheat.v1.Inference"):
            assert await c.health_status(svc) == NOT_SERVING
        status, body = await ready(c)
        assert status == 503
        assert '"state": "loading"' in body
        async with c.http.get(c.http_url + "/healthz") as resp:
            assert resp.status == 200
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await c.generate(gen_request())
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "worker is loading" in (exc.value.details() or "")

        engine.load_gate.set()

        async def warming() -> bool:
            return await c.state() == worker_pb2.LIFECYCLE_STATE_WARMING

        await eventually(warming)
        assert await c.health_status() == NOT_SERVING
        engine.warm_gate.set()
        await asyncio.wait_for(c.server.wait_warm(), 5)
        assert await c.state() == worker_pb2.LIFECYCLE_STATE_ACTIVE
        assert await c.health_status() == SERVING
        assert await c.health_status("preheat.v1.Inference") == SERVING
        assert (await ready(c))[0] == 200


async def test_standby_refuses_generate_until_promoted_and_demote_goes_back() -> None:
    async with running_worker(make_sim_engine(), start_as=LifecycleState.STANDBY) as c:
        assert await c.state() == worker_pb2.LIFECYCLE_STATE_STANDBY
        assert await c.health_status() == SERVING  # warm: ready for the pool
        assert (await ready(c))[0] == 200
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await c.generate(gen_request())
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "worker is standby" in (exc.value.details() or "")

        st = await c.control.Promote(worker_pb2.PromoteRequest())
        assert st.state == worker_pb2.LIFECYCLE_STATE_ACTIVE
        st = await c.control.Promote(worker_pb2.PromoteRequest())  # idempotent
        assert st.state == worker_pb2.LIFECYCLE_STATE_ACTIVE
        assert (await c.generate(gen_request(max_tokens=2)))[-1].usage.completion_tokens == 2

        st = await c.control.Demote(worker_pb2.DemoteRequest())
        assert st.state == worker_pb2.LIFECYCLE_STATE_STANDBY
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await c.generate(gen_request())
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_demote_lets_in_flight_finish() -> None:
    engine = FakeEngine(token_interval_s=0.01)
    async with running_worker(engine) as c:
        call = c.inference.Generate(gen_request(max_tokens=20))
        first = await call.read()
        assert first.token_ids
        await c.control.Demote(worker_pb2.DemoteRequest())
        chunks = [first]
        while (ch := await call.read()) is not grpc.aio.EOF:
            chunks.append(ch)
        assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH
        assert chunks[-1].usage.completion_tokens == 20


async def test_status_reports_the_worker(client: Client) -> None:
    st = await client.control.Status(worker_pb2.StatusRequest())
    assert st.worker_id == "w-test"
    assert st.model == "fake-model"
    assert st.engine == "sim"
    assert st.max_model_len == 256
    assert st.block_size == 4
    assert st.max_num_seqs == 8
    assert st.in_flight == 0


async def test_zone_and_region_come_from_config() -> None:
    async with running_worker(FakeEngine(), zone="us-east-1a", region="us-east-1") as c:
        st = await c.control.Status(worker_pb2.StatusRequest())
        assert (st.zone, st.region) == ("us-east-1a", "us-east-1")


async def test_drain_rpc_refuses_new_work_finishes_in_flight_and_stops() -> None:
    engine = make_sim_engine(time_scale=3.0)
    async with running_worker(engine) as c:
        call = c.inference.Generate(gen_request(max_tokens=30))
        first = await call.read()
        st = await c.control.Drain(worker_pb2.DrainRequest())
        assert st.state == worker_pb2.LIFECYCLE_STATE_DRAINING
        assert await c.health_status() == NOT_SERVING
        status, body = await ready(c)
        assert status == 503
        assert "draining" in body
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await c.generate(gen_request())
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "worker is draining" in (exc.value.details() or "")
        chunks = [first]
        while (ch := await call.read()) is not grpc.aio.EOF:
            chunks.append(ch)
        assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH
        assert sum(len(ch.token_ids) for ch in chunks) == 30
        await asyncio.wait_for(c.server.wait_stopped(), 5)
        assert await c.state() == worker_pb2.LIFECYCLE_STATE_STOPPED


@pytest.mark.parametrize("op", ["Promote", "Demote"])
async def test_illegal_transition_is_failed_precondition(op: str) -> None:
    engine = FakeEngine(token_interval_s=0.01)
    async with running_worker(engine) as c:
        call = c.inference.Generate(gen_request(max_tokens=30))
        await call.read()  # keep the drain from finishing at once
        await c.control.Drain(worker_pb2.DrainRequest())
        req = worker_pb2.PromoteRequest() if op == "Promote" else worker_pb2.DemoteRequest()
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await getattr(c.control, op)(req)
        assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        target = "active" if op == "Promote" else "standby"
        assert f"cannot go from draining to {target}" in (exc.value.details() or "")
        call.cancel()


async def test_drain_grace_over_aborts_leftovers_with_abort() -> None:
    engine = FakeEngine(token_interval_s=0.05)
    async with running_worker(engine, drain_grace_s=0.2) as c:
        call = c.inference.Generate(gen_request(max_tokens=200), timeout=20)  # never hangs
        chunks = [await call.read()]
        await c.control.Drain(worker_pb2.DrainRequest())
        while (ch := await call.read()) is not grpc.aio.EOF:
            chunks.append(ch)
        assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_ABORT
        assert chunks[-1].usage.completion_tokens == sum(len(ch.token_ids) for ch in chunks)
        assert await call.code() == grpc.StatusCode.OK
        await asyncio.wait_for(c.server.wait_stopped(), 5)
        assert engine.running == set()


async def test_an_abort_while_a_chunk_is_being_sent_still_ends_with_abort() -> None:
    # The drain's grace ends while the stream is suspended at a yield, i.e. while gRPC is
    # sending its chunk (an await outside the stream). The abort must not cancel that send:
    # the stream sees it when it resumes and ends with its ABORT chunk.
    engine = FakeEngine(token_interval_s=0.01)
    async with running_worker(engine) as c:
        stream = c.server.generate(
            gen_request(max_tokens=200, request_id="r-1"), NoDeadlineContext()
        )
        first = await anext(stream)  # suspended at its yield now
        c.server._in_flight["r-1"].abort()
        await asyncio.sleep(0.05)  # gRPC "writing" the chunk: nothing may cancel this
        rest = [chunk async for chunk in stream]
        assert first.finish_reason == inference_pb2.FINISH_REASON_UNSPECIFIED
        assert [ch.finish_reason for ch in rest] == [inference_pb2.FINISH_REASON_ABORT]
        assert rest[-1].usage.completion_tokens == len(first.token_ids)
        assert "r-1" not in c.server._in_flight  # released: a drain would not wait for it


class _AnswerOnCue(FakeEngine):
    """Outputs exactly when the test puts them, and yields each at once (no extra await)."""

    def __init__(self) -> None:
        super().__init__()
        self.outputs: asyncio.Queue[EngineOutput] = asyncio.Queue()

    async def _gen(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        try:
            while True:
                out = await self.outputs.get()
                yield out
                if out.finish_reason is not None:
                    return
        finally:
            self.running.discard(request.request_id)


async def test_an_abort_as_the_engine_answers_still_ends_with_abort() -> None:
    # The drain's abort lands in the same instant the engine answers: its timeout is due
    # just after the stream resumes. It must not fire while the chunk is being sent.
    engine = _AnswerOnCue()
    async with running_worker(engine) as c:
        stream = c.server.generate(gen_request(max_tokens=5, request_id="r-2"), NoDeadlineContext())
        got: list[inference_pb2.GenerateResponse] = []

        async def send_all() -> None:  # as gRPC does: one task iterates and sends
            async for chunk in stream:
                got.append(chunk)
                await asyncio.sleep(0.02)  # sending it

        sender = asyncio.create_task(send_all())
        await eventually(
            lambda: "r-2" in c.server._in_flight and c.server._in_flight["r-2"].waiting
        )
        engine.outputs.put_nowait(EngineOutput(text=" t0", token_ids=(1,)))
        c.server._in_flight["r-2"].abort()
        await asyncio.wait_for(sender, 5)  # not cancelled mid-send
        assert [ch.finish_reason for ch in got] == [inference_pb2.FINISH_REASON_ABORT]


async def test_promote_while_warming_sets_where_start_up_ends() -> None:
    engine = FakeEngine()
    engine.warm_gate.clear()
    async with running_worker(engine, wait_warm=False, start_as=LifecycleState.STANDBY) as c:

        async def warming() -> bool:
            return await c.state() == worker_pb2.LIFECYCLE_STATE_WARMING

        await eventually(warming)
        await c.control.Promote(worker_pb2.PromoteRequest())
        engine.warm_gate.set()
        await asyncio.wait_for(c.server.wait_warm(), 5)
        assert await c.state() == worker_pb2.LIFECYCLE_STATE_ACTIVE


async def test_failed_load_stops_the_worker() -> None:
    engine = FakeEngine()
    engine.fail_load = RuntimeError("no GPU")
    async with running_worker(engine, wait_warm=False) as c:
        await asyncio.wait_for(c.server.wait_stopped(), 5)
        assert await c.state() == worker_pb2.LIFECYCLE_STATE_STOPPED
        assert isinstance(c.server.startup_error, RuntimeError)
        with pytest.raises(RuntimeError, match="stopped before it was warm"):
            await c.server.wait_warm()
