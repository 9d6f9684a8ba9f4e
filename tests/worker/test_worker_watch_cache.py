"""WatchCache: a snapshot, then deltas with increasing seq; slow subscribers are dropped."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from workerkit import Client, FakeEngine, gen_request, running_worker

from preheat.engine.base import CacheEvent, CacheEventKind
from preheat.proto.preheat.v1 import worker_pb2
from preheat.worker.cache_hub import CacheHub, SubscriberOverflow


async def test_snapshot_then_deltas(fake_engine: FakeEngine, fake_client: Client) -> None:
    client = fake_client
    fake_engine.emit_cache(CacheEvent(CacheEventKind.STORED, (1, 2, 3)))
    await asyncio.sleep(0)
    call = client.control.WatchCache(worker_pb2.WatchCacheRequest())
    snap = await call.read()
    assert snap.snapshot
    assert snap.WhichOneof("event") == "stored"
    assert sorted(snap.stored.block_hashes) == [1, 2, 3]

    fake_engine.emit_cache(CacheEvent(CacheEventKind.STORED, (4,)))
    fake_engine.emit_cache(CacheEvent(CacheEventKind.REMOVED, (1,)))
    fake_engine.emit_cache(CacheEvent(CacheEventKind.CLEARED))
    events = [await call.read() for _ in range(3)]
    assert [e.WhichOneof("event") for e in events] == ["stored", "removed", "cleared"]
    assert list(events[0].stored.block_hashes) == [4]
    assert list(events[1].removed.block_hashes) == [1]
    assert not any(e.snapshot for e in events)
    seqs = [snap.seq] + [e.seq for e in events]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 4
    call.cancel()


async def test_two_subscribers_both_see_generate_blocks(
    fake_engine: FakeEngine, fake_client: Client
) -> None:
    client = fake_client
    a = client.control.WatchCache(worker_pb2.WatchCacheRequest())
    b = client.control.WatchCache(worker_pb2.WatchCacheRequest())
    assert (await a.read()).snapshot
    assert (await b.read()).snapshot
    await client.generate(gen_request(prompt="a b c d e f g h", max_tokens=1))
    ea, eb = await a.read(), await b.read()
    assert ea == eb
    assert len(ea.stored.block_hashes) == 2  # 8 tokens, block size 4
    late = client.control.WatchCache(worker_pb2.WatchCacheRequest())
    snap = await late.read()
    assert snap.snapshot
    assert sorted(snap.stored.block_hashes) == sorted(ea.stored.block_hashes)
    assert snap.seq == ea.seq
    for call in (a, b, late):
        call.cancel()


async def test_slow_subscriber_is_dropped_with_resource_exhausted() -> None:
    engine = FakeEngine()
    async with running_worker(engine, cache_queue_size=2) as c:
        call = c.control.WatchCache(worker_pb2.WatchCacheRequest())
        assert (await call.read()).snapshot
        for i in range(5):  # the subscriber reads nothing meanwhile
            engine.emit_cache(CacheEvent(CacheEventKind.STORED, (100 + i,)))

        async def read_all() -> None:
            while await call.read() is not grpc.aio.EOF:
                pass

        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await read_all()
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "resubscribe" in (exc.value.details() or "")
        again = c.control.WatchCache(worker_pb2.WatchCacheRequest())
        snap = await again.read()
        assert sorted(snap.stored.block_hashes) == [100, 101, 102, 103, 104]
        again.cancel()


async def test_hub_accepts_events_from_another_thread() -> None:
    hub = CacheHub(asyncio.get_running_loop(), queue_size=8)
    sub = hub.subscribe()
    snap = await anext(sub)
    assert snap.snapshot
    await asyncio.to_thread(hub.listener, CacheEvent(CacheEventKind.STORED, (7,)))
    ev = await asyncio.wait_for(anext(sub), 5)
    assert ev.block_hashes == (7,)
    assert hub.blocks == frozenset({7})
    hub.close()
    with pytest.raises(StopAsyncIteration):
        await anext(sub)


async def test_hub_overflow_raises_for_that_subscriber_only() -> None:
    hub = CacheHub(asyncio.get_running_loop(), queue_size=1)
    slow, fast = hub.subscribe(), hub.subscribe()
    await anext(slow)
    await anext(fast)
    hub.apply(CacheEvent(CacheEventKind.STORED, (1,)))
    assert (await anext(fast)).seq == 1
    hub.apply(CacheEvent(CacheEventKind.STORED, (2,)))
    assert (await anext(fast)).seq == 2
    with pytest.raises(SubscriberOverflow):
        await anext(slow)
    assert hub.num_subscribers == 1
    await fast.aclose()
