"""The proxy path: a router streams like a worker; coalescing; Pick; metrics and logs."""

from __future__ import annotations

import grpc
import pytest
from frontendkit import BLOCK, MODEL, gen, router, words, workers

from preheat.proto.preheat.v1 import inference_pb2, router_pb2
from preheat.wire.coalesce import CoalesceConfig


async def test_generate_streams_like_a_worker() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        chunks = await r.generate(gen(max_tokens=6, request_id="r-1"))
        assert all(c.request_id == "r-1" for c in chunks)
        assert all(c.worker_id == "w-1" for c in chunks)
        last = chunks[-1]
        assert last.finish_reason == inference_pb2.FINISH_REASON_LENGTH
        assert last.usage.completion_tokens == 6
        assert sum(len(c.token_ids) for c in chunks) == 6
        assert last.timing.ttft_ms > 0  # the worker's timing passes through


@pytest.mark.parametrize("where", ["worker", "router"])
async def test_coalescing_merges_tokens_without_losing_any(where: str) -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router(
            [w.endpoint for w in ws],
            coalesce=CoalesceConfig(max_tokens=4, max_delay_s=1.0),
            coalesce_at=where,
        ) as r,
    ):
        chunks = await r.generate(gen(max_tokens=9))
        sizes = [len(c.token_ids) for c in chunks]
        assert sum(sizes) == 9
        # the first chunk is never held; then frames of >= 4 tokens; the last closes it
        assert all(n >= 4 for n in sizes[1:-1])
        assert len(sizes) <= 4
        assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH
        assert chunks[-1].usage.completion_tokens == 9
        text = "".join(c.text for c in chunks)
        assert len(text.split()) == 9


async def test_pick_returns_endpoint_and_alternates() -> None:
    async with (
        workers([{"id": "w-1"}, {"id": "w-2"}, {"id": "w-3"}]) as ws,
        router([w.endpoint for w in ws]) as r,
    ):
        resp = await r.router.Pick(
            router_pb2.PickRequest(request=gen(words(64), session_id="s-1")), timeout=10
        )
        addresses = {w.id: w.endpoint.address for w in ws}
        assert resp.endpoint.worker_id in addresses
        assert resp.endpoint.address == addresses[resp.endpoint.worker_id]
        assert resp.reason
        assert resp.explanation
        assert resp.endpoint.predicted_ttft_ms > 0
        alt = [a.worker_id for a in resp.alternates]
        assert resp.endpoint.worker_id not in alt
        assert set(alt) <= set(addresses)
        again = await r.router.Pick(
            router_pb2.PickRequest(request=gen(words(64), session_id="s-1")), timeout=10
        )
        assert again.endpoint.worker_id == resp.endpoint.worker_id
        # Pick recorded the prefix as if routed: the proxy sends the same session there
        assert await r.worker_of(gen(words(64), session_id="s-1")) == resp.endpoint.worker_id


async def test_metrics_and_ready() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        await r.generate(gen(words(3 * BLOCK), max_tokens=3))
        await r.generate(gen(words(3 * BLOCK), max_tokens=3))
        async with r.http.get(r.url + "/ready") as resp:
            assert resp.status == 200
        async with r.http.get(r.url + "/healthz") as resp:
            assert resp.status == 200
        async with r.http.get(r.url + "/metrics") as resp:
            text = await resp.text()
        assert 'preheat_router_requests_total{api="grpc",outcome="ok"} 2.0' in text
        assert "preheat_router_ttft_seconds_bucket" in text
        assert "preheat_router_ttft_prediction_ratio_bucket" in text
        assert "preheat_router_decisions_total" in text
        assert "preheat_router_actual_cached_blocks_total" in text
        async with r.http.get(r.url + "/v1/models") as resp:
            body = await resp.json()
        assert [m["id"] for m in body["data"]] == [MODEL]


async def test_not_ready_without_endpoints_and_bounded_wait() -> None:
    async with router([], queue_timeout_s=0.3) as r:
        async with r.http.get(r.url + "/ready") as resp:
            assert resp.status == 503
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await r.generate(gen())
        assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "no routable endpoint" in (ei.value.details() or "")


async def test_pick_batch_decides_each_in_order_and_fails_items_alone() -> None:
    async with (
        workers([{"id": "w-1"}, {"id": "w-2"}]) as ws,
        router([w.endpoint for w in ws]) as r,
    ):
        single = await r.router.Pick(
            router_pb2.PickRequest(request=gen(words(64), session_id="s-9")), timeout=10
        )
        bad = inference_pb2.GenerateRequest(prompt="", sampling=inference_pb2.SamplingParams())
        resp = await r.router.PickBatch(
            router_pb2.PickBatchRequest(
                picks=[
                    router_pb2.PickRequest(request=gen(words(64), session_id="s-9")),
                    router_pb2.PickRequest(request=bad),
                    router_pb2.PickRequest(request=gen(words(32), session_id="s-10")),
                ]
            ),
            timeout=10,
        )
        assert len(resp.results) == 3
        first, second, third = resp.results
        # the same session goes where the single Pick sent it
        assert first.picked.endpoint.worker_id == single.endpoint.worker_id
        assert second.WhichOneof("result") == "error"
        assert second.error.code == "INVALID_ARGUMENT"
        assert "prompt" in second.error.message
        assert third.picked.endpoint.worker_id in {w.id for w in ws}
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await r.router.PickBatch(
                router_pb2.PickBatchRequest(
                    picks=[router_pb2.PickRequest(request=gen(words(4)))] * 1025
                ),
                timeout=10,
            )
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "at most 1024" in (exc.value.details() or "")
        # and it keeps serving
        again = await r.router.Pick(
            router_pb2.PickRequest(request=gen(words(64), session_id="s-9")), timeout=10
        )
        assert again.endpoint.worker_id == single.endpoint.worker_id


@pytest.mark.parametrize("forward", [True, False])
async def test_token_ids_go_to_workers_that_tokenize_like_the_router(forward: bool) -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], forward_token_ids=forward) as r,
    ):
        engine = ws[0].server.engine
        texts: list[str] = []
        original = engine.tokenize

        def counting(text: str) -> list[int]:
            texts.append(text)
            return list(original(text))

        engine.tokenize = counting  # type: ignore[method-assign]
        chunks = await r.generate(gen(words(3 * BLOCK), max_tokens=3))
        assert chunks[-1].usage.prompt_tokens == 3 * BLOCK
        # with forwarding the worker got ids (sim:32000 on both sides) and tokenized nothing
        assert (texts == []) is forward
