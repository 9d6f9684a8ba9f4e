"""The router's response cache (issue 18, item 5): a deterministic request's answer is
served again by the router while fresh (streamed at once too), marked as a hit; sampled
requests, another tenant's, a bypass header and a model change do not get it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from fakeopenai import fake_openai, serve_openai
from frontendkit import MODEL, router, words, workers

from preheat.core import metric_names as mn
from preheat.core.promtext import parse_samples
from preheat.core.traffic.classes import Traffic, TrafficClass
from preheat.core.traffic.respcache import CacheConfig

TRAFFIC = Traffic(cache=CacheConfig(enabled=True, ttl_s=600.0))
BODY: dict[str, Any] = {"prompt": "the same question", "max_tokens": 6, "temperature": 0}


async def _post(r: Any, body: dict[str, Any], **headers: str) -> tuple[int, dict[str, str], Any]:
    async with r.http.post(r.url + "/v1/completions", json=body, headers=headers) as resp:
        text = await resp.text()
        data = json.loads(text) if not body.get("stream") else text
        return resp.status, dict(resp.headers), data


async def test_a_deterministic_answer_is_served_again_by_the_router() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], traffic=TRAFFIC, tenant_header="x-tenant") as r,
    ):
        status, h1, first = await _post(r, BODY)
        assert status == 200
        assert h1["X-Preheat-Cache"] == "miss"
        status, h2, again = await _post(r, {**BODY, "user": "someone else's id"})
        assert h2["X-Preheat-Cache"] == "hit"
        assert "X-Preheat-Worker" not in h2  # no worker was asked
        assert again["choices"][0]["text"] == first["choices"][0]["text"]
        assert again["usage"]["completion_tokens"] == first["usage"]["completion_tokens"]
        assert again["preheat"]["cache"] == "hit"
        assert again["id"] != first["id"]
        # streamed: at once, as one chunk and [DONE]
        _, h3, sse = await _post(r, {**BODY, "stream": True})
        assert h3["X-Preheat-Cache"] == "hit"
        assert json.dumps(first["choices"][0]["text"])[1:-1] in sse
        assert sse.rstrip().endswith("data: [DONE]")
        # not cached: sampled, another output limit, another tenant, the bypass header
        _, h, _ = await _post(r, {**BODY, "temperature": 0.8})
        assert "X-Preheat-Cache" not in h
        _, h, _ = await _post(r, {**BODY, "max_tokens": 7})
        assert h["X-Preheat-Cache"] == "miss"
        _, h, _ = await _post(r, BODY, **{"x-tenant": "other"})
        assert h["X-Preheat-Cache"] == "miss"
        _, h, _ = await _post(r, BODY, **{"x-preheat-cache": "bypass"})
        assert h["X-Preheat-Cache"] == "bypass"
        assert "X-Preheat-Worker" in h
        async with r.http.get(r.url + "/metrics") as resp:
            text = await resp.text()
        name = mn.ROUTER_RESPONSE_CACHE + "_total"
        got = {s.labels[mn.LABEL_RESULT]: s.value for s in parse_samples(text, only=(name,))}
        assert got == {"miss": 3, "hit": 2, "bypass": 1, "store": 4}


async def test_a_model_change_empties_the_pools_cache() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], traffic=TRAFFIC) as r,
    ):
        await _post(r, BODY)
        d = r.server.dispatcher
        assert len(d.response_cache) == 1
        d.reconfigure(d.scheduler_config, dataclasses.replace(d.config, model="another-model"))
        assert len(d.response_cache) == 0


async def test_the_cache_is_off_by_default() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        for _ in range(2):
            _, h, _ = await _post(r, BODY)
            assert "X-Preheat-Cache" not in h


async def test_an_answer_the_ladder_clamped_is_never_stored() -> None:
    """A clamped answer is shorter than asked: served to its request (marked degraded),
    never stored under the request's key for a later one (the HTTP front and the OpenAI
    passthrough; gRPC: test_router_grpc_cache.py)."""
    clamping = dataclasses.replace(
        TRAFFIC,
        classes=(TrafficClass(name="clamped", ttft_ms=1, degraded_max_tokens=3),),
        default_class="clamped",
    )
    body = {**BODY, "prompt": words(3000), "max_tokens": 20}
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], traffic=clamping) as r,
    ):
        for _ in range(2):
            status, h, out = await _post(r, body)
            assert status == 200
            assert h["X-Preheat-Degraded"] == "clamp-output; max_tokens_asked=20"
            assert (h["X-Preheat-Cache"], out["usage"]["completion_tokens"]) == ("miss", 3)
        assert len(r.server.dispatcher.response_cache) == 0
    chat = {"model": MODEL, "messages": [{"role": "user", "content": words(3000)}]}
    async with fake_openai() as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws], traffic=clamping) as r:
            for _ in range(2):
                url = r.url + "/v1/chat/completions"
                req = {**chat, "max_tokens": 20, "temperature": 0}
                async with r.http.post(url, json=req) as resp:
                    assert resp.status == 200
                    assert resp.headers["X-Preheat-Cache"] == "miss"
                    assert resp.headers["X-Preheat-Degraded"].startswith("clamp-output")
            assert len(fake.bodies) == 2
            assert len(r.server.dispatcher.response_cache) == 0
