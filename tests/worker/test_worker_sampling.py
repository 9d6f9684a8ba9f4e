"""Sampling options over the worker's gRPC Generate: every field reaches the engine; log
probabilities ride with their tokens (coalesced or not); the sim engine honours stop token
ids and refuses what it cannot apply with INVALID_ARGUMENT naming each field."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from workerkit import Client, FakeEngine, gen_request, make_sim_engine, running_worker

from preheat.core.sampling import SamplingOptions, StructuredOutput
from preheat.engine.base import (
    EngineOutput,
    EngineRequest,
    FinishReason,
    Logprob,
    TokenLogprobs,
    Usage,
)
from preheat.engine.simtokenizer import SimTokenizer
from preheat.proto.preheat.v1 import inference_pb2

S = inference_pb2.SamplingParams


def full_sampling() -> inference_pb2.SamplingParams:
    s = S(
        max_tokens=6,
        top_k=4,
        min_p=0.25,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        repetition_penalty=1.5,
        min_tokens=2,
        ignore_eos=True,
        logprobs=2,
        prompt_logprobs=1,
        structured_output=inference_pb2.StructuredOutput(
            choice=inference_pb2.Choice(options=["yes", "no"])
        ),
    )
    s.logit_bias[7] = -100.0
    s.stop_token_ids.extend([3, 9])
    return s


async def test_every_option_reaches_the_engine(
    fake_client: Client, fake_engine: FakeEngine
) -> None:
    chunks = await fake_client.generate(gen_request(sampling=full_sampling()))
    assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH
    sampling = fake_engine.requests[-1].sampling
    assert sampling.ignore_eos
    assert sampling.options == SamplingOptions(
        top_k=4,
        min_p=0.25,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        repetition_penalty=1.5,
        logit_bias=((7, -100.0),),
        stop_token_ids=(3, 9),
        min_tokens=2,
        logprobs=2,
        prompt_logprobs=1,
        structured_output=StructuredOutput(choice=("yes", "no")),
    )


class LogprobEngine(FakeEngine):
    """Emits a logprob per token (and prompt logprobs once) when asked for them."""

    async def _gen(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        o = request.sampling.options
        n = request.sampling.max_tokens
        prompt = request.prompt_token_ids
        for i in range(n):
            last = i == n - 1
            top = tuple(
                Logprob(100 + j, -1.0 - j, j + 1, f"alt{j}") for j in range(o.logprobs or 0)
            )
            yield EngineOutput(
                text=f" t{i}",
                token_ids=(i,),
                finish_reason=FinishReason.LENGTH if last else None,
                usage=Usage(len(prompt), 0, n) if last else None,
                logprobs=(
                    (TokenLogprobs(Logprob(i, -0.5 * i, 2, f" t{i}"), top),)
                    if o.logprobs is not None
                    else ()
                ),
                prompt_logprobs=(
                    tuple(TokenLogprobs(Logprob(t, -2.0, 3)) for t in prompt[1:])
                    if i == 0 and o.prompt_logprobs is not None
                    else ()
                ),
            )


@pytest.mark.parametrize("coalesce", [0, 4])
async def test_logprobs_ride_with_their_tokens(coalesce: int) -> None:
    engine = LogprobEngine()
    async with running_worker(engine) as client:
        req = gen_request(prompt="a b c d", sampling=S(max_tokens=9, logprobs=2, prompt_logprobs=0))
        if coalesce:
            req.coalesce.CopyFrom(inference_pb2.Coalesce(max_tokens=coalesce, max_delay_ms=50))
        chunks = await client.generate(req)
        ids = [t for c in chunks for t in c.token_ids]
        assert ids == list(range(9))
        if coalesce:
            assert len(chunks) < 9  # merged chunks carry every token's logprob
        for c in chunks:
            assert [lp.token.token_id for lp in c.logprobs] == list(c.token_ids)
        lps = [lp for c in chunks for lp in c.logprobs]
        assert [lp.token.logprob for lp in lps] == [-0.5 * i for i in range(9)]
        assert all([x.token_id for x in lp.top] == [100, 101] for lp in lps)
        assert lps[3].token.text == " t3"
        assert lps[3].top[1].rank == 2
        prompt_lps = [lp for c in chunks for lp in c.prompt_logprobs]
        assert len(prompt_lps) == 3  # every prompt token after the first, once
        assert chunks[0].prompt_logprobs  # with the first token
        # asked for none: none sent
        plain = await client.generate(gen_request(max_tokens=3))
        assert not any(c.logprobs or c.prompt_logprobs for c in plain)


async def test_the_sim_worker_refuses_what_it_cannot_apply_by_name(client: Client) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.generate(gen_request(sampling=full_sampling()))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = exc.value.details() or ""
    for field in (
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "logit_bias",
        "logprobs",
        "prompt_logprobs",
        "structured_output",
    ):
        assert f"sampling.{field}" in details, field
    assert "sampling.stop_token_ids" not in details  # honoured
    assert "sampling.min_tokens" not in details
    # values with no effect are accepted, and the worker keeps serving
    noop = S(max_tokens=2, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0)
    chunks = await client.generate(gen_request(sampling=noop))
    assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH


async def test_invalid_options_are_refused_before_the_engine(client: Client) -> None:
    s = S(max_tokens=2, min_tokens=5, logprobs=40)
    s.stop_token_ids.append(5000)  # the sim worker's vocabulary has 1000 tokens
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.generate(gen_request(sampling=s))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = exc.value.details() or ""
    assert "sampling.min_tokens (5) must be at most max_tokens (2)" in details
    assert "sampling.logprobs must be in [0, 20], got 40" in details
    assert "sampling.stop_token_ids has 1 token id(s) outside the vocabulary" in details


async def test_the_sim_worker_honours_stop_token_ids() -> None:
    vocab = 8
    async with running_worker(make_sim_engine(vocab_size=vocab, time_scale=0.05)) as client:
        free = await client.generate(gen_request(sampling=S(max_tokens=30, seed=5)))
        free_ids = [t for c in free for t in c.token_ids]
        stop = free_ids[3]
        s = S(max_tokens=30, seed=5, stop_token_ids=[stop])
        chunks = await client.generate(gen_request(sampling=s))
        ids = [t for c in chunks for t in c.token_ids]
        first = free_ids.index(stop)
        assert ids == free_ids[: first + 1]
        assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_STOP
        assert "".join(c.text for c in chunks) == SimTokenizer(vocab).decode(ids[:-1])
        assert chunks[-1].usage.completion_tokens == len(ids)
