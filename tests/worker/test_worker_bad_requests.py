"""Acceptance (b): a table of bad requests; each gets the right status and message, and the
worker keeps serving afterwards."""

from __future__ import annotations

import logging
import re
from typing import NoReturn

import grpc
import pytest
from workerkit import Client, FakeEngine, gen_request

from preheat.proto.preheat.v1 import inference_pb2

S = inference_pb2.SamplingParams
R = inference_pb2.GenerateRequest
INVALID = grpc.StatusCode.INVALID_ARGUMENT

# The sim engine of workerkit: model "fake-model", context window 256 tokens.
CASES = [
    ("no prompt", R(sampling=S(max_tokens=4)), INVALID, "has no prompt"),
    ("empty prompt text", R(prompt="", sampling=S(max_tokens=4)), INVALID, "prompt is empty"),
    (
        "empty token ids",
        R(prompt_token_ids=inference_pb2.TokenIds(ids=[]), sampling=S(max_tokens=4)),
        INVALID,
        "prompt_token_ids is empty",
    ),
    ("max_tokens missing", R(prompt="hi"), INVALID, "max_tokens must be > 0"),
    ("max_tokens zero", R(prompt="hi", sampling=S(max_tokens=0)), INVALID, "max_tokens"),
    (
        "prompt plus max_tokens over the window",
        R(prompt="w " * 200, sampling=S(max_tokens=100)),
        INVALID,
        "This model's maximum context length is 256 tokens. However, you requested 300 "
        "tokens (200 in the prompt, 100 in the completion).",
    ),
    (
        "prompt alone over the window",
        R(prompt="w " * 300, sampling=S(max_tokens=1)),
        INVALID,
        "This model's maximum context length is 256 tokens. However, your prompt resulted in "
        "300 tokens.",
    ),
    (
        "unknown model",
        R(model="gpt-9", prompt="hi", sampling=S(max_tokens=1)),
        grpc.StatusCode.NOT_FOUND,
        "The model `gpt-9` does not exist or you do not have access to it (this pool serves "
        "`fake-model`",
    ),
    (
        "temperature too high",
        R(prompt="hi", sampling=S(max_tokens=1, temperature=2.5)),
        INVALID,
        "temperature must be in [0, 2], got 2.5",
    ),
    (
        "temperature negative",
        R(prompt="hi", sampling=S(max_tokens=1, temperature=-0.1)),
        INVALID,
        "temperature must be in [0, 2]",
    ),
    (
        "temperature NaN",
        R(prompt="hi", sampling=S(max_tokens=1, temperature=float("nan"))),
        INVALID,
        "temperature is NaN",
    ),
    (
        "top_p zero",
        R(prompt="hi", sampling=S(max_tokens=1, top_p=0.0)),
        INVALID,
        "top_p must be in (0, 1], got 0",
    ),
    (
        "top_p above one",
        R(prompt="hi", sampling=S(max_tokens=1, top_p=1.5)),
        INVALID,
        "top_p must be in (0, 1]",
    ),
    (
        "top_p NaN",
        R(prompt="hi", sampling=S(max_tokens=1, top_p=float("nan"))),
        INVALID,
        "top_p is NaN",
    ),
    (
        "too many stop strings",
        R(prompt="hi", sampling=S(max_tokens=1, stop=[f"s{i}" for i in range(17)])),
        INVALID,
        "too many stop strings: 17 given, at most 16",
    ),
    (
        "empty stop string",
        R(prompt="hi", sampling=S(max_tokens=1, stop=["ok", ""])),
        INVALID,
        "stop strings must not be empty",
    ),
    (
        "coalescing delay over a second",
        R(
            prompt="hi",
            sampling=S(max_tokens=1),
            coalesce=inference_pb2.Coalesce(max_tokens=8, max_delay_ms=5000),
        ),
        INVALID,
        "coalesce delay must be in [0, 1000] ms, got 5000 ms",
    ),
    (
        "coalescing too many tokens",
        R(
            prompt="hi",
            sampling=S(max_tokens=1),
            coalesce=inference_pb2.Coalesce(max_tokens=5000, max_delay_ms=5),
        ),
        INVALID,
        "coalesce tokens must be in [1, 1024], got 5000",
    ),
]


@pytest.mark.parametrize(
    ("request_", "code", "fragment"),
    [pytest.param(r, c, f, id=name) for name, r, c, f in CASES],
)
async def test_bad_request_is_refused_and_the_worker_keeps_serving(
    client: Client, request_: inference_pb2.GenerateRequest, code: grpc.StatusCode, fragment: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.generate(request_)
    assert exc.value.code() == code
    assert fragment in (exc.value.details() or "")
    chunks = await client.generate(gen_request(max_tokens=2))
    assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH


async def test_token_ids_outside_a_known_vocabulary(fake_client: Client) -> None:
    # The fake engine reports its vocabulary size (vocab_size); the sim does not (yet).
    req = R(prompt_token_ids=inference_pb2.TokenIds(ids=[1, 5000]), sampling=S(max_tokens=1))
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await fake_client.generate(req)
    assert exc.value.code() == INVALID
    assert "outside the vocabulary of 1000 tokens" in (exc.value.details() or "")
    assert (await fake_client.generate(gen_request(max_tokens=1)))[-1].usage.completion_tokens


async def test_every_problem_is_reported_at_once(client: Client) -> None:
    req = R(prompt="", sampling=S(max_tokens=0, temperature=3.0, top_p=0.0))
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.generate(req)
    details = exc.value.details() or ""
    for fragment in ("prompt is empty", "max_tokens", "temperature", "top_p"):
        assert fragment in details


async def test_refusals_are_counted_as_invalid(client: Client) -> None:
    with pytest.raises(grpc.aio.AioRpcError):
        await client.generate(R(prompt="hi"))
    async with client.http.get(client.http_url + "/metrics") as resp:
        text = await resp.text()
    assert 'preheat_worker_requests_total{outcome="invalid"} 1.0' in text


class _StatusRecorder:
    """A servicer context that records, when the status goes out, what /metrics says."""

    def __init__(self, client: Client) -> None:
        self.registry = client.server.metrics.registry
        self.counted_when_answered: dict[str, float] = {}

    def _count(self, outcome: str) -> float:
        value = self.registry.get_sample_value(
            "preheat_worker_requests_total", {"outcome": outcome}
        )
        return value or 0.0

    def set_trailing_metadata(self, metadata: object) -> None:
        pass

    def time_remaining(self) -> float | None:
        return None

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.counted_when_answered = {o: self._count(o) for o in ("invalid", "error")}
        raise grpc.aio.AbortError(details)


async def test_an_outcome_is_counted_before_the_status_goes_out(client: Client) -> None:
    """The client may read /metrics the moment it has its status: the count is there."""
    ctx = _StatusRecorder(client)
    with pytest.raises(grpc.aio.AbortError):
        async for _ in client.server.generate(R(prompt="hi"), ctx):
            pass
    assert ctx.counted_when_answered == {"invalid": 1.0, "error": 0.0}


async def test_an_internal_error_is_counted_before_the_status_goes_out(
    fake_client: Client, fake_engine: FakeEngine
) -> None:
    def broken(request: object) -> NoReturn:
        raise RuntimeError("engine broke")

    fake_engine.generate = broken  # type: ignore[method-assign,assignment]
    ctx = _StatusRecorder(fake_client)
    with pytest.raises(grpc.aio.AbortError):
        async for _ in fake_client.server.generate(gen_request(max_tokens=2), ctx):
            pass
    assert ctx.counted_when_answered == {"invalid": 0.0, "error": 1.0}


class _DetailsRecorder(_StatusRecorder):
    def __init__(self, client: Client) -> None:
        super().__init__(client)
        self.answered: tuple[grpc.StatusCode, str] | None = None

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.answered = (code, details)
        raise grpc.aio.AbortError(details)


async def test_an_internal_error_reaches_the_client_without_its_text(
    fake_client: Client, fake_engine: FakeEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """The exception's text (paths, addresses, state) is logged under a reference the client
    gets, never sent to the client."""

    def broken(request: object) -> NoReturn:
        raise RuntimeError("secret /var/lib/engine/state at 10.0.0.7")

    fake_engine.generate = broken  # type: ignore[method-assign,assignment]
    ctx = _DetailsRecorder(fake_client)
    with (
        caplog.at_level(logging.INFO, logger="preheat.worker.server"),
        pytest.raises(grpc.aio.AbortError),
    ):
        async for _ in fake_client.server.generate(gen_request(max_tokens=2), ctx):
            pass
    assert ctx.answered is not None
    code, details = ctx.answered
    assert code is grpc.StatusCode.INTERNAL
    assert "secret" not in details
    assert "RuntimeError" not in details
    ref = re.search(r"reference ([0-9a-f]{16})", details)
    assert ref is not None, details
    logged = [
        r
        for r in caplog.records
        if getattr(r, "preheat_fields", {}).get("error_ref") == ref.group(1)
    ]
    assert logged, "the reference the client got is not in the log"
    assert logged[0].exc_info is not None


async def test_a_tokenizer_failure_is_invalid_without_its_text(
    fake_client: Client, fake_engine: FakeEngine
) -> None:
    def broken(text: str) -> NoReturn:
        raise RuntimeError("tokenizer file /models/secret.json is corrupt")

    fake_engine.tokenize = broken  # type: ignore[method-assign,assignment]
    ctx = _DetailsRecorder(fake_client)
    with pytest.raises(grpc.aio.AbortError):
        async for _ in fake_client.server.generate(R(prompt="hi", model=""), ctx):
            pass
    assert ctx.answered is not None
    code, details = ctx.answered
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert details == "the prompt could not be tokenized"


async def test_requested_coalescing_merges_tokens_and_loses_none(client: Client) -> None:
    req = gen_request(max_tokens=12)
    req.coalesce.CopyFrom(inference_pb2.Coalesce(max_tokens=4, max_delay_ms=1000))
    chunks = await client.generate(req)
    sizes = [len(c.token_ids) for c in chunks]
    assert sum(sizes) == 12
    assert sizes[0] == 1  # the first token is not held
    assert all(n >= 4 for n in sizes[1:-1])
    assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH
    assert chunks[-1].usage.completion_tokens == 12
