"""The router embedded in the caller's process: the same view and decisions as a router
process, answered by a function call; the caller then goes straight to the worker."""

from __future__ import annotations

import re

import grpc
import pytest
from frontendkit import MODEL, gen, router, words, workers

from preheat.core.errors import ErrorCode, PreheatError
from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc, router_pb2
from preheat.router.app import RouterConfig
from preheat.router.embedded import EmbeddedRouter
from preheat.router.endpoints.static import StaticDiscovery


def _config(**kw: object) -> RouterConfig:
    return RouterConfig(refresh_interval_s=0.1, model=MODEL, **kw)  # type: ignore[arg-type]


def _pick(prompt: str, session: str = "") -> router_pb2.PickRequest:
    return router_pb2.PickRequest(request=gen(prompt, session_id=session))


async def test_an_embedded_router_decides_as_a_router_process_and_the_caller_goes_direct() -> None:
    specs = [{"id": "w-1"}, {"id": "w-2"}, {"id": "w-3"}]
    async with workers(specs) as ws, router([w.endpoint for w in ws]) as r:
        embedded = EmbeddedRouter(StaticDiscovery([w.endpoint for w in ws]), _config())
        async with embedded:
            await embedded.wait_ready(3, timeout_s=10)
            for w in ws:  # the same RTTs as the router process was given
                embedded.store.inject_rtt(w.endpoint.key, 1.0)
            homes = set()
            for i in range(8):  # two replicas, no shared state: the same worker per session
                session = f"s-{i}"
                remote = await r.router.Pick(_pick(words(64, session), session), timeout=10)
                local = await embedded.pick(_pick(words(64, session), session), timeout_s=5)
                assert local.endpoint.worker_id == remote.endpoint.worker_id
                assert local.endpoint.address == remote.endpoint.address
                assert local.reason == "session"
                homes.add(local.endpoint.worker_id)
            assert len(homes) > 1  # sessions spread, so agreement is not luck
            # the caller sends Generate straight to the worker it was given
            req = gen(words(32), max_tokens=3, session_id="s-0")
            answer = await embedded.pick(router_pb2.PickRequest(request=req))
            async with grpc.aio.insecure_channel(answer.endpoint.address) as channel:
                stub = inference_pb2_grpc.InferenceStub(channel)
                chunks = [c async for c in stub.Generate(req, timeout=10)]
            assert {c.worker_id for c in chunks} == {answer.endpoint.worker_id}
            assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH
            # refusals are what Pick would return
            with pytest.raises(PreheatError) as bad:
                await embedded.pick(_pick(""))
            assert bad.value.code is ErrorCode.INVALID_ARGUMENT
            assert "prompt" in bad.value.message
            # the metadata a gRPC caller would send is read the same way
            md = await embedded.pick(_pick(words(64, "s-3")), metadata={"x-session-id": "s-3"})
            assert (
                md.endpoint.worker_id
                == (
                    await r.router.Pick(_pick(words(64, "s-3"), "s-3"), timeout=10)
                ).endpoint.worker_id
            )


async def test_an_embedded_router_refuses_when_nothing_is_routable_and_before_start() -> None:
    embedded = EmbeddedRouter(StaticDiscovery([]), _config(queue_timeout_s=30.0))
    with pytest.raises(RuntimeError, match="before start"):
        await embedded.pick(_pick(words(8)))
    async with embedded:
        with pytest.raises(PreheatError) as none:
            await embedded.pick(_pick(words(8)), timeout_s=0.2)
        assert none.value.code is ErrorCode.UNAVAILABLE
        # the wait left of the 0.2 s when the request joined the queue (a loaded machine
        # takes a few ms to get it there: 0.196s was seen)
        waited = re.search(r"no routable endpoint within ([0-9.]+)s", none.value.message)
        assert waited is not None, none.value.message
        assert 0 <= float(waited.group(1)) <= 0.2
    assert embedded.store_task is None  # stopped with the block
