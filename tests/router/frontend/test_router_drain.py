"""A router told to stop (SIGTERM: ``RouterServer.drain``) answers every request not yet
routed at once, UNAVAILABLE with a retry-after, including those waiting in its queue; it
does not hold them for the queue timeout (issue 12, E: Ctrl-C under `preheat up`)."""

from __future__ import annotations

import asyncio

import pytest
from frontendkit import MODEL, gen, words

from preheat.core import metric_names as mn
from preheat.core.errors import ErrorCode, PreheatError
from preheat.proto.preheat.v1 import router_pb2
from preheat.router.app import RouterConfig, RouterServer
from preheat.router.endpoints.static import StaticDiscovery


async def test_drain_refuses_queued_and_new_requests_at_once() -> None:
    config = RouterConfig(model=MODEL, queue_timeout_s=120.0, refresh_interval_s=0.1)
    server = RouterServer(StaticDiscovery([]), config)  # nothing routable: requests queue
    await server.start()
    try:
        dispatcher = server.dispatcher
        pick = router_pb2.PickRequest(request=gen(words(16)))
        held = asyncio.create_task(server.embedded.pick(pick))
        for _ in range(200):  # until it waits in the queue
            if (
                server.metrics.registry.get_sample_value(
                    mn.ROUTER_QUEUE_DEPTH, {"pool": "", "model_name": MODEL}
                )
                or 0
            ) >= 1:
                break
            await asyncio.sleep(0.01)
        assert not held.done()
        drained = asyncio.create_task(server.drain(grace_s=60.0))
        # the held request is answered now, not after the 120 s queue timeout (the wait
        # below is a hang guard)
        with pytest.raises(PreheatError) as e:
            await asyncio.wait_for(held, 30)
        assert e.value.code is ErrorCode.UNAVAILABLE
        assert "shutting down" in e.value.message
        assert e.value.retry_after_s is not None
        assert e.value.retry_after_s >= 1
        with pytest.raises(PreheatError) as new:
            await server.embedded.pick(pick)
        assert "shutting down" in new.value.message
        assert dispatcher.draining
        assert not server.ready()
        await asyncio.wait_for(drained, 30)  # nothing in flight: the drain is over
    finally:
        await server.stop()
