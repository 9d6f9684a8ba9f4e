"""The response cache on the OpenAI passthrough (issue 18, item 5): a pool whose workers
serve OpenAI HTTP (vLLM) answers a deterministic request again from the router's cache,
streamed or not, marked as a hit and without asking a worker or charging the tenant;
what the cache cannot give back exactly (logprobs, sampled answers, tool calls) always goes
to the worker; another tenant's answer and a bypass header do not serve it."""

from __future__ import annotations

import json
from typing import Any

from fakeopenai import WHOLE, fake_openai, serve_openai
from frontendkit import MODEL, router, workers

from preheat.core.traffic.classes import TenantQuota, Traffic
from preheat.core.traffic.respcache import CacheConfig
from preheat.router.frontend.passthrough_cache import cache_params, stored_answer

TRAFFIC = Traffic(
    cache=CacheConfig(enabled=True, ttl_s=600.0),
    tenants=(
        TenantQuota(name="demo", requests_per_s=1, request_burst=1),
        TenantQuota(name="*", requests_per_s=1000),
    ),
)
CHAT = "/v1/chat/completions"
BODY: dict[str, Any] = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "the same question"}],
    "max_tokens": 6,
    "temperature": 0,
}


async def _post(r: Any, body: dict[str, Any], **headers: str) -> tuple[int, dict[str, str], Any]:
    async with r.http.post(r.url + CHAT, json=body, headers=headers) as resp:
        text = await resp.text()
        data = json.loads(text) if not body.get("stream") else text
        return resp.status, dict(resp.headers), data


async def test_a_deterministic_answer_is_served_again_by_the_router() -> None:
    async with fake_openai() as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws], traffic=TRAFFIC, tenant_header="x-tenant") as r:
            demo = {"x-tenant": "demo"}
            status, h1, first = await _post(r, BODY, **demo)
            assert status == 200
            assert h1["X-Preheat-Cache"] == "miss"
            assert first == WHOLE  # vLLM's answer, unchanged
            # the same question (another user id): the router answers, and demo's quota of
            # 1 request/s is not charged for it
            status, h2, again = await _post(r, {**BODY, "user": "someone"}, **demo)
            assert (status, h2["X-Preheat-Cache"]) == (200, "hit")
            assert "X-Preheat-Worker" not in h2
            assert again["choices"][0]["message"]["content"] == "a b c"
            assert again["choices"][0]["finish_reason"] == "length"
            assert again["usage"]["completion_tokens"] == WHOLE["usage"]["completion_tokens"]
            assert again["preheat"]["cache"] == "hit"
            # streamed at once, as one chunk, with the usage chunk it asked for
            streamed = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
            status, h3, sse = await _post(r, streamed, **demo)
            assert (status, h3["X-Preheat-Cache"]) == (200, "hit")
            events = [json.loads(x[6:]) for x in sse.split("\n\n") if x.startswith("data: {")]
            assert "".join(
                e["choices"][0]["delta"].get("content", "") for e in events if e["choices"]
            ) == ("a b c")
            assert events[-1]["usage"]["completion_tokens"] == 3
            assert len(fake.bodies) == 1  # the worker was asked once
            # another tenant's request, a bypass and a sampled one go to the worker
            _, h4, _ = await _post(r, BODY, **{"x-tenant": "other"})
            assert h4["X-Preheat-Cache"] == "miss"
            _, h5, _ = await _post(r, BODY, **{"x-tenant": "other", "x-preheat-cache": "bypass"})
            assert h5["X-Preheat-Cache"] == "bypass"
            _, h6, _ = await _post(r, {**BODY, "temperature": 0.7}, **{"x-tenant": "other"})
            assert "X-Preheat-Cache" not in h6
            _, h7, _ = await _post(r, {**BODY, "logprobs": True}, **{"x-tenant": "other"})
            assert "X-Preheat-Cache" not in h7
            assert len(fake.bodies) == 5


def test_only_what_the_cache_gives_back_exactly_is_cacheable() -> None:
    chat = {"messages": [{"role": "user", "content": "q"}], "temperature": 0, "priority": 2}
    params = cache_params({**chat, "model": "m", "stream": True, "cache_salt": "t"}, chat=True)
    assert params == {"messages": chat["messages"], "temperature": 0}  # the router's own out
    assert cache_params({**chat, "temperature": None, "seed": 3}, chat=True) is not None
    assert cache_params({**chat, "temperature": 0.5}, chat=True) is None
    assert cache_params({**chat, "n": 2}, chat=True) is None
    assert cache_params({**chat, "tools": [{"type": "function"}]}, chat=True) is None
    assert cache_params({**chat, "temperature": "0"}, chat=True) is None
    assert cache_params({"prompt": [1, 2, 3], "temperature": 0}, chat=False) is not None
    assert cache_params({"prompt": ["a", "b"], "temperature": 0}, chat=False) is None
    whole = json.dumps(WHOLE).encode()
    answer = stored_answer(whole, chat=True)
    assert answer is not None
    assert (answer.text, answer.prompt_tokens, answer.completion_tokens) == ("a b c", 7, 3)
    tool = json.loads(whole)
    tool["choices"][0]["message"]["tool_calls"] = [{"id": "c", "type": "function"}]
    assert stored_answer(json.dumps(tool).encode(), chat=True) is None
    aborted = json.loads(whole)
    aborted["choices"][0]["finish_reason"] = "abort"
    assert stored_answer(json.dumps(aborted).encode(), chat=True) is None
    assert stored_answer(b"not json", chat=True) is None
