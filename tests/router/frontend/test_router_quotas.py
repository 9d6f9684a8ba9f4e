"""Tenant quotas at the router (issue 18, item 3): a tenant over its requests/s or
tokens/min bucket gets 429 with Retry-After from the bucket, OpenAI's error body
(``code: rate_limit_exceeded``) and ``x-ratelimit-*`` headers, which the official ``openai``
client raises as ``RateLimitError``; never more than its quota plus burst is served, and
other tenants are not affected."""

from __future__ import annotations

from typing import Any

import grpc
import openai
import pytest
from frontendkit import gen, router, workers

from preheat.api.pool import to_config
from preheat.core import metric_names as mn
from preheat.core.promtext import parse_samples
from preheat.core.traffic.classes import TenantQuota, Traffic, TrafficClass
from preheat.local.runtime import router_tenant_args
from preheat.router.frontend.metrics import RouterOutcome

TRAFFIC = Traffic(
    classes=(TrafficClass(name="standard", ttft_ms=60_000),),
    default_class="standard",
    tenants=(
        TenantQuota(name="demo", requests_per_s=1, request_burst=2),
        TenantQuota(name="tokens", tokens_per_min=60, token_burst=40),
        TenantQuota(name="*", requests_per_s=1000),
    ),
)
BODY: dict[str, Any] = {"prompt": "hello there", "max_tokens": 2}


async def test_a_tenant_over_its_request_rate_gets_429_with_openais_headers() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], traffic=TRAFFIC, tenant_header="x-tenant") as r,
    ):
        url = r.url + "/v1/completions"
        statuses = []
        limited: list[tuple[dict[str, str], dict[str, Any]]] = []
        for _ in range(6):  # at once: far over 1/s
            async with r.http.post(url, json=BODY, headers={"x-tenant": "demo"}) as resp:
                statuses.append(resp.status)
                if resp.status == 429:
                    limited.append((dict(resp.headers), await resp.json()))
        assert statuses.count(200) == 2  # the burst, and no more
        assert statuses.count(429) == 4
        headers, body = limited[0]
        assert body["error"]["code"] == "rate_limit_exceeded"
        assert body["error"]["type"] == "rate_limit_error"
        assert (
            "rate limit exceeded for tenant 'demo': 1 requests/s (burst 2)"
            in (body["error"]["message"])
        )
        assert headers["Retry-After"] == "1"
        assert 0 < int(headers["retry-after-ms"]) <= 1000
        assert headers["x-ratelimit-limit-requests"] == "2"
        assert headers["x-ratelimit-remaining-requests"] == "0"
        # another tenant (the '*' entry) is served meanwhile
        async with r.http.post(url, json=BODY, headers={"x-tenant": "other"}) as resp:
            assert resp.status == 200
        # gRPC: RESOURCE_EXHAUSTED with the retry-after trailer
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await r.generate(gen("x", 2), metadata=(("x-tenant", "demo"),))
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert float(dict(ei.value.trailing_metadata() or ())["retry-after-s"]) > 0
        async with r.http.get(r.url + "/metrics") as resp:
            text = await resp.text()
        name = mn.ROUTER_RATE_LIMITED + "_total"
        got = {
            (s.labels[mn.LABEL_TENANT], s.labels[mn.LABEL_LIMIT]): s.value
            for s in parse_samples(text, only=(name,))
        }
        assert got == {("demo", "requests"): 5}
        # a quota refusal is not demand the pool refused (the autoscaler's signal)
        refused = mn.ROUTER_REFUSED + "_total"
        assert all(s.value == 0 for s in parse_samples(text, only=(refused,)))
        requests = mn.ROUTER_REQUESTS + "_total"
        limited_n = sum(
            s.value
            for s in parse_samples(text, only=(requests,))
            if s.labels[mn.LABEL_OUTCOME] == RouterOutcome.RATE_LIMITED.value
        )
        assert limited_n == 5  # 4 over HTTP, 1 over gRPC


async def test_the_token_bucket_charges_prompt_plus_max_tokens_and_refunds_the_rest() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], traffic=TRAFFIC, tenant_header="x-tenant") as r,
    ):
        url = r.url + "/v1/completions"
        hdr = {"x-tenant": "tokens"}
        # 2 prompt tokens + 30: more than the 40-token burst can ever hold twice ...
        async with r.http.post(url, json={**BODY, "max_tokens": 30}, headers=hdr) as resp:
            assert resp.status == 200
        async with r.http.post(url, json={**BODY, "max_tokens": 30}, headers=hdr) as resp:
            assert resp.status == 429
            assert resp.headers["x-ratelimit-limit-tokens"] == "40"
        # ... and a request that could never fit is a 400, not a 429 to retry forever
        async with r.http.post(url, json={**BODY, "max_tokens": 100}, headers=hdr) as resp:
            assert resp.status == 400
            assert (
                "more than tenant 'tokens''s token burst of 40"
                in ((await resp.json())["error"]["message"])
            )


async def test_the_openai_client_raises_rate_limit_error_with_a_usable_retry_after() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], traffic=TRAFFIC, tenant_header="x-tenant") as r,
    ):
        client = openai.AsyncOpenAI(
            base_url=r.url + "/v1",
            api_key="x",
            max_retries=0,
            default_headers={"x-tenant": "demo"},
        )
        async with client:
            for _ in range(2):
                done = await client.completions.create(model="", prompt="hi", max_tokens=2)
                assert done.choices[0].text
            with pytest.raises(openai.RateLimitError) as ei:
                await client.completions.create(model="", prompt="hi", max_tokens=2)
        err = ei.value
        assert err.status_code == 429
        assert err.code == "rate_limit_exceeded"
        assert 0 < float(err.response.headers["retry-after"]) <= 1
        assert int(err.response.headers["x-ratelimit-remaining-requests"]) == 0


def test_preheat_up_reads_the_tenant_header_only_for_pools_with_tenants() -> None:
    spec: dict[str, Any] = {"model": {"name": "m"}, "replicas": {"max": 1}}
    plain = to_config(spec, name="p", namespace="")
    tenants = {"tenants": [{"name": "demo", "requestsPerSecond": 1, "requestBurst": 2}]}
    with_tenants = to_config({**spec, "traffic": tenants}, name="q", namespace="")
    assert router_tenant_args([plain], []) == []
    assert router_tenant_args([plain, with_tenants], []) == ["--tenant-header", "x-tenant"]
    assert router_tenant_args([with_tenants], ["--api-keys-file", "keys"]) == []
    assert router_tenant_args([with_tenants], ["--tenant-header=x-org"]) == []
