"""The one wire -> core conversion (``preheat.wire.convert``) that the router and the worker
share: every ``SamplingParams`` field reaches the ``GenerateSpec`` (a field added to the
proto fails here until it is carried), and tokenizing outcomes become the same errors."""

from __future__ import annotations

from typing import Any

import pytest

from preheat.core.errors import ErrorCode, PreheatError, Reason
from preheat.core.sampling import StructuredOutput
from preheat.core.validation import GenerateSpec, ModelLimits
from preheat.proto.preheat.v1 import inference_pb2
from preheat.wire.convert import PromptTooLong, checked_request, generate_spec

S = inference_pb2.SamplingParams
LIMITS = ModelLimits(model="m", max_model_len=100, vocab_size=1000)

# field -> (a value on the wire, where it lands in the spec, what it is there)
CARRIED: dict[str, tuple[Any, str, Any]] = {
    "max_tokens": (7, "max_tokens", 7),
    "temperature": (0.5, "temperature", 0.5),
    "top_p": (0.25, "top_p", 0.25),
    "stop": (["x"], "stop", ("x",)),
    "seed": (9, "seed", 9),
    "top_k": (3, "options.top_k", 3),
    "min_p": (0.5, "options.min_p", 0.5),
    "presence_penalty": (0.5, "options.presence_penalty", 0.5),
    "frequency_penalty": (-0.5, "options.frequency_penalty", -0.5),
    "repetition_penalty": (1.5, "options.repetition_penalty", 1.5),
    "logit_bias": ({9: 2.0, 4: -1.0}, "options.logit_bias", ((4, -1.0), (9, 2.0))),
    "stop_token_ids": ([5, 6], "options.stop_token_ids", (5, 6)),
    "ignore_eos": (True, "ignore_eos", True),
    "min_tokens": (2, "options.min_tokens", 2),
    "logprobs": (3, "options.logprobs", 3),
    "prompt_logprobs": (0, "options.prompt_logprobs", 0),
    "structured_output": (
        inference_pb2.StructuredOutput(json_schema='{"type":"object"}'),
        "options.structured_output",
        StructuredOutput(json_schema='{"type":"object"}'),
    ),
}


def _get(spec: GenerateSpec, path: str) -> Any:
    obj: Any = spec
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def test_every_sampling_field_is_carried() -> None:
    assert set(S.DESCRIPTOR.fields_by_name) == set(CARRIED)
    for name, (value, path, expected) in CARRIED.items():
        s = S(max_tokens=1)
        if name == "logit_bias":
            s.logit_bias.update(value)
        elif isinstance(value, list):
            getattr(s, name).extend(value)
        elif name == "structured_output":
            s.structured_output.CopyFrom(value)
        else:
            setattr(s, name, value)
        spec = generate_spec(inference_pb2.GenerateRequest(prompt="p", sampling=s), 1)
        assert _get(spec, path) == expected, name  # the values are exact in float32


def test_unset_optional_fields_stay_unset() -> None:
    spec = generate_spec(inference_pb2.GenerateRequest(prompt="p", sampling=S(max_tokens=1)), 1)
    o = spec.options
    assert (spec.temperature, spec.top_p, spec.seed) == (None, None, None)
    assert (o.min_p, o.presence_penalty, o.frequency_penalty, o.repetition_penalty) == (
        None,
        None,
        None,
        None,
    )
    assert (o.logprobs, o.prompt_logprobs, o.structured_output) == (None, None, None)
    # explicit zeros are kept apart from unset ones
    s = S(max_tokens=1, presence_penalty=0.0, logprobs=0)
    o = generate_spec(inference_pb2.GenerateRequest(prompt="p", sampling=s), 1).options
    assert (o.presence_penalty, o.logprobs) == (0.0, 0)


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [
        ({"json_object": True}, StructuredOutput(json_object=True)),
        ({"regex": "a+"}, StructuredOutput(regex="a+")),
        (
            {"choice": inference_pb2.Choice(options=["a", "b"])},
            StructuredOutput(choice=("a", "b")),
        ),
        ({"grammar": 'root ::= "a"'}, StructuredOutput(grammar='root ::= "a"')),
        ({}, StructuredOutput()),
    ],
)
def test_each_constraint_kind(constraint: dict[str, Any], expected: StructuredOutput) -> None:
    s = S(max_tokens=1, structured_output=inference_pb2.StructuredOutput(**constraint))
    spec = generate_spec(inference_pb2.GenerateRequest(prompt="p", sampling=s), 1)
    assert spec.options.structured_output == expected


def test_checked_request_tokenizes_a_text_prompt_and_keeps_token_ids() -> None:
    req = inference_pb2.GenerateRequest(prompt="a b c", sampling=S(max_tokens=2))
    spec, tokens = checked_request(req, LIMITS, lambda t: [len(w) for w in t.split()])
    assert list(tokens) == [1, 1, 1]
    assert spec.num_prompt_tokens == 3
    ids = inference_pb2.GenerateRequest(
        prompt_token_ids=inference_pb2.TokenIds(ids=[4, 5]), sampling=S(max_tokens=2)
    )

    def never(text: str) -> list[int]:
        raise AssertionError("token ids are not tokenized")

    assert list(checked_request(ids, LIMITS, never)[1]) == [4, 5]


def test_a_prompt_past_the_window_is_context_length_exceeded() -> None:
    def too_long(text: str) -> list[int]:
        raise PromptTooLong(101)

    req = inference_pb2.GenerateRequest(prompt="long", sampling=S(max_tokens=2))
    with pytest.raises(PreheatError) as exc:
        checked_request(req, LIMITS, too_long)
    assert exc.value.reason is Reason.CONTEXT_LENGTH_EXCEEDED
    assert "at least 101 tokens" in exc.value.message


def test_a_tokenizer_failure_is_invalid_argument() -> None:
    def broken(text: str) -> list[int]:
        raise UnicodeError("boom")

    req = inference_pb2.GenerateRequest(prompt="x", sampling=S(max_tokens=2))
    with pytest.raises(PreheatError) as exc:
        checked_request(req, LIMITS, broken)
    assert exc.value.code is ErrorCode.INVALID_ARGUMENT
    assert exc.value.message == "the prompt could not be tokenized"


def test_sampling_problems_are_refused_with_the_rest() -> None:
    s = S(max_tokens=2, min_tokens=3, presence_penalty=5.0)
    s.stop_token_ids.append(5000)
    req = inference_pb2.GenerateRequest(prompt="x", sampling=s)
    with pytest.raises(PreheatError) as exc:
        checked_request(req, LIMITS, lambda t: [1])
    msg = exc.value.message
    for fragment in ("min_tokens", "presence_penalty", "stop_token_ids"):
        assert f"sampling.{fragment}" in msg
