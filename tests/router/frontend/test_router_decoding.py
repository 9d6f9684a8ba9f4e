"""The router counts each endpoint's requests past their first token (``Endpoint.decoding``,
the ``decode-interference`` scorer's neighbours) until their stream ends, however it ends."""

from __future__ import annotations

import asyncio

from frontendkit import MODEL, Router, eventually, gen, router, words, workers
from prometheus_client.parser import text_string_to_metric_families

from preheat.core.routing.types import StepClock


def decoding(r: Router, wid: str) -> int:
    return next(e.decoding for e in r.server.store.snapshot() if e.id == wid)


async def test_decoding_counts_open_streams_until_they_end() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        assert decoding(r, "w-1") == 0
        # finished normally, streamed and not (the router buffers a non-streaming answer)
        await r.generate(gen(words(16, "a"), max_tokens=4))
        assert decoding(r, "w-1") == 0
        body = {"model": MODEL, "prompt": words(16, "c"), "max_tokens": 4}
        async with r.http.post(f"{r.url}/v1/completions", json=body) as resp:
            assert resp.status == 200
        assert decoding(r, "w-1") == 0
        # two long streams: counted from their first token while they run
        calls = [r.inference.Generate(gen(words(16, f"b{i}"), 4000), timeout=20) for i in range(2)]
        for call in calls:
            await asyncio.wait_for(call.read(), 10)
        assert decoding(r, "w-1") == 2
        # one cancelled by the client, one left to run: one fewer at once, then none
        calls[0].cancel()
        await eventually(lambda: decoding(r, "w-1") == 1)
        calls[1].cancel()
        await eventually(lambda: decoding(r, "w-1") == 0)


async def test_the_router_reads_the_engines_step_clock_from_the_tokens_it_streams() -> None:
    # time scale 1: the calibrated decode step, about 7.8 ms per token for one sequence
    spec = {"id": "w-1", "engine": {"time_scale": 1.0}}
    async with workers([spec]) as ws, router([w.endpoint for w in ws]) as r:
        assert r.server.store.step_clocks() == {}
        chunks = await r.generate(gen(words(64, "a"), max_tokens=48))
        assert sum(len(c.token_ids) for c in chunks) == 48
        clock = r.server.store.step_clocks()["w-1"]
        step = ws[0].server.engine.config.cost.decode_step_ms(1, 64 + 24)
        # the router's view of the step: its inter-token latency, within a factor of two
        # of the engine's (a loaded machine delays frames; their per-token gap averages out)
        assert step / 2 <= clock.step_ms <= 2 * step
        assert clock.lag_ms >= 0.0  # the trip there and back, from the worker's own TTFT
        assert clock.last_token_at <= r.server.store.clock()
        assert clock.error_ms is None  # nothing was sent there while it decoded
        # a request sent while a long one decodes there: the clock predicted its wait for
        # the step in progress, and the worker's queue time says how far it missed
        long = r.inference.Generate(gen(words(64, "b"), 400), timeout=20)
        await asyncio.wait_for(long.read(), 10)
        await r.generate(gen(words(64, "c"), max_tokens=4))
        long.cancel()
        error = r.server.store.step_clocks()["w-1"].error_ms
        assert error is not None
        assert 0.0 <= error <= 2 * clock.step_ms  # a wait is at most a step (and the lag's noise)
        # an SRE sees the clock on /metrics: the step, its error, and whether the scheduler
        # trusts it, per endpoint (read at scrape time: the store's clock as it is now)
        # (a token frame of the cancelled stream may still land: the scrape shows the clock
        # as it was just before or just after)
        before = r.server.store.step_clocks()["w-1"]
        async with r.http.get(f"{r.url}/metrics") as resp:
            assert resp.status == 200
            text = await resp.text()
        after = r.server.store.step_clocks()["w-1"]
        gauges = {
            s.name: s
            for family in text_string_to_metric_families(text)
            if family.name.startswith("preheat_router_step_clock")
            for s in family.samples
        }
        assert set(gauges) == {
            "preheat_router_step_clock_step_seconds",
            "preheat_router_step_clock_error_seconds",
            "preheat_router_step_clock_trusted",
        }
        for sample in gauges.values():
            assert sample.labels["endpoint"] == "w-1"
            assert sample.labels["model_name"] == MODEL
            assert sample.labels["pool"] == r.server.pools.pools()[0].metrics.pool

        def shown(c: StepClock) -> tuple[float, float, float]:
            assert c.error_ms is not None
            trusted = 1.0 if c.error_ms <= c.step_ms / 6 else 0.0
            return (c.step_ms / 1000, c.error_ms / 1000, trusted)

        scraped = tuple(
            gauges[f"preheat_router_step_clock_{n}"].value
            for n in ("step_seconds", "error_seconds", "trusted")
        )
        assert scraped in (shown(before), shown(after))


async def test_the_gRPC_path_holds_the_prompt_tokens_until_the_first_token() -> None:
    """``Endpoint.in_flight_tokens``: the uncached prompt tokens of the requests sent and not
    yet answered with a first token (the queue term prices the requests ahead by them)."""
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        store = r.server.store
        held: list[int] = []
        started = store.request_started

        def record(endpoint_id: str, priority: int = 1, tokens: int = 0) -> None:
            held.append(tokens)
            started(endpoint_id, priority, tokens)

        store.request_started = record  # type: ignore[method-assign]
        await r.generate(gen(words(64, "a"), max_tokens=4))
        assert len(held) == 1
        assert held[0] >= 64  # the whole prompt: nothing cached yet
        ep = store.snapshot()[0]
        assert (ep.in_flight, ep.in_flight_tokens) == (0, 0)
        # a cancelled stream gives its tokens back too
        call = r.inference.Generate(gen(words(64, "b"), 4000), timeout=20)
        await asyncio.wait_for(call.read(), 10)
        call.cancel()
        await eventually(lambda: decoding(r, "w-1") == 0)
        ep = store.snapshot()[0]
        assert (ep.in_flight, ep.in_flight_tokens) == (0, 0)
