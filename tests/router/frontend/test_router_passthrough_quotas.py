"""Tenant quotas on the OpenAI passthrough (issue 18, item 3): a pool whose workers serve
OpenAI HTTP (vLLM) charges its tenants exactly as the HTTP front does: over the quota, 429
with ``Retry-After``, OpenAI's error body and ``x-ratelimit-*`` headers, which the official
``openai`` client raises as ``RateLimitError``; nothing over the quota reaches the worker.
A tenant holding its fair share of a busy pool is refused as on the other paths. The
class's priority goes upstream in the body's ``priority`` (vLLM's field)."""

from __future__ import annotations

import asyncio
import contextlib
import json

import openai
import pytest
from fakeopenai import fake_openai, serve_openai
from frontendkit import MODEL, router, workers

from preheat.core import metric_names as mn
from preheat.core.promtext import parse_samples
from preheat.core.routing.admission import AdmissionConfig
from preheat.core.traffic.classes import TenantQuota, Traffic, TrafficClass

TRAFFIC = Traffic(
    classes=(
        TrafficClass(name="standard", ttft_ms=60_000, priority=1),
        TrafficClass(name="batch", ttft_ms=60_000, priority=2),
    ),
    default_class="standard",
    tenants=(
        TenantQuota(name="demo", requests_per_s=1, request_burst=2),
        TenantQuota(name="*", requests_per_s=1000),
    ),
)
MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


async def test_the_passthrough_honours_a_tenants_quota() -> None:
    async with fake_openai() as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws], traffic=TRAFFIC, tenant_header="x-tenant") as r:
            client = openai.AsyncOpenAI(
                base_url=r.url + "/v1",
                api_key="x",
                max_retries=0,
                default_headers={"x-tenant": "demo"},
            )
            async with client:
                for _ in range(2):  # the burst
                    await client.chat.completions.create(
                        model=MODEL, messages=MESSAGES, max_tokens=2
                    )
                with pytest.raises(openai.RateLimitError) as ei:
                    await client.chat.completions.create(
                        model=MODEL, messages=MESSAGES, max_tokens=2
                    )
            assert len(fake.bodies) == 2  # the refused request never reached the worker
            err = ei.value
            assert err.status_code == 429
            assert err.code == "rate_limit_exceeded"
            assert "rate limit exceeded for tenant 'demo'" in err.message
            headers = err.response.headers
            assert headers["retry-after"] == "1"
            assert 0 < int(headers["retry-after-ms"]) <= 1000
            assert headers["x-ratelimit-limit-requests"] == "2"
            assert headers["x-ratelimit-remaining-requests"] == "0"
            # another tenant is served meanwhile, and a class sets the engine's priority
            other = {"x-tenant": "other", "x-slo-class": "batch"}
            body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 2, "priority": -5}
            async with r.http.post(
                r.url + "/v1/chat/completions", json=body, headers=other
            ) as resp:
                assert resp.status == 200
            sent = [json.loads(b) for b in fake.bodies]
            assert [b.get("priority") for b in sent] == [1, 1, 2]
            async with r.http.get(r.url + "/metrics") as resp:
                text = await resp.text()
            name = mn.ROUTER_RATE_LIMITED + "_total"
            got = {
                (s.labels[mn.LABEL_TENANT], s.labels[mn.LABEL_LIMIT]): s.value
                for s in parse_samples(text, only=(name,))
            }
            assert got == {("demo", "requests"): 1}


async def test_the_passthrough_keeps_a_tenant_to_its_fair_share_of_a_busy_pool() -> None:
    anyone = Traffic(tenants=(TenantQuota(name="*", requests_per_s=1000),))
    # calm's first request is answered; noisy's three streams then hang open upstream
    async with fake_openai(["ok", "hang", "hang", "hang", "ok"]) as fake, workers([{}]) as ws:
        serve_openai(ws[0], fake.port)
        async with (
            router(
                [w.endpoint for w in ws],
                traffic=anyone,
                tenant_header="x-tenant",
                admission=AdmissionConfig(max_in_flight=4),
            ) as r,
            contextlib.AsyncExitStack() as streams,
        ):
            url = r.url + "/v1/chat/completions"
            body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 2}
            calm, noisy = {"x-tenant": "calm"}, {"x-tenant": "noisy"}
            async with r.http.post(url, json=body, headers=calm) as resp:
                assert resp.status == 200  # calm is a tenant of late
            for _ in range(3):  # noisy holds 3 of the 4 slots: the pool is busy
                resp = await streams.enter_async_context(
                    r.http.post(url, json={**body, "stream": True}, headers=noisy)
                )
                assert resp.status == 200
                assert await asyncio.wait_for(resp.content.readany(), 10)  # the first event
            async with r.http.post(url, json=body, headers=noisy) as resp:  # its share: 3 of 4
                assert resp.status == 429
                assert resp.headers["Retry-After"] == "1"
                err = (await resp.json())["error"]
                assert "tenant 'noisy' holds 3 of the pool's 4 requests in flight" in err["message"]
            async with r.http.post(url, json=body, headers=calm) as resp:  # the free slot
                assert resp.status == 200
            assert len(fake.bodies) == 5  # the refused one never reached the worker
