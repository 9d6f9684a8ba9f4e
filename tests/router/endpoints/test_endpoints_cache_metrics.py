"""WatchCache folding and /metrics scraping through the store, against sim workers."""

from __future__ import annotations

from aiohttp import web
from endpointkit import VOCAB, eventually, running_store, sim_workers

from preheat.core.blocks import block_hashes
from preheat.core.promtext import ModelServerMetricNames
from preheat.engine.simtokenizer import SimTokenizer
from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc, worker_pb2
from preheat.router.endpoints import StaticDiscovery
from preheat.router.endpoints.cachewatch import apply_event


async def test_cached_blocks_follow_the_workers_prefix_cache() -> None:
    async with sim_workers(2) as workers:
        source = StaticDiscovery([w.discovered() for w in workers])
        async with running_store(source) as store:
            await store.wait_ready(2, timeout_s=10)
            await eventually(lambda: all(e.cached_blocks is not None for e in store.snapshot()))
            prompt = SimTokenizer.prompt_of_length(40, salt="long")
            stub = inference_pb2_grpc.InferenceStub(store.channel("w-1"))
            req = inference_pb2.GenerateRequest(
                prompt=prompt, sampling=inference_pb2.SamplingParams(max_tokens=2)
            )
            _ = [r async for r in stub.Generate(req, timeout=10)]
            want = set(block_hashes(SimTokenizer(VOCAB).encode(prompt), 4))
            assert len(want) == 10

            def on(eid: str) -> frozenset[int]:
                (e,) = [e for e in store.snapshot() if e.id == eid]
                assert e.cached_blocks is not None
                return e.cached_blocks

            await eventually(lambda: want <= on("w-1"))
            assert not want & on("w-0")


async def test_cached_blocks_unknown_when_watch_disabled() -> None:
    async with sim_workers(1) as workers:
        source = StaticDiscovery([workers[0].discovered()])
        async with running_store(source, watch_cache=False) as store:
            await store.wait_ready(1, timeout_s=10)
            assert store.snapshot()[0].cached_blocks is None


def _ev(kind: str, hashes: tuple[int, ...] = (), snapshot: bool = False) -> worker_pb2.CacheEvent:
    if kind == "stored":
        return worker_pb2.CacheEvent(
            stored=worker_pb2.BlocksStored(block_hashes=hashes), snapshot=snapshot
        )
    if kind == "removed":
        return worker_pb2.CacheEvent(removed=worker_pb2.BlocksRemoved(block_hashes=hashes))
    return worker_pb2.CacheEvent(cleared=worker_pb2.AllBlocksCleared())


def test_apply_event_folding() -> None:
    assert apply_event(None, _ev("stored", (1,))) is None  # a delta before any snapshot
    s = apply_event(None, _ev("stored", (1, 2, 3), snapshot=True))
    assert s == {1, 2, 3}
    s = apply_event(s, _ev("removed", (2,)))
    assert s == {1, 3}
    s = apply_event(s, _ev("stored", (4,)))
    assert s == {1, 3, 4}
    s = apply_event(s, _ev("stored", (9,), snapshot=True))  # a new snapshot replaces
    assert s == {9}
    assert apply_event(s, _ev("cleared")) == set()


async def test_scraped_metrics_feed_load_figures() -> None:
    async with sim_workers(1) as workers:
        w = workers[0]
        source = StaticDiscovery([w.discovered(metrics_url=w.metrics_url)])
        async with running_store(source) as store:
            await store.wait_ready(1, timeout_s=10)
            await eventually(lambda: store.all_endpoints()[0].scrape_at is not None)
            info = store.all_endpoints()[0]
            assert info.last_error == ""
            assert store.snapshot()[0].metrics_at is not None


async def test_scrape_failure_is_reported_not_fatal() -> None:
    async with sim_workers(1) as workers:
        w = workers[0]
        bad = w.metrics_url.replace("/metrics", "/no-such-page")
        source = StaticDiscovery([w.discovered(metrics_url=bad)])
        names = ModelServerMetricNames("x:w", "x:r", "x:k")
        async with running_store(source, metric_names=names) as store:
            await store.wait_ready(1, timeout_s=10)
            await eventually(lambda: "scrape" in store.all_endpoints()[0].last_error)
            assert len(store.snapshot()) == 1  # Status still answers: routable


async def test_scraped_gauges_with_custom_names_win_over_status() -> None:
    text = "x:waiting 5\nx:running 2\nx:kv 0.75\n"

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=text, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with sim_workers(1) as workers:
            url = f"http://127.0.0.1:{port}/metrics"
            source = StaticDiscovery([workers[0].discovered(metrics_url=url)])
            names = ModelServerMetricNames("x:waiting", "x:running", "x:kv")
            async with running_store(source, metric_names=names) as store:
                await store.wait_ready(1, timeout_s=10)
                await eventually(lambda: store.snapshot()[0].num_waiting == 5)
                e = store.snapshot()[0]
                assert (e.num_waiting, e.num_running, e.kv_cache_usage) == (5, 2, 0.75)
                assert e.metrics_at == store.all_endpoints()[0].scrape_at
    finally:
        await runner.cleanup()


async def test_the_store_sends_the_workers_cache_token_on_watch_cache() -> None:
    """A worker started with a cache token refuses WatchCache without it: the router with
    the token follows its cache, one without it routes on (the set unknown, the reason in
    the endpoint's last error) and never sees a hash."""
    async with sim_workers(1, cache_token="cache-token-1") as workers:
        source = StaticDiscovery([workers[0].discovered()])
        async with running_store(source, watch_token="cache-token-1") as store:
            await store.wait_ready(1, timeout_s=10)
            await eventually(lambda: store.snapshot()[0].cached_blocks is not None)
        async with running_store(source, watch_token="a-guess") as store:
            await store.wait_ready(1, timeout_s=10)  # Status needs no token: still routable

            def refused() -> bool:
                (view,) = store.all_endpoints()
                return "WatchCache: UNAUTHENTICATED" in view.last_error

            await eventually(refused)
            assert store.snapshot()[0].cached_blocks is None
