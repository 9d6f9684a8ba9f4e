"""Lookaside over one kept ``Router/PickStream``: each item decided as ``Pick`` decides it,
answered by id, refused on its own; the client shares one stream between coroutines and
opens another when the router goes away."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from frontendkit import gen, router, words, workers

from preheat.proto.preheat.v1 import inference_pb2, router_pb2
from preheat.router.app import RouterConfig, RouterServer
from preheat.router.endpoints.static import StaticDiscovery
from preheat.wire.pickclient import PickFailed, PickStream


def _pick(prompt: str, session: str = "") -> router_pb2.PickRequest:
    return router_pb2.PickRequest(request=gen(prompt, session_id=session))


async def test_each_item_is_answered_by_id_and_refused_on_its_own() -> None:
    async with (
        workers([{"id": "w-1"}, {"id": "w-2"}, {"id": "w-3"}]) as ws,
        router([w.endpoint for w in ws]) as r,
    ):
        single = await r.router.Pick(_pick(words(64), "s-9"), timeout=10)
        bad = router_pb2.PickRequest(
            request=inference_pb2.GenerateRequest(
                prompt="", sampling=inference_pb2.SamplingParams()
            )
        )
        call = r.router.PickStream(timeout=10)
        await call.write(router_pb2.PickStreamRequest(id=7, pick=_pick(words(64), "s-9")))
        await call.write(router_pb2.PickStreamRequest(id=8, pick=bad))
        await call.write(router_pb2.PickStreamRequest(id=9, pick=_pick(words(32), "s-10")))
        answers = {}
        for _ in range(3):
            msg = await call.read()
            answers[msg.id] = msg.result
        assert set(answers) == {7, 8, 9}
        # the same session goes where the unary Pick sent it: the same decision
        assert answers[7].picked.endpoint.worker_id == single.endpoint.worker_id
        assert answers[7].picked.endpoint.address == single.endpoint.address
        assert answers[7].picked.reason
        assert answers[8].error.code == "INVALID_ARGUMENT"
        assert "prompt" in answers[8].error.message
        assert answers[9].picked.endpoint.worker_id in {w.id for w in ws}
        # the refusal did not end the stream: it answers the next item too
        await call.write(router_pb2.PickStreamRequest(id=10, pick=_pick(words(64), "s-9")))
        msg = await call.read()
        assert msg.id == 10
        assert msg.result.picked.endpoint.worker_id == single.endpoint.worker_id
        await call.done_writing()
        assert await call.read() is grpc.aio.EOF
        assert await call.code() == grpc.StatusCode.OK


async def test_concurrent_picks_share_one_stream_and_each_gets_its_own_answer() -> None:
    async with (
        workers([{"id": "w-1"}, {"id": "w-2"}, {"id": "w-3"}]) as ws,
        router([w.endpoint for w in ws]) as r,
    ):
        sessions = [f"s-{i}" for i in range(12)]
        # bind every session with a unary Pick first: those are the answers to expect
        bound = {
            s: (await r.router.Pick(_pick(words(64, s), s), timeout=10)).endpoint.worker_id
            for s in sessions
        }
        assert len(set(bound.values())) > 1  # sessions spread: a mix-up would show
        async with PickStream(r.channel) as picks:
            order = sessions * 4
            answers = await asyncio.gather(
                *(picks.pick(_pick(words(64, s), s), timeout_s=10) for s in order)
            )
            assert [a.endpoint.worker_id for a in answers] == [bound[s] for s in order]
            with pytest.raises(PickFailed) as refused:
                await picks.pick(_pick(""), timeout_s=10)
            assert refused.value.code == "INVALID_ARGUMENT"
            again = await picks.pick(_pick(words(64, "s-0"), "s-0"), timeout_s=10)
            assert again.endpoint.worker_id == bound["s-0"]
        with pytest.raises(ValueError, match="timeout_s must be > 0"):
            await PickStream(r.channel).pick(_pick(words(8)), timeout_s=0)


async def test_an_items_timeout_bounds_its_wait_for_an_endpoint() -> None:
    # nothing routable, and the router's own queue timeout is long: the item's is used
    async with router([], min_ready=0, queue_timeout_s=30.0) as r, PickStream(r.channel) as picks:
        t0 = time.monotonic()
        with pytest.raises(PickFailed) as refused:
            await picks.pick(_pick(words(8)), timeout_s=0.3)
        assert refused.value.code == "UNAVAILABLE"
        assert "no routable endpoint" in refused.value.message
        assert refused.value.retry_after_s > 0
        assert time.monotonic() - t0 < 20  # the item's 0.3 s, not the router's 30 s


async def test_a_pick_stream_survives_a_router_restart() -> None:
    async with workers([{"id": "w-1"}]) as ws:
        config = RouterConfig(refresh_interval_s=0.1, model="sim-model")
        first = RouterServer(StaticDiscovery([ws[0].endpoint]), config)
        ports = await first.start()
        second: RouterServer | None = None
        try:
            await first.wait_ready(1, timeout_s=10)
            target = f"127.0.0.1:{ports.grpc}"
            async with grpc.aio.insecure_channel(target) as channel, PickStream(channel) as picks:
                ok = await picks.pick(_pick(words(16)), timeout_s=10)
                assert ok.endpoint.worker_id == "w-1"
                await asyncio.wait_for(first.stop(), 20)
                with pytest.raises(PickFailed) as gone:
                    await picks.pick(_pick(words(16)), timeout_s=5)
                assert gone.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
                # a router back on the same port: the next pick opens a new stream to it
                second = RouterServer(
                    StaticDiscovery([ws[0].endpoint]),
                    RouterConfig(refresh_interval_s=0.1, model="sim-model", grpc_port=ports.grpc),
                )
                await second.start()
                await second.wait_ready(1, timeout_s=10)
                deadline = time.monotonic() + 15
                while True:
                    try:
                        back = await picks.pick(_pick(words(16)), timeout_s=5)
                        break
                    except PickFailed:
                        if time.monotonic() > deadline:
                            raise
                        await asyncio.sleep(0.2)
                assert back.endpoint.worker_id == "w-1"
        finally:
            await asyncio.wait_for(first.stop(), 20)
            if second is not None:
                await asyncio.wait_for(second.stop(), 20)
