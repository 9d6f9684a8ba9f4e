"""The response cache on the gRPC path (issue 18, item 5): a deterministic ``Generate``
(temperature 0 or a seed, no logprobs) is answered again by the router while fresh, at
once as one chunk with its text, token ids and usage, marked by the trailer
``x-preheat-cache: hit`` and counted in ``preheat_router_response_cache_total``; another
tenant, a sampled request, another sampling parameter and the bypass metadata go to a
worker; an error, a rejected request or an answer the degradation ladder clamped is never
stored."""

from __future__ import annotations

from typing import Any

import grpc
from frontendkit import gen, router, words, workers

from preheat.core import metric_names as mn
from preheat.core.promtext import parse_samples
from preheat.core.traffic.classes import Traffic, TrafficClass
from preheat.core.traffic.respcache import CacheConfig
from preheat.proto.preheat.v1 import inference_pb2

TRAFFIC = Traffic(
    classes=(
        TrafficClass(name="roomy", ttft_ms=600_000),
        TrafficClass(name="clamped", ttft_ms=1, degraded_max_tokens=3),
        TrafficClass(name="shed", ttft_ms=1),
    ),
    default_class="roomy",
    cache=CacheConfig(enabled=True, ttl_s=600.0),
)


def _greedy(prompt: str = "the same question", max_tokens: int = 6, **kw: Any) -> Any:
    req = gen(prompt, max_tokens, **kw)
    req.sampling.temperature = 0.0
    return req


async def _call(
    r: Any, req: inference_pb2.GenerateRequest, **md: str
) -> tuple[list[inference_pb2.GenerateResponse], dict[str, str]]:
    call = r.inference.Generate(req, timeout=20, metadata=tuple(md.items()))
    chunks = []
    while (chunk := await call.read()) is not grpc.aio.EOF:
        chunks.append(chunk)
    return chunks, dict(await call.trailing_metadata() or ())


def _text(chunks: list[inference_pb2.GenerateResponse]) -> str:
    return "".join(c.text for c in chunks)


def _ids(chunks: list[inference_pb2.GenerateResponse]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


async def test_a_deterministic_generate_is_answered_again_by_the_router() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], traffic=TRAFFIC, tenant_header="x-tenant") as r,
    ):
        first, t1 = await _call(r, _greedy())
        assert t1["x-preheat-cache"] == "miss"
        assert first[-1].worker_id == "w-1"
        again, t2 = await _call(r, _greedy(session_id="another session", priority=3))
        assert t2["x-preheat-cache"] == "hit"
        assert len(again) == 1  # at once, one chunk
        hit = again[0]
        assert hit.worker_id == ""  # no worker was asked
        assert (_text(again), _ids(again)) == (_text(first), _ids(first))
        assert hit.finish_reason == first[-1].finish_reason
        assert hit.usage.completion_tokens == first[-1].usage.completion_tokens == 6
        assert hit.usage.prompt_tokens == first[-1].usage.prompt_tokens
        # not answered from the cache: sampled, another limit, another tenant, a bypass
        sampled = gen("the same question", 6)
        _, t = await _call(r, sampled)
        assert "x-preheat-cache" not in t
        _, t = await _call(r, _greedy(max_tokens=5))
        assert t["x-preheat-cache"] == "miss"
        other, t = await _call(r, _greedy(), **{"x-tenant": "other"})
        assert t["x-preheat-cache"] == "miss"
        assert other[-1].worker_id == "w-1"
        bypassed, t = await _call(r, _greedy(), **{"x-preheat-cache": "bypass"})
        assert t["x-preheat-cache"] == "bypass"
        assert bypassed[-1].worker_id == "w-1"
        seeded = gen("the same question", 6)
        seeded.sampling.seed = 7
        await _call(r, seeded)
        seeded_again, t = await _call(r, seeded)
        assert t["x-preheat-cache"] == "hit"
        assert seeded_again[0].worker_id == ""
        async with r.http.get(r.url + "/metrics") as resp:
            text = await resp.text()
    name = mn.ROUTER_RESPONSE_CACHE + "_total"
    got = {s.labels[mn.LABEL_RESULT]: s.value for s in parse_samples(text, only=(name,))}
    assert got == {"miss": 4, "hit": 2, "bypass": 1, "store": 5}


async def test_errors_rejections_and_clamped_answers_are_never_stored() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], traffic=TRAFFIC) as r,
    ):
        long = words(3000)
        for _ in range(2):  # clamped by the ladder: answered, never stored
            chunks, t = await _call(r, _greedy(long, 20, slo_class="clamped"))
            assert t["x-preheat-cache"] == "miss"
            assert t["x-preheat-degraded"] == "clamp-output; max_tokens_asked=20"
            assert len(_ids(chunks)) == 3
        call = r.inference.Generate(_greedy(long, 20, slo_class="shed"), timeout=20)
        try:
            while await call.read() is not grpc.aio.EOF:
                pass
        except grpc.aio.AioRpcError:
            pass
        assert await call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert len(r.server.dispatcher.response_cache) == 0
