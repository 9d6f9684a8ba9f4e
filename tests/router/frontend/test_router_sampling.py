"""Sampling options through the router's gRPC Generate: validated before routing (the same
sentences as the worker's), forwarded to the worker (the sim honours stop token ids and
refuses what it cannot apply, by name); and a worker stream that ends without a
finish_reason is an error on every front end, never a silent truncation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from frontendkit import MODEL, gen, router, words, workers

from preheat.engine.simtokenizer import SimTokenizer
from preheat.proto.preheat.v1 import inference_pb2

S = inference_pb2.SamplingParams
VOCAB = 64  # small, so a stop id comes soon (the sim warms up on ids 47..63)


async def test_stop_token_ids_are_forwarded_and_honoured() -> None:
    spec = {"id": "w-1", "engine": {"vocab_size": VOCAB}}
    async with workers([spec]) as ws, router([w.endpoint for w in ws]) as r:
        free = await r.generate(_req(S(max_tokens=30, seed=3)))
        free_ids = [t for c in free for t in c.token_ids]
        stop = free_ids[4]
        chunks = await r.generate(_req(S(max_tokens=30, seed=3, stop_token_ids=[stop])))
        ids = [t for c in chunks for t in c.token_ids]
        assert ids == free_ids[: free_ids.index(stop) + 1]
        assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_STOP
        assert "".join(c.text for c in chunks) == SimTokenizer(VOCAB).decode(ids[:-1])


def _req(s: inference_pb2.SamplingParams) -> inference_pb2.GenerateRequest:
    return inference_pb2.GenerateRequest(prompt=words(5), sampling=s)


async def test_the_sim_refusal_reaches_a_grpc_client_by_name() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        s = S(max_tokens=4, presence_penalty=0.5, logprobs=1)
        s.structured_output.json_schema = '{"type": "object"}'
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await r.generate(_req(s))
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = exc.value.details() or ""
        for field in ("presence_penalty", "logprobs", "structured_output"):
            assert f"sampling.{field}" in details
        assert (await r.generate(gen()))[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH


async def test_bad_options_are_refused_before_routing() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        s = S(max_tokens=4, min_tokens=9, repetition_penalty=-1.0)
        s.structured_output.json_schema = "{not json"
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await r.generate(_req(s))
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = exc.value.details() or ""
        assert "sampling.min_tokens (9) must be at most max_tokens (4)" in details
        assert "sampling.repetition_penalty must be a number > 0" in details
        assert "sampling.structured_output.json_schema is not valid JSON" in details
        assert ws[0].server.metrics.registry.get_sample_value(
            "preheat_worker_requests_total", {"outcome": "invalid"}
        ) in (None, 0.0)  # the worker never saw it


def _truncate(server: Any, chunks: int) -> None:
    """Makes the worker answer with ``chunks`` token chunks and end the stream without a
    finish_reason (as a broken worker would)."""

    async def generate(
        req: inference_pb2.GenerateRequest, context: Any
    ) -> AsyncIterator[inference_pb2.GenerateResponse]:
        for i in range(chunks):
            yield inference_pb2.GenerateResponse(
                request_id=req.request_id, text=f" w{i}", token_ids=[i], worker_id="w-1"
            )

    server.generate = generate


def _events(raw: bytes) -> list[str]:
    return [ln[len("data: ") :] for ln in raw.decode().split("\n") if ln.startswith("data: ")]


@pytest.mark.parametrize("chunks", [0, 2])
async def test_a_stream_ended_without_finish_reason_is_an_error(chunks: int) -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        _truncate(ws[0].server, chunks)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await r.generate(gen())
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "without finishing it" in (exc.value.details() or "")

        body = {"model": MODEL, "prompt": "hi there", "max_tokens": 4}
        async with r.http.post(r.url + "/v1/completions", json=body) as resp:
            assert resp.status == 503
            assert (await resp.json())["error"]["code"] == "unavailable"
        async with r.http.post(
            r.url + "/v1/chat/completions",
            json={
                "model": MODEL,
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
                "stream": True,
            },
        ) as resp:
            raw = await resp.read()
        if chunks:  # streaming had begun: the stream ends with an error event
            assert resp.status == 200
            events = _events(raw)
            assert events[-1] == "[DONE]"
            last = json.loads(events[-2])
            assert "without finishing it" in last["error"]["message"]
            assert all(
                c.get("finish_reason") is None
                for e in events[:-2]
                for c in json.loads(e).get("choices", [])
            )
        else:  # nothing came: a plain error response
            assert resp.status == 503
            assert "without finishing it" in json.loads(raw)["error"]["message"]
