"""The paths and fields ``vllm serve`` has that clients use: ``/v1/models/{id}``, ``/health``,
``/tokenize``, ``/detokenize``, ``system_fingerprint``, ``usage: null`` on a stream's other
chunks, and no ``finish_reason: "abort"`` (an aborted request ends with an error)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from frontendkit import MODEL, eventually, router, words, workers

from preheat.engine.simtokenizer import SimTokenizer
from preheat.router.frontend.openai_schema import ChatMessage, flatten_chat


def _events(body: bytes) -> list[str]:
    text = body.decode()
    return [line[len("data: ") :] for line in text.split("\n") if line.startswith("data: ")]


async def test_model_by_id_and_unknown_model_404() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        client = openai.AsyncOpenAI(base_url=r.url + "/v1", api_key="x", max_retries=0)
        try:
            model = await client.models.retrieve(MODEL)
            assert model.id == MODEL
            assert model.object == "model"
            with pytest.raises(openai.NotFoundError) as exc:
                await client.models.retrieve("gpt-9")
            assert exc.value.code == "model_not_found"
        finally:
            await client.close()
        async with r.http.get(r.url + "/v1/models/org/name-with-slash") as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["code"] == "model_not_found"


async def test_health_is_200_empty_when_serving_and_503_when_not() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws]) as r,
        r.http.get(r.url + "/health") as resp,
    ):
        assert resp.status == 200
        assert await resp.read() == b""
    async with router([]) as r, r.http.get(r.url + "/health") as resp:
        assert resp.status == 503
        assert await resp.read() == b""


async def test_tokenize_and_detokenize_answer_as_vllm() -> None:
    tok = SimTokenizer()
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        text = "the quick brown fox"
        async with r.http.post(r.url + "/tokenize", json={"prompt": text}) as resp:
            assert resp.status == 200
            body = await resp.json()
        assert body == {
            "count": 4,
            "max_model_len": 4096,
            "tokens": tok.encode(text),
            "token_strs": None,
        }
        payload: dict[str, Any] = {"model": MODEL, "prompt": text, "return_token_strs": True}
        async with r.http.post(r.url + "/tokenize", json=payload) as resp:
            assert (await resp.json())["token_strs"] == text.split()

        messages = [{"role": "system", "content": "be terse"}, {"role": "user", "content": "hi"}]
        flat = flatten_chat([ChatMessage.model_validate(m) for m in messages])
        async with r.http.post(r.url + "/tokenize", json={"messages": messages}) as resp:
            assert resp.status == 200
            assert (await resp.json())["tokens"] == tok.encode(flat)  # what the engine gets
        no_prompt = {"messages": messages, "add_generation_prompt": False}
        async with r.http.post(r.url + "/tokenize", json=no_prompt) as resp:
            assert (await resp.json())["count"] == len(tok.encode(flat)) - 1  # no "assistant:"

        async with r.http.post(r.url + "/detokenize", json={"tokens": [1, 2, 3]}) as resp:
            assert resp.status == 200
            assert await resp.json() == {"prompt": tok.decode([1, 2, 3])}

        for path, bad, status, code in [
            ("/tokenize", {"model": "gpt-9", "prompt": "x"}, 404, "model_not_found"),
            ("/tokenize", {"prompt": 5}, 400, "invalid_argument"),
            ("/tokenize", {"prompt": "x", "chat_template": "{{x}}"}, 400, "invalid_argument"),
            ("/detokenize", {"tokens": [-1]}, 400, "invalid_argument"),
            ("/detokenize", {"model": "gpt-9", "tokens": [1]}, 404, "model_not_found"),
        ]:
            async with r.http.post(r.url + path, json=bad) as resp:
                assert resp.status == status, (path, bad)
                assert (await resp.json())["error"]["code"] == code, (path, bad)


async def test_system_fingerprint_and_usage_null_on_other_chunks() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        body = {"prompt": "hello", "max_tokens": 3}
        async with r.http.post(r.url + "/v1/completions", json=body) as resp:
            whole = await resp.json()
        assert whole["system_fingerprint"].startswith("preheat-")

        stream = {**body, "stream": True, "stream_options": {"include_usage": True}}
        async with r.http.post(r.url + "/v1/completions", json=stream) as resp:
            events = _events(await resp.read())
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert all(c["system_fingerprint"] == whole["system_fingerprint"] for c in chunks)
        assert all("usage" in c for c in chunks)  # OpenAI: the key on every chunk
        assert [c["usage"] is None for c in chunks] == [True] * (len(chunks) - 1) + [False]
        assert chunks[-1]["usage"]["completion_tokens"] == 3

        async with r.http.post(r.url + "/v1/completions", json={**body, "stream": True}) as resp:
            events = _events(await resp.read())
        assert all("usage" not in json.loads(e) for e in events[:-1])  # not asked for


@pytest.mark.parametrize("stream", [True, False])
async def test_an_aborted_request_ends_with_an_error_not_finish_reason_abort(
    stream: bool,
) -> None:
    spec = {"id": "w-1", "drain_grace_s": 0.2, "engine": {"time_scale": 1.0}}
    async with workers([spec]) as ws, router([w.endpoint for w in ws]) as r:

        async def call() -> tuple[int, bytes]:
            body = {"prompt": words(8), "max_tokens": 3000, "stream": stream}
            async with r.http.post(r.url + "/v1/completions", json=body, timeout=60) as resp:
                return resp.status, await resp.read()

        task = asyncio.create_task(call())
        await eventually(lambda: bool(ws[0].server._in_flight), timeout_s=20)
        ws[0].server.begin_drain()  # grace 0.2 s: the request in flight is aborted
        status, raw = await asyncio.wait_for(task, 30)
        assert b'"abort"' not in raw
        if stream:
            events = _events(raw)
            assert events[-1] == "[DONE]"
            last = json.loads(events[-2])
            assert last["error"]["code"] == "unavailable"
            assert "stopped the request before it finished" in last["error"]["message"]
        else:
            assert status == 503
            assert json.loads(raw)["error"]["code"] == "unavailable"
