"""gRPC clients get vLLM's sampling features through the worker (issue 13, build item 4):
log probabilities (generated and prompt), stop token ids, logit bias, a penalty and a
JSON-schema constraint, each shown to be applied by a real vLLM engine (CPU build, the tiny
random-weight model: greedy decoding, so every expectation is exact)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="needs the vLLM CPU build (run in .venv-vllm)")

import grpc
import jsonschema
import pytest_asyncio

from preheat.engine.vllm import VllmEngine, VllmEngineConfig
from preheat.proto.preheat.v1 import inference_pb2, inference_pb2_grpc
from preheat.worker.server import WorkerConfig, WorkerServer

pytestmark = [pytest.mark.vllm, pytest.mark.asyncio(loop_scope="module")]

S = inference_pb2.SamplingParams
PROMPT = "The cat sat on the mat and then"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stub(tiny_model: Path) -> AsyncIterator[Any]:
    engine = VllmEngine(
        VllmEngineConfig(
            model=str(tiny_model),
            served_model_name="tiny-llama",
            max_model_len=1024,
            max_num_seqs=4,
            kv_cache_bytes=64 << 20,
            dtype="float32",
        )
    )
    server = WorkerServer(
        engine, WorkerConfig(worker_id="w-vllm", drain_grace_s=5.0, stop_grace_s=1.0)
    )
    ports = await server.start()
    try:
        await asyncio.wait_for(server.wait_warm(), 180)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports.grpc}") as channel:
            yield inference_pb2_grpc.InferenceStub(channel)
    finally:
        await asyncio.wait_for(server.stop(), 60)


async def generate(stub: Any, s: inference_pb2.SamplingParams) -> list[Any]:
    s.temperature = 0.0
    req = inference_pb2.GenerateRequest(prompt=PROMPT, sampling=s)
    return [c async for c in stub.Generate(req, timeout=120)]


def ids_of(chunks: list[Any]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


async def test_logprobs_come_with_every_token_and_the_prompt(stub: Any) -> None:
    chunks = await generate(stub, S(max_tokens=12, ignore_eos=True, logprobs=3, prompt_logprobs=2))
    ids = ids_of(chunks)
    assert len(ids) == 12
    for c in chunks:
        assert [lp.token.token_id for lp in c.logprobs] == list(c.token_ids)
    lps = [lp for c in chunks for lp in c.logprobs]
    for lp in lps:
        assert lp.token.logprob <= 0.0
        assert lp.token.rank == 1  # greedy: the sampled token is the most likely
        assert len(lp.top) == 3
        assert lp.top[0].token_id == lp.token.token_id
        assert [x.rank for x in lp.top] == [1, 2, 3]
        assert lp.top[0].logprob >= lp.top[1].logprob >= lp.top[2].logprob
    prompt_lps = [lp for c in chunks for lp in c.prompt_logprobs]
    assert len(prompt_lps) == chunks[-1].usage.prompt_tokens - 1
    assert all(len(lp.top) == 2 and lp.token.rank >= 1 for lp in prompt_lps)


async def test_a_stop_token_id_ends_the_output(stub: Any) -> None:
    free = ids_of(await generate(stub, S(max_tokens=16, ignore_eos=True)))
    stop = free[5]
    chunks = await generate(stub, S(max_tokens=16, ignore_eos=True, stop_token_ids=[stop]))
    assert ids_of(chunks) == free[: free.index(stop) + 1]
    assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_STOP


async def test_logit_bias_and_a_frequency_penalty_are_applied(stub: Any) -> None:
    """A bias of +100 makes greedy decoding repeat one token; a frequency penalty of 2
    takes 2 off its logit per repeat, so within 80 tokens another token wins."""
    free = ids_of(await generate(stub, S(max_tokens=4, ignore_eos=True)))
    target = (free[0] + 7) % 500 or 1
    biased = S(max_tokens=80, ignore_eos=True)
    biased.logit_bias[target] = 100.0
    ids = ids_of(await generate(stub, biased))
    assert ids == [target] * 80
    penalised = S(max_tokens=80, ignore_eos=True, frequency_penalty=2.0)
    penalised.logit_bias[target] = 100.0
    ids = ids_of(await generate(stub, penalised))
    assert ids[0] == target
    assert set(ids) != {target}


SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "colour": {"enum": ["red", "green", "blue"]},
    },
    "required": ["ok", "colour"],
    "additionalProperties": False,
}


async def test_a_json_schema_constrains_the_output(stub: Any) -> None:
    s = S(
        max_tokens=200,
        structured_output=inference_pb2.StructuredOutput(json_schema=json.dumps(SCHEMA)),
    )
    chunks = await generate(stub, s)
    text = "".join(c.text for c in chunks)
    assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_STOP, text
    jsonschema.validate(json.loads(text), SCHEMA)


async def test_a_choice_constrains_the_output(stub: Any) -> None:
    choice = inference_pb2.Choice(options=["alpha", "beta gamma"])
    s = S(max_tokens=20, structured_output=inference_pb2.StructuredOutput(choice=choice))
    chunks = await generate(stub, s)
    assert "".join(c.text for c in chunks) in ("alpha", "beta gamma")


async def test_a_bad_schema_is_refused_by_the_worker(stub: Any) -> None:
    s = S(max_tokens=5, structured_output=inference_pb2.StructuredOutput(json_schema="{"))
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await generate(stub, s)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "sampling.structured_output.json_schema is not valid JSON" in (exc.value.details() or "")


# a value with an effect for every SamplingParams field: the vLLM worker takes each one
# (the sim engine refuses some: tests/router/frontend/test_router_openai_params.py)
EVERY_FIELD: dict[str, dict[str, Any]] = {
    "max_tokens": {},
    "temperature": {"temperature": 0.7},
    "top_p": {"top_p": 0.5},
    "stop": {"stop": ["zzz"]},
    "seed": {"seed": 3},
    "stop_token_ids": {"stop_token_ids": [5]},
    "ignore_eos": {"ignore_eos": True},
    "min_tokens": {"min_tokens": 2},
    "top_k": {"top_k": 5},
    "min_p": {"min_p": 0.1},
    "presence_penalty": {"presence_penalty": 0.5},
    "frequency_penalty": {"frequency_penalty": 0.5},
    "repetition_penalty": {"repetition_penalty": 1.2},
    "logit_bias": {"logit_bias": {5: 2.0}},
    "logprobs": {"logprobs": 0},
    "prompt_logprobs": {"prompt_logprobs": 1},
    "structured_output": {"structured_output": inference_pb2.StructuredOutput(regex="(yes|no)")},
}


async def test_every_sampling_field_has_a_case() -> None:
    assert set(EVERY_FIELD) == set(S.DESCRIPTOR.fields_by_name)


@pytest.mark.parametrize("field", sorted(EVERY_FIELD))
async def test_the_vllm_worker_takes_every_sampling_field(stub: Any, field: str) -> None:
    s = S(**{"max_tokens": 6, **EVERY_FIELD[field]})
    req = inference_pb2.GenerateRequest(prompt=PROMPT, sampling=s)
    chunks = [c async for c in stub.Generate(req, timeout=120)]
    assert chunks[-1].finish_reason in (
        inference_pb2.FINISH_REASON_STOP,
        inference_pb2.FINISH_REASON_LENGTH,
    )
