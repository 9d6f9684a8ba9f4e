"""The OpenAI-compatible HTTP API: the official client, SSE, JSON, errors."""

from __future__ import annotations

import json
from typing import Any

import grpc
import openai
import pytest
from frontendkit import MODEL, gen, router, words, workers


async def _sse_events(resp: Any) -> list[str]:
    body = (await resp.read()).decode()
    return [line[len("data: ") :] for line in body.split("\n") if line.startswith("data: ")]


async def test_openai_client_streams_a_chat_completion() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        client = openai.AsyncOpenAI(base_url=r.url + "/v1", api_key="x", max_retries=0)
        try:
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=[
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "hello"},
                ],
                max_tokens=5,
                stream=True,
                stream_options={"include_usage": True},
                user="session-1",
            )
            parts: list[str] = []
            finish: list[str] = []
            usage = None
            async for chunk in stream:
                for choice in chunk.choices:
                    parts.append(choice.delta.content or "")
                    if choice.finish_reason:
                        finish.append(choice.finish_reason)
                if chunk.usage is not None:
                    usage = chunk.usage
            assert len("".join(parts).split()) == 5
            assert finish == ["length"]
            assert usage is not None
            assert usage.completion_tokens == 5
            models = await client.models.list()
            assert [m.id for m in models.data] == [MODEL]
            whole = await client.completions.create(
                model=MODEL, prompt="one two three", max_tokens=3
            )
            assert len(whole.choices[0].text.split()) == 3
            assert whole.choices[0].finish_reason == "length"
        finally:
            await client.close()


async def test_completions_sse_and_json() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        async with r.http.post(
            r.url + "/v1/completions",
            json={"prompt": "a b c", "max_tokens": 4, "stream": True},
        ) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            assert resp.headers["X-Preheat-Worker"] == "w-1"
            events = await _sse_events(resp)
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert all(c["object"] == "text_completion" for c in chunks)
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert len("".join(c["choices"][0]["text"] for c in chunks).split()) == 4
        # the engine's stage breakdown rides on the chunk that ends the stream, only there
        assert [("preheat" in c) for c in chunks] == [False] * (len(chunks) - 1) + [True]
        extra = chunks[-1]["preheat"]
        assert extra["worker_id"] == "w-1"
        timing = extra["timing"]
        assert set(timing) == {
            "queue_ms", "prefill_ms", "decode_ms", "ttft_ms", "e2e_ms", "router_ms"
        }  # fmt: skip
        assert timing["router_ms"] > 0  # the router's own stage: receipt to the upstream call
        assert 0 < timing["ttft_ms"] <= timing["e2e_ms"]
        assert timing["queue_ms"] + timing["prefill_ms"] == pytest.approx(timing["ttft_ms"], 0.01)

        async with r.http.post(
            r.url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        ) as resp:
            assert resp.status == 200
            body = await resp.json()
        assert body["object"] == "chat.completion"
        assert body["choices"][0]["message"]["role"] == "assistant"
        assert len(body["choices"][0]["message"]["content"].split()) == 3
        assert body["usage"]["completion_tokens"] == 3
        assert resp.headers["X-Preheat-Worker"] == "w-1"
        assert body["preheat"]["worker_id"] == "w-1"
        assert body["preheat"]["timing"]["ttft_ms"] > 0


@pytest.mark.parametrize(
    ("path", "body", "param", "needle"),
    [
        ("/v1/completions", b"{not json", None, "not valid JSON"),
        ("/v1/completions", b'{"max_tokens": 3}', "prompt", "prompt"),
        ("/v1/completions", b'{"prompt": "x", "max_tokens": 0}', "max_tokens", "max_tokens"),
        ("/v1/completions", b'{"prompt": "x", "temperature": 7}', None, "temperature"),
        ("/v1/completions", b'{"prompt": "", "max_tokens": 2}', None, "prompt is empty"),
        ("/v1/chat/completions", b'{"messages": []}', "messages", "messages"),
        (
            "/v1/chat/completions",
            b'{"messages": [{"role": "wizard", "content": "x"}]}',
            None,
            "role",
        ),
    ],
)
async def test_malformed_http_is_400_and_router_keeps_serving(
    path: str, body: bytes, param: str | None, needle: str
) -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        async with r.http.post(
            r.url + path, data=body, headers={"Content-Type": "application/json"}
        ) as resp:
            assert resp.status == 400
            err = (await resp.json())["error"]
        assert needle in err["message"]
        assert err["type"] == "invalid_request_error"
        assert err["code"] == "invalid_argument"
        if param is not None:
            assert err["param"] == param
        async with r.http.post(
            r.url + "/v1/completions", json={"prompt": words(4), "max_tokens": 2}
        ) as resp:
            assert resp.status == 200


async def test_unknown_path_is_json_404() -> None:
    async with router([]) as r, r.http.get(r.url + "/v1/nothing") as resp:
        assert resp.status == 404
        assert "error" in await resp.json()


async def test_no_endpoint_is_503_with_retry_after() -> None:
    async with (
        router([], queue_timeout_s=0.2) as r,
        r.http.post(r.url + "/v1/completions", json={"prompt": "x"}) as resp,
    ):
        assert resp.status == 503
        assert "Retry-After" in resp.headers
        assert "no routable endpoint" in (await resp.json())["error"]["message"]


async def test_model_and_context_window_come_from_the_workers() -> None:
    # no --model: /v1/models names what the workers serve, and the router checks the
    # workers' context window (4096) itself before routing
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws], model="") as r:
        async with r.http.get(r.url + "/v1/models") as resp:
            assert resp.status == 200
            assert [m["id"] for m in (await resp.json())["data"]] == [MODEL]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await r.generate(gen(words(4000), max_tokens=200))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "maximum context length is 4096 tokens" in (err.value.details() or "")
        # refused by the router itself: the worker never saw it
        seen = ws[0].server.metrics.registry.get_sample_value(
            "preheat_worker_requests_total", {"outcome": "invalid"}
        )
        assert (seen or 0.0) == 0.0
