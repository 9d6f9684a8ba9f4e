"""The degradation ladder on the OpenAI passthrough (issue 18, item 4): a pool whose workers
serve OpenAI HTTP (vLLM) applies its classes' ladders exactly as the HTTP front does
(``Dispatcher.decide``/``_admit`` with the request's stats, one copy): a clamped request goes
to vLLM with ``max_tokens`` capped (``max_completion_tokens`` too), a non-sheddable one is
served anyway, a sheddable one is refused early with 429 + ``Retry-After`` (the official
``openai`` client's ``RateLimitError``) without reaching the worker. The step is in the
``X-Preheat-Degraded`` header, the metric and the log; the body stays vLLM's own (no
``preheat`` block), and a clamped answer is an ordinary completion to the client."""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
import openai
import pytest
from fakeopenai import fake_openai, serve_openai
from frontendkit import MODEL, eventually, router, words, workers
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_router_degrade import TRAFFIC  # the same four classes as on the HTTP path
from test_router_fallback import BIG, SMALL, _router, _small_routable, _traffic

from preheat.core import metric_names as mn
from preheat.core.promtext import parse_samples
from preheat.process.tracing import Tracing
from preheat.router.pools import PoolSpec


def _body(**kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": words(3000)}], **kw}


async def test_each_class_takes_its_ladders_step_on_the_passthrough(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="preheat.router")
    async with fake_openai() as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws], traffic=TRAFFIC) as r:
            url = r.url + "/v1/chat/completions"
            clamped = {"x-slo-class": "clamped"}
            async with r.http.post(url, json=_body(max_tokens=20), headers=clamped) as resp:
                assert resp.status == 200, await resp.text()
                assert resp.headers["X-Preheat-Degraded"] == "clamp-output; max_tokens_asked=20"
                out = await resp.json()
            assert out["choices"][0]["finish_reason"] == "length"  # vLLM's answer, unchanged
            assert "preheat" not in out
            assert json.loads(fake.bodies[-1])["max_tokens"] == 3
            body = _body(max_completion_tokens=20, stream=True)
            async with r.http.post(url, json=body, headers=clamped) as resp:
                assert resp.status == 200
                assert resp.headers["X-Preheat-Degraded"] == "clamp-output; max_tokens_asked=20"
                text = await resp.text()
            assert text.endswith("data: [DONE]\n\n")
            sent = json.loads(fake.bodies[-1])
            assert (sent["max_tokens"], sent["max_completion_tokens"]) == (3, 3)
            async with r.http.post(
                url, json=_body(max_tokens=20), headers={"x-slo-class": "must"}
            ) as resp:
                assert resp.status == 200, await resp.text()
                assert resp.headers["X-Preheat-Degraded"] == "queue"
            assert json.loads(fake.bodies[-1])["max_tokens"] == 20
            reached = len(fake.bodies)
            async with r.http.post(
                url, json=_body(max_tokens=20), headers={"x-slo-class": "shed"}
            ) as resp:
                assert resp.status == 429
                assert int(resp.headers["Retry-After"]) >= 1
                err = (await resp.json())["error"]
            assert err["code"] == "rate_limit_exceeded"
            assert len(fake.bodies) == reached  # refused early: the worker never saw it
            async with r.http.post(url, json=_body(max_tokens=20)) as resp:  # within target
                assert resp.status == 200
                assert "X-Preheat-Degraded" not in resp.headers
            assert json.loads(fake.bodies[-1])["max_tokens"] == 20
            async with r.http.get(r.url + "/metrics") as resp:
                metrics = await resp.text()
    name = mn.ROUTER_DEGRADED + "_total"
    steps = {
        (s.labels[mn.LABEL_SLO_CLASS], s.labels[mn.LABEL_STEP]): s.value
        for s in parse_samples(metrics, only=(name,))
    }
    assert steps == {("clamped", "clamp-output"): 2, ("must", "queue"): 1, ("shed", "reject"): 1}
    logged = [
        getattr(rec, "preheat_fields", {}).get("step")
        for rec in caplog.records
        if rec.getMessage() == "request_degraded"
    ]
    assert sorted(logged) == ["clamp-output", "clamp-output", "queue", "reject"]


async def test_the_openai_client_on_the_passthrough_sees_a_clamp_and_an_early_reject() -> None:
    async with fake_openai() as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws], traffic=TRAFFIC) as r:
            client = openai.AsyncOpenAI(base_url=r.url + "/v1", api_key="x", max_retries=0)
            messages: list[openai.types.chat.ChatCompletionMessageParam] = [
                {"role": "user", "content": words(3000)}
            ]
            async with client:
                raw = await client.chat.completions.with_raw_response.create(
                    model=MODEL,
                    messages=messages,
                    max_tokens=20,
                    extra_headers={"x-slo-class": "clamped"},
                )
                done = raw.parse()
                with pytest.raises(openai.RateLimitError) as ei:
                    await client.chat.completions.create(
                        model=MODEL,
                        messages=messages,
                        max_tokens=20,
                        extra_headers={"x-slo-class": "shed"},
                    )
    assert raw.headers["x-preheat-degraded"] == "clamp-output; max_tokens_asked=20"
    assert done.choices[0].finish_reason == "length"
    assert done.usage is not None
    assert json.loads(fake.bodies[0])["max_tokens"] == 3
    assert len(fake.bodies) == 1
    assert int(ei.value.response.headers["retry-after"]) >= 1


@pytest.mark.parametrize("small_serves_openai", [True, False])
async def test_a_request_its_passthrough_pool_cannot_take_goes_to_the_fallback_pool(
    small_serves_openai: bool, traced: tuple[Tracing, InMemorySpanExporter]
) -> None:
    """The big pool (one worker, at most one request in flight) holds a hanging stream;
    the next request of its class goes to the small pool's vLLM as the small model, one
    trace that ends. A fallback pool whose workers do not serve OpenAI HTTP is skipped: the
    ladder's next step (clamp-output) on the big pool."""
    tracing, exporter = traced
    routing = {**_traffic("small"), "maxInFlight": 1}
    async with (
        fake_openai(["hang"]) as big_api,
        fake_openai() as small_api,
        workers(
            [
                {"id": "big-1", "engine": {"model": BIG}},
                {"id": "small-1", "engine": {"model": SMALL}},
            ]
        ) as ws,
    ):
        serve_openai(ws[0], big_api.port)
        if small_serves_openai:
            serve_openai(ws[1], small_api.port)
        pools = [
            PoolSpec(name="big", model=BIG, routing=routing, endpoints=(ws[0].endpoint,)),
            PoolSpec(name="small", model=SMALL, endpoints=(ws[1].endpoint,)),
        ]
        async with _router(pools, tracing) as (server, url), aiohttp.ClientSession() as http:
            await eventually(lambda: _small_routable(server), 10)
            await eventually(lambda: bool(server.pools.get("big").store.snapshot()), 10)
            chat = url + "/v1/chat/completions"
            body = {"model": BIG, "messages": [{"role": "user", "content": "hi"}]}
            async with http.post(chat, json={**body, "stream": True}) as held:
                assert held.status == 200
                await held.content.readuntil(b"\n\n")  # in flight on big-1
                async with http.post(chat, json={**body, "max_tokens": 5}) as resp:
                    assert resp.status == 200, await resp.text()
                    step = resp.headers["X-Preheat-Degraded"]
                    worker = resp.headers["X-Preheat-Worker"]
                    assert (await resp.json())["choices"][0]["finish_reason"] == "length"
                await eventually(lambda: bool(_roots(exporter)), 10)
            async with http.get(url + "/metrics") as resp:
                text = await resp.text()
    name = mn.ROUTER_DEGRADED + "_total"
    got = {
        (s.labels[mn.LABEL_POOL], s.labels[mn.LABEL_STEP]): s.value
        for s in parse_samples(text, only=(name,))
    }
    (root,) = [
        r for r in _roots(exporter) if (r.attributes or {}).get("gen_ai.request.max_tokens") == 5
    ]
    assert root.attributes is not None
    assert root.attributes["dev.preheat.outcome"] == "ok"
    if small_serves_openai:
        assert root.attributes["dev.preheat.fallback_pool"] == "small"
        assert (step, worker) == ("fallback-pool; pool=small", "small-1")
        sent = json.loads(small_api.bodies[0])
        assert (sent["model"], sent["max_tokens"]) == (SMALL, 5)
        assert len(big_api.bodies) == 1
        assert got == {("big", "fallback-pool"): 1}
    else:
        assert (step, worker) == ("clamp-output; max_tokens_asked=5", "big-1")
        assert json.loads(big_api.bodies[1])["max_tokens"] == 2
        assert small_api.bodies == []
        assert got == {("big", "clamp-output"): 1}
        assert "dev.preheat.fallback_pool" not in root.attributes


def _roots(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == "router.request"]
