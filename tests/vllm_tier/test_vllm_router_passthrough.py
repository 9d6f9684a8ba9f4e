"""The router's OpenAI passthrough in front of a real vLLM worker (CPU build, tiny model).

One in-process vLLM worker serving vLLM's own OpenAI app (``WorkerStatus.openai_port``) and
one in-process router over it with the model's tokenizer (``hf:`` the tiny model's folder).
The same requests go straight to the worker and through the router (temperature 0, a fixed
seed): the answers match; parameters only vLLM applies pass through; the router's
``/tokenize`` equals vLLM's; the prefix blocks the router hashes for a chat are blocks vLLM
reports cached (its KV events, ``WatchCache``), which shows the templated ids are the
engine's; and the errors the router answers itself have OpenAI's codes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="needs the vLLM CPU build (run in .venv-vllm)")

import aiohttp
import openai
import pytest_asyncio

from preheat.core.metric_names import (
    ROUTER_ACTUAL_CACHED_BLOCKS,
    ROUTER_PREDICTED_CACHED_BLOCKS,
)
from preheat.core.traffic.classes import TenantQuota, Traffic, TrafficClass
from preheat.core.traffic.respcache import CacheConfig
from preheat.router.app import RouterConfig, RouterServer
from preheat.router.endpoints import DiscoveredEndpoint, StaticDiscovery
from preheat.router.frontend.passthrough import PromptIds
from preheat.router.frontend.tokenizer import HFPromptTokenizer, prompt_block_hashes
from preheat.worker.engines import build_worker_engine
from preheat.worker.main import add_arguments
from preheat.worker.server import WorkerConfig, WorkerServer

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="module")]

MODEL = "tiny-llama"
MAX_MODEL_LEN = 1024


@dataclass
class Running:
    worker: WorkerServer
    router: RouterServer
    direct: openai.AsyncOpenAI
    routed: openai.AsyncOpenAI
    worker_url: str
    router_url: str
    http: aiohttp.ClientSession
    model_dir: Path


def _flags(tiny_model: Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(
        [
            "--engine",
            "vllm",
            "--model",
            str(tiny_model),
            "--served-model-name",
            MODEL,
            "--vllm-max-model-len",
            str(MAX_MODEL_LEN),
            "--vllm-max-num-seqs",
            "4",
            "--vllm-dtype",
            "float32",
            # usage.prompt_tokens_details.cached_tokens: vLLM's prefix-cache hits per request
            "--vllm-serve-arg=--enable-prompt-tokens-details",
        ]
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def running(tiny_model: Path) -> AsyncIterator[Running]:
    engine, factory = build_worker_engine(_flags(tiny_model))
    assert factory is not None
    worker = WorkerServer(
        engine,
        WorkerConfig(worker_id="w-1", drain_grace_s=5.0, stop_grace_s=1.0, openai_port=0),
        openai=factory,
    )
    ports = await worker.start()
    router: RouterServer | None = None
    try:
        await asyncio.wait_for(worker.wait_warm(), 240)
        router = RouterServer(
            StaticDiscovery([DiscoveredEndpoint(address=f"127.0.0.1:{ports.grpc}", id="w-1")]),
            RouterConfig(model=MODEL, tokenizer=f"hf:{tiny_model}", refresh_interval_s=0.2),
        )
        rports = await router.start()
        await router.wait_ready(1, timeout_s=30)
        worker_url = f"http://127.0.0.1:{ports.openai}"
        router_url = f"http://127.0.0.1:{rports.http}"
        async with (
            openai.AsyncOpenAI(base_url=worker_url + "/v1", api_key="x", max_retries=0) as d,
            openai.AsyncOpenAI(base_url=router_url + "/v1", api_key="x", max_retries=0) as r,
            aiohttp.ClientSession() as http,
        ):
            yield Running(worker, router, d, r, worker_url, router_url, http, tiny_model)
    finally:
        if router is not None:
            await asyncio.wait_for(router.stop(), 30)
        await asyncio.wait_for(worker.stop(), 60)


def _messages(text: str = "Tell me about the cache.") -> list[Any]:
    return [
        {"role": "system", "content": "You are a terse assistant who answers briefly."},
        {"role": "user", "content": text},
    ]


async def test_the_router_passes_through_and_answers_as_the_worker(running: Running) -> None:
    assert running.router.store.serves_openai()
    kw: dict[str, Any] = {
        "model": MODEL,
        "messages": _messages(),
        "max_tokens": 8,
        "temperature": 0,
        "seed": 7,
    }
    direct = await running.direct.chat.completions.create(**kw)
    routed = await running.routed.chat.completions.create(**kw)
    assert routed.choices[0].message.content == direct.choices[0].message.content
    assert routed.choices[0].finish_reason == direct.choices[0].finish_reason
    assert routed.usage is not None
    assert direct.usage is not None
    assert routed.usage.prompt_tokens == direct.usage.prompt_tokens
    assert routed.usage.completion_tokens == direct.usage.completion_tokens
    # streamed, with usage: the same text in chunks, the usage chunk last
    stream = await running.routed.chat.completions.create(
        **kw, stream=True, stream_options={"include_usage": True}
    )
    parts: list[str] = []
    usage = None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(parts) == direct.choices[0].message.content
    assert usage is not None
    assert usage.completion_tokens == direct.usage.completion_tokens


async def test_engine_only_parameters_pass_through(running: Running) -> None:
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "enum": ["yes", "no"]},
            "ok": {"type": "boolean"},
        },
        "required": ["answer", "ok"],
        "additionalProperties": False,
    }
    kw: dict[str, Any] = {
        "model": MODEL,
        "messages": _messages("Answer in JSON."),
        "max_tokens": 300,
        "temperature": 0,
        "seed": 1,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "a", "schema": schema, "strict": True},
        },
        "logprobs": True,
        "top_logprobs": 2,
    }
    r = await running.routed.chat.completions.create(**kw)
    direct = await running.direct.chat.completions.create(**kw)
    content = r.choices[0].message.content
    assert content == direct.choices[0].message.content
    assert r.choices[0].finish_reason == "stop", content
    assert content is not None
    assert set(json.loads(content)) == {"answer", "ok"}  # structured output held
    assert r.choices[0].logprobs is not None
    assert r.choices[0].logprobs.content  # logprobs applied, not dropped
    c = await running.routed.completions.create(
        model=MODEL, prompt="the cache", max_tokens=4, temperature=0, echo=True, logprobs=1
    )
    assert c.choices[0].text.startswith("the cache")
    assert c.choices[0].logprobs is not None


async def test_router_tokenize_equals_vllms(running: Running) -> None:
    for body in (
        {"model": MODEL, "messages": _messages(), "add_generation_prompt": True},
        {"model": MODEL, "prompt": "the first question about the cache"},
    ):
        got = []
        for url in (running.router_url, running.worker_url):
            async with running.http.post(url + "/tokenize", json=body) as resp:
                assert resp.status == 200
                got.append((await resp.json())["tokens"])
        assert got[0] == got[1]


async def test_routed_blocks_are_the_blocks_vllm_caches(running: Running) -> None:
    # a chat of several blocks; its templated ids, hashed as the router hashes them, must be
    # among the blocks the worker reports cached after serving it
    text = " ".join(f"the cache {i} holds the prefix block of the request" for i in range(12))
    messages = _messages(text)
    await running.routed.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=2, temperature=0
    )
    ids = PromptIds(HFPromptTokenizer(str(running.model_dir)))
    tokens = ids.encode(ids.chat_text({"messages": messages}), False, MAX_MODEL_LEN)
    ep = running.router.store.snapshot()[0]
    ours = prompt_block_hashes(tokens, ep.block_size)
    assert len(ours) >= 4
    async with asyncio.timeout(10):
        while True:
            cached = running.router.store.snapshot()[0].cached_blocks
            if cached is not None and set(ours) <= set(cached):
                break
            await asyncio.sleep(0.05)


async def test_multi_turn_predicted_blocks_are_vllms_hits(running: Running) -> None:
    """A multi-turn chat replayed through the router: for every turn, the prefix blocks the
    router predicted cached on the worker it chose equal the blocks vLLM reports as hits
    (usage.prompt_tokens_details.cached_tokens), within one block."""
    reg = running.router.metrics.registry

    def total(name: str) -> float:
        """The counter summed over its label sets (pool, model_name)."""
        return sum(
            sample.value
            for family in reg.collect()
            for sample in family.samples
            if sample.name == name + "_total"
        )

    def counts() -> tuple[float, float]:
        return total(ROUTER_PREDICTED_CACHED_BLOCKS), total(ROUTER_ACTUAL_CACHED_BLOCKS)

    messages: list[Any] = [{"role": "system", "content": "You keep the answers very short."}]
    hits = []
    for turn in range(5):
        messages.append(
            {"role": "user", "content": f"turn {turn}: " + "tell me about the prefix cache " * 6}
        )
        p0, a0 = counts()
        r = await running.routed.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=6, temperature=0, user="session-1"
        )
        p1, a1 = counts()
        assert r.usage is not None
        assert r.usage.prompt_tokens_details is not None
        predicted, actual = p1 - p0, a1 - a0
        assert abs(predicted - actual) <= 1, (turn, predicted, actual)
        hits.append(actual)
        messages.append({"role": "assistant", "content": r.choices[0].message.content or ""})
    assert min(hits[1:]) >= 2  # later turns do hit the cache: the comparison means something


async def test_router_answers_unknown_model_and_context_window(running: Running) -> None:
    with pytest.raises(openai.NotFoundError) as nf:
        await running.routed.chat.completions.create(model="gpt-9", messages=_messages())
    assert nf.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as big:
        await running.routed.chat.completions.create(
            model=MODEL, messages=_messages("cache " * 3000)
        )
    assert big.value.code == "context_length_exceeded"
    assert f"maximum context length is {MAX_MODEL_LEN} tokens" in big.value.message


async def test_class_priority_quota_and_response_cache_on_the_passthrough(
    running: Running,
) -> None:
    """A pool with classes, tenants and the response cache in front of vLLM's own API: the
    class's priority goes upstream in the body, which vLLM (run with ``--scheduling-policy
    priority``) accepts; a vLLM worker reports no per-priority waiting counts (the router's
    own record stands in); a tenant over its quota gets the openai client's
    RateLimitError; vLLM's greedy answer is stored and served again by the router."""
    traffic = Traffic(
        classes=(
            TrafficClass(name="interactive", ttft_ms=60_000, priority=0),
            TrafficClass(name="batch", ttft_ms=60_000, priority=2),
        ),
        default_class="interactive",
        tenants=(
            TenantQuota(name="demo", requests_per_s=1, request_burst=1),
            TenantQuota(name="*", requests_per_s=1000),
        ),
        cache=CacheConfig(enabled=True),
    )
    ports = running.worker.ports
    assert ports is not None
    router = RouterServer(
        StaticDiscovery([DiscoveredEndpoint(address=f"127.0.0.1:{ports.grpc}", id="w-1")]),
        RouterConfig(
            model=MODEL,
            tokenizer=f"hf:{running.model_dir}",
            refresh_interval_s=0.2,
            traffic=traffic,
            tenant_header="x-tenant",
        ),
    )
    rports = await router.start()
    try:
        await router.wait_ready(1, timeout_s=30)
        assert router.store.serves_openai()
        (ep,) = router.store.snapshot()
        assert ep.waiting_by_priority is None  # vLLM does not count by priority
        url = f"http://127.0.0.1:{rports.http}/v1"
        kw: dict[str, Any] = {"model": MODEL, "messages": _messages(), "max_tokens": 4}
        for klass in ("batch", "interactive"):
            async with openai.AsyncOpenAI(
                base_url=url,
                api_key="x",
                max_retries=0,
                default_headers={"x-slo-class": klass, "x-tenant": "other"},
            ) as client:
                done = await client.chat.completions.create(**kw)
            assert done.choices[0].finish_reason in ("stop", "length")
        async with openai.AsyncOpenAI(
            base_url=url, api_key="x", max_retries=0, default_headers={"x-tenant": "demo"}
        ) as demo:
            await demo.chat.completions.create(**kw)
            with pytest.raises(openai.RateLimitError) as ei:
                await demo.chat.completions.create(**kw)
        assert ei.value.code == "rate_limit_exceeded"
        assert ei.value.response.headers["retry-after"] == "1"
        greedy = {**kw, "temperature": 0, "max_tokens": 8}
        async with openai.AsyncOpenAI(
            base_url=url, api_key="x", max_retries=0, default_headers={"x-tenant": "other"}
        ) as other:
            miss = await other.chat.completions.with_raw_response.create(**greedy)
            hit = await other.chat.completions.with_raw_response.create(**greedy)
        assert miss.headers["x-preheat-cache"] == "miss"
        assert hit.headers["x-preheat-cache"] == "hit"
        first, again = miss.parse(), hit.parse()
        assert again.choices[0].message.content == first.choices[0].message.content
        assert again.choices[0].finish_reason == first.choices[0].finish_reason
        assert again.usage is not None
        assert first.usage is not None
        assert again.usage.completion_tokens == first.usage.completion_tokens
    finally:
        await asyncio.wait_for(router.stop(), 30)
