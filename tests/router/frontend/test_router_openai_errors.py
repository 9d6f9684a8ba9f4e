"""The router's own errors carry the codes OpenAI clients and gateways key on, and the
official ``openai`` client turns them into its typed exceptions."""

from __future__ import annotations

import re
from typing import Any

import openai
import pytest
from frontendkit import MODEL, router, words, workers


def _message(err: openai.APIStatusError) -> str:
    """The error body's message (the client's ``message`` has an ``Error code: N -`` prefix)."""
    assert isinstance(err.body, dict)
    return str(err.body["message"])


def _client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


async def test_unknown_model_is_404_model_not_found() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        client = _client(r.url)
        try:
            with pytest.raises(openai.NotFoundError) as exc:
                await client.chat.completions.create(
                    model="gpt-9", messages=[{"role": "user", "content": "hi"}], max_tokens=2
                )
            assert exc.value.code == "model_not_found"
            assert exc.value.type == "invalid_request_error"
            assert exc.value.param == "model"
            assert _message(exc.value).startswith(
                "The model `gpt-9` does not exist or you do not have access to it"
            )
            with pytest.raises(openai.NotFoundError) as exc:
                await client.completions.create(model="gpt-9", prompt="hi", max_tokens=2)
            assert exc.value.code == "model_not_found"
        finally:
            await client.close()


async def test_prompt_over_the_context_window_is_context_length_exceeded() -> None:
    # the sim workers' window: 4096 tokens
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        client = _client(r.url)
        try:
            with pytest.raises(openai.BadRequestError) as exc:
                await client.completions.create(model=MODEL, prompt=words(5000), max_tokens=2)
            assert exc.value.code == "context_length_exceeded"
            assert exc.value.type == "invalid_request_error"
            # the router stops counting once past the window ("at least", when it stopped)
            assert re.match(
                r"This model's maximum context length is 4096 tokens\. However, your prompt "
                r"resulted in (at least )?5000 tokens\. Please reduce the length of the prompt\.",
                _message(exc.value),
            )
            with pytest.raises(openai.BadRequestError) as exc:
                await client.completions.create(model=MODEL, prompt=words(4000), max_tokens=200)
            assert exc.value.code == "context_length_exceeded"
            assert (
                "you requested 4200 tokens (4000 in the prompt, 200 in the completion)"
                in _message(exc.value)
            )
            with pytest.raises(openai.BadRequestError) as exc:
                await client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": words(5000)}],
                    max_tokens=2,
                )
            assert exc.value.code == "context_length_exceeded"
        finally:
            await client.close()


async def test_admission_refusal_is_429_rate_limit_exceeded_with_retry_after() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws]) as r,
    ):
        client = _client(r.url)
        try:
            # a first-token deadline no worker can meet: admission refuses it
            with pytest.raises(openai.RateLimitError) as exc:
                await client.completions.create(
                    model=MODEL,
                    prompt=words(3000),
                    max_tokens=2,
                    extra_headers={"x-ttft-deadline-ms": "1"},
                )
            assert exc.value.code == "rate_limit_exceeded"
            assert exc.value.type == "rate_limit_error"
            assert int(exc.value.response.headers["Retry-After"]) >= 1
        finally:
            await client.close()


async def test_no_endpoint_is_503_with_retry_after() -> None:
    async with router([], queue_timeout_s=0.2) as r:
        client = _client(r.url)
        try:
            with pytest.raises(openai.InternalServerError) as exc:
                await client.completions.create(model=MODEL, prompt="hi", max_tokens=2)
            assert exc.value.status_code == 503
            assert int(exc.value.response.headers["Retry-After"]) >= 1
        finally:
            await client.close()


async def test_a_refused_stream_is_refused_before_it_starts() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        body: dict[str, Any] = {"model": "gpt-9", "prompt": "hi", "stream": True}
        async with r.http.post(r.url + "/v1/completions", json=body) as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["code"] == "model_not_found"
