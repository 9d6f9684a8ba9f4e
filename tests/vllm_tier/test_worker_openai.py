"""The vLLM worker's OpenAI HTTP API: vLLM's own serving over the worker's engine.

One in-process worker built from ``preheat worker`` flags (so vLLM's own CLI parser builds
the serving namespace), the tiny model, ``--tool-call-parser hermes`` (vLLM needs a tool
parser for a named ``tool_choice``). The official ``openai`` client makes the calls.
The SIGTERM test runs the worker as a process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="needs the vLLM CPU build (run in .venv-vllm)")

import aiohttp
import grpc
import jsonschema
import openai
import pytest_asyncio

from preheat.bench.workerproc import spawn_worker
from preheat.core.lifecycle import LifecycleState
from preheat.proto.preheat.v1 import worker_pb2, worker_pb2_grpc
from preheat.worker.engines import build_worker_engine
from preheat.worker.main import add_arguments
from preheat.worker.server import WorkerConfig, WorkerServer

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="module")]

MODEL = "tiny-llama"
MAX_MODEL_LEN = 1024


def worker_flags(tiny_model: Path) -> list[str]:
    return [
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
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


@dataclass
class Running:
    server: WorkerServer
    client: openai.AsyncOpenAI
    base_url: str
    http: aiohttp.ClientSession
    grpc_target: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def worker(tiny_model: Path) -> AsyncIterator[Running]:
    engine, factory = build_worker_engine(parse(worker_flags(tiny_model)))
    assert factory is not None
    server = WorkerServer(
        engine,
        WorkerConfig(worker_id="w-openai", drain_grace_s=120.0, stop_grace_s=1.0, openai_port=0),
        openai=factory,
    )
    ports = await server.start()
    assert ports.openai > 0
    try:
        await asyncio.wait_for(server.wait_warm(), 240)
        base = f"http://127.0.0.1:{ports.openai}/v1"
        async with (
            openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0) as client,
            aiohttp.ClientSession() as http,
        ):
            yield Running(server, client, base, http, f"127.0.0.1:{ports.grpc}")
    finally:
        await asyncio.wait_for(server.stop(), 60)


def messages(text: str = "Tell me about the cache.") -> list[Any]:
    return [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": text},
    ]


async def test_models_lists_the_served_name(worker: Running) -> None:
    models = await worker.client.models.list()
    assert [m.id for m in models.data] == [MODEL]


async def test_status_reports_the_openai_port(worker: Running) -> None:
    async with grpc.aio.insecure_channel(worker.grpc_target) as channel:
        status = await worker_pb2_grpc.WorkerControlStub(channel).Status(worker_pb2.StatusRequest())
    assert worker.server.ports is not None
    assert status.openai_port == worker.server.ports.openai
    assert status.model == MODEL


async def test_chat_with_a_system_prompt(worker: Running) -> None:
    r = await worker.client.chat.completions.create(
        model=MODEL, messages=messages(), max_tokens=8, temperature=0, seed=1
    )
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length")
    assert isinstance(choice.message.content, str)
    assert r.usage is not None
    assert r.usage.completion_tokens <= 8
    # the chat template was applied: more prompt tokens than the two messages' words
    assert r.usage.prompt_tokens > len("You are a terse assistant. Tell me about the cache.") // 4
    assert r.system_fingerprint  # vLLM's


async def test_chat_template_is_the_models(worker: Running) -> None:
    """/tokenize of the messages gives the template's text: role tags, BOS, the prompt."""
    body = {"model": MODEL, "messages": messages(), "add_generation_prompt": True}
    async with worker.http.post(
        worker.base_url.removesuffix("/v1") + "/tokenize", json=body
    ) as resp:
        assert resp.status == 200, await resp.text()
        tokens = (await resp.json())["tokens"]
    async with worker.http.post(
        worker.base_url.removesuffix("/v1") + "/detokenize", json={"model": MODEL, "tokens": tokens}
    ) as resp:
        text = (await resp.json())["prompt"]
    assert "<|system|>" in text
    assert text.rstrip().endswith("<|assistant|>")


async def test_streamed_chat_with_usage(worker: Running) -> None:
    stream = await worker.client.chat.completions.create(
        model=MODEL,
        messages=messages(),
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    assert len(chunks) >= 2
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == 6 or last.usage.completion_tokens < 6
    assert all(c.usage is None for c in chunks[:-1])
    reasons = [c.choices[0].finish_reason for c in chunks[:-1] if c.choices]
    assert reasons[-1] in ("stop", "length")


SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "enum": ["yes", "no"]},
        "ok": {"type": "boolean"},
    },
    "required": ["answer", "ok"],
    "additionalProperties": False,
}


async def test_response_format_json_schema(worker: Running) -> None:
    r = await worker.client.chat.completions.create(
        model=MODEL,
        messages=messages("Answer in JSON."),
        max_tokens=300,
        temperature=0,
        seed=1,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True},
        },
    )
    content = r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop", content
    assert content is not None
    jsonschema.validate(json.loads(content), SCHEMA)  # random weights, constrained output


async def test_named_tool_choice_gives_a_tool_call(worker: Running) -> None:
    tools: Any = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                    "required": ["city"],
                },
            },
        }
    ]
    r = await worker.client.chat.completions.create(
        model=MODEL,
        messages=messages("What is the weather in Paris?"),
        max_tokens=300,
        temperature=0,
        seed=1,
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    calls = r.choices[0].message.tool_calls
    assert calls, r.choices[0].message
    assert calls[0].type == "function"
    assert calls[0].function.name == "get_weather"


async def test_completions_echo_and_logprobs(worker: Running) -> None:
    prompt = "the model token cache"
    r = await worker.client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=4, echo=True, logprobs=2, temperature=0
    )
    choice = r.choices[0]
    assert choice.text.startswith(prompt)
    assert choice.logprobs is not None
    assert choice.logprobs.tokens is not None
    assert choice.logprobs.top_logprobs is not None
    assert r.usage is not None
    # echo: the prompt's tokens (with BOS) and the 4 generated ones all carry logprobs
    assert len(choice.logprobs.tokens) == r.usage.prompt_tokens + r.usage.completion_tokens
    assert all(len(t) >= 2 for t in choice.logprobs.top_logprobs[1:] if t is not None)


async def test_unknown_model_is_vllms_404(worker: Running) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        await worker.client.chat.completions.create(
            model="no-such-model", messages=messages(), max_tokens=2
        )
    assert err.value.status_code == 404
    body: Any = err.value.body
    assert body["type"] == "NotFoundError"
    assert "no-such-model" in body["message"]


async def test_prompt_over_the_context_is_vllms_400(worker: Running) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        await worker.client.completions.create(
            model=MODEL, prompt="word " * (MAX_MODEL_LEN * 2), max_tokens=4
        )
    assert err.value.status_code == 400
    body: Any = err.value.body
    assert body["type"] == "BadRequestError"
    assert "maximum context length" in body["message"]


async def test_counted_in_worker_metrics(worker: Running) -> None:
    metrics_url = f"http://127.0.0.1:{worker.server.ports.http}/metrics"  # type: ignore[union-attr]

    async def ok_count() -> float:
        async with worker.http.get(metrics_url) as resp:
            text = await resp.text()
        for line in text.splitlines():
            if line.startswith('preheat_worker_requests_total{outcome="ok"}'):
                return float(line.split()[-1])
        raise AssertionError("no preheat_worker_requests_total{outcome=ok}")

    before = await ok_count()
    await worker.client.completions.create(model=MODEL, prompt="count me", max_tokens=2)
    assert await ok_count() == before + 1


async def test_logit_bias_and_stop_are_applied(worker: Running) -> None:
    """vLLM's sampling parameters reach the engine: a +100 bias makes every token the
    biased one; a stop string cuts the text (finish_reason stop)."""
    probe = await worker.client.completions.create(
        model=MODEL, prompt="the model", max_tokens=1, temperature=0, logprobs=1
    )
    assert probe.choices[0].logprobs is not None
    assert probe.choices[0].logprobs.tokens is not None
    plain = await worker.client.completions.create(
        model=MODEL,
        prompt="the model",
        max_tokens=5,
        temperature=0,
        extra_body={"return_token_ids": True},
    )
    plain_ids: Any = plain.choices[0].model_extra["token_ids"]
    biased_id = next(i for i in range(10, 400) if i not in plain_ids)
    biased = await worker.client.completions.create(
        model=MODEL,
        prompt="the model",
        max_tokens=5,
        temperature=0,
        logit_bias={str(biased_id): 100},
        extra_body={"return_token_ids": True},
    )
    assert biased.choices[0].model_extra["token_ids"] == [biased_id] * 5
    text = plain.choices[0].text
    assert len(text) >= 2, text
    stopped = await worker.client.completions.create(
        model=MODEL, prompt="the model", max_tokens=5, temperature=0, stop=[text[1:]]
    )
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == text[:1]


async def test_an_aborted_stream_ends_with_an_error_event_and_frees_the_engine(
    worker: Running,
) -> None:
    """What a drain does to a stream once its grace is over (here: the handle's abort)."""
    async with worker.http.post(
        worker.base_url + "/chat/completions",
        json={
            "model": MODEL,
            "messages": messages(),
            "max_tokens": 400,
            "ignore_eos": True,
            "stream": True,
        },
    ) as resp:
        assert resp.status == 200
        first = await resp.content.readline()
        assert first.startswith(b"data: {")
        (handle,) = worker.server._in_flight.values()
        handle.abort()
        events = [e for e in (await resp.read()).decode().split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    err = json.loads(events[-2].removeprefix("data: "))["error"]
    assert err["code"] == 503
    assert "draining" in err["message"]
    assert worker.server.in_flight == 0
    engine: Any = worker.server.engine
    async with asyncio.timeout(10):  # vLLM's generator closed: the engine aborted it
        while True:
            if engine.stats().num_running == 0:
                break
            await asyncio.sleep(0.05)
    # still serving
    r = await worker.client.completions.create(model=MODEL, prompt="again", max_tokens=2)
    assert r.choices[0].finish_reason in ("stop", "length")


async def test_standby_refuses_with_503(worker: Running) -> None:
    await worker.server.demote()
    try:
        async with worker.http.post(
            worker.base_url + "/chat/completions",
            json={"model": MODEL, "messages": messages(), "max_tokens": 2},
        ) as resp:
            assert resp.status == 503
            assert resp.headers["Retry-After"] == "1"
            body = await resp.json()
        assert body["error"]["type"] == "ServiceUnavailableError"
        assert body["error"]["code"] == 503
        assert "standby" in body["error"]["message"]
        # what lists the model still answers
        assert [m.id for m in (await worker.client.models.list()).data] == [MODEL]
    finally:
        await worker.server.promote()
    assert worker.server.state == LifecycleState.ACTIVE


async def test_drain_finishes_the_stream_in_flight(worker: Running) -> None:
    """Last in the module: the drain is terminal for this worker."""
    stream = await worker.client.chat.completions.create(
        model=MODEL,
        messages=messages(),
        max_tokens=400,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    it = aiter(stream)
    await anext(it)
    assert worker.server.in_flight == 1
    worker.server.begin_drain()
    await asyncio.sleep(0)
    assert worker.server.state == LifecycleState.DRAINING
    async with worker.http.post(
        worker.base_url + "/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2}
    ) as resp:
        assert resp.status == 503
    rest = [c async for c in it]
    assert rest[-1].usage is not None
    assert rest[-1].usage.completion_tokens == 400
    finals = [c.choices[0].finish_reason for c in rest if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    await asyncio.wait_for(worker.server.wait_stopped(), 30)


async def test_sigterm_drains_an_openai_stream(tiny_model: Path) -> None:
    async with spawn_worker(
        [*worker_flags(tiny_model), "--drain-grace-s", "120"], ready_timeout_s=240
    ) as w:
        assert w.openai_port > 0
        async with openai.AsyncOpenAI(
            base_url=w.openai_url, api_key="unused", max_retries=0
        ) as client:
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=messages(),
                max_tokens=400,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
            it = aiter(stream)
            await anext(it)
            w.proc.send_signal(signal.SIGTERM)
            rest = [c async for c in it]
        assert rest[-1].usage is not None
        assert rest[-1].usage.completion_tokens == 400
        assert await asyncio.wait_for(w.proc.wait(), 60) == 0
    # (its whole log is read once the block has ended) the drain began with the stream
    # open, and waited for it
    started = [line for line in w.log if "drain_started" in line]
    assert started, w.log[-20:]
    assert "in_flight=1" in started[0]
