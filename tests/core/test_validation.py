"""Pure request validation: every problem reported, with a message that says what is wrong."""

from __future__ import annotations

import math

import pytest

from preheat.core.errors import ErrorCode, PreheatError, Reason
from preheat.core.validation import (
    GenerateSpec,
    ModelLimits,
    check_generate,
    reason_of,
    validate_generate,
)

LIMITS = ModelLimits(model="llama", max_model_len=100, vocab_size=50)


def spec(**kw: object) -> GenerateSpec:
    base: dict[str, object] = {
        "model": "",
        "prompt": "hi",
        "prompt_token_ids": None,
        "num_prompt_tokens": 10,
        "max_tokens": 10,
    }
    base.update(kw)
    return GenerateSpec(**base)  # type: ignore[arg-type]


def test_a_good_request_has_no_problems() -> None:
    assert validate_generate(spec(), LIMITS) == []
    assert validate_generate(spec(model="llama", temperature=0.0, top_p=1.0), LIMITS) == []
    assert validate_generate(spec(num_prompt_tokens=90, max_tokens=10), LIMITS) == []
    check_generate(spec(), LIMITS)


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"prompt": None}, "has no prompt"),
        ({"prompt": ""}, "prompt is empty"),
        ({"prompt": None, "prompt_token_ids": ()}, "prompt_token_ids is empty"),
        ({"max_tokens": 0}, "max_tokens must be > 0"),
        (
            {"num_prompt_tokens": 95, "max_tokens": 10},
            "This model's maximum context length is 100 tokens. However, you requested 105 "
            "tokens (95 in the prompt, 10 in the completion).",
        ),
        (
            {"num_prompt_tokens": 101},
            "This model's maximum context length is 100 tokens. However, your prompt resulted "
            "in 101 tokens.",
        ),
        ({"model": "gpt"}, "The model `gpt` does not exist or you do not have access to it"),
        ({"temperature": 2.01}, "temperature must be in [0, 2], got 2.01"),
        ({"temperature": -1.0}, "temperature must be in [0, 2]"),
        ({"temperature": math.nan}, "temperature is NaN"),
        ({"top_p": 0.0}, "top_p must be in (0, 1], got 0"),
        ({"top_p": 1.01}, "top_p must be in (0, 1]"),
        ({"top_p": math.nan}, "top_p is NaN"),
        ({"stop": tuple(str(i) for i in range(17))}, "too many stop strings: 17 given"),
        ({"stop": ("a", "")}, "stop strings must not be empty"),
        ({"stop": ("x" * 300,)}, "at most 256 characters"),
        (
            {"prompt": None, "prompt_token_ids": (1, 50, 99), "num_prompt_tokens": 3},
            "2 prompt token id(s) are outside the vocabulary of 50 tokens",
        ),
    ],
)
def test_each_problem(changes: dict[str, object], fragment: str) -> None:
    problems = validate_generate(spec(**changes), LIMITS)
    assert len(problems) == 1, problems
    assert fragment in problems[0]


def test_all_problems_at_once_in_one_error() -> None:
    bad = spec(prompt="", max_tokens=0, temperature=9.0, top_p=0.0, stop=("",))
    assert len(validate_generate(bad, LIMITS)) == 5
    with pytest.raises(PreheatError) as exc:
        check_generate(bad, LIMITS)
    assert exc.value.code is ErrorCode.INVALID_ARGUMENT
    assert exc.value.reason is None
    assert exc.value.message.count(";") == 4


def test_unknown_model_is_not_found_model_not_found_alone() -> None:
    # OpenAI and vLLM answer an unknown model first and alone: the other checks are against
    # the served model's limits, which do not apply to another model
    bad = spec(model="gpt-9", max_tokens=0, temperature=9.0)
    with pytest.raises(PreheatError) as exc:
        check_generate(bad, LIMITS)
    assert exc.value.code is ErrorCode.NOT_FOUND
    assert exc.value.reason is Reason.MODEL_NOT_FOUND
    assert exc.value.param == "model"
    assert exc.value.message.startswith(
        "The model `gpt-9` does not exist or you do not have access to it"
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"num_prompt_tokens": 101, "max_tokens": 5},
            "This model's maximum context length is 100 tokens. However, your prompt resulted "
            "in 101 tokens. Please reduce the length of the prompt.",
        ),
        (
            {"num_prompt_tokens": 95, "max_tokens": 10},
            "This model's maximum context length is 100 tokens. However, you requested 105 "
            "tokens (95 in the prompt, 10 in the completion). Please reduce the length of the "
            "prompt or completion.",
        ),
        (
            {"num_prompt_tokens": 101, "temperature": 9.0},
            "This model's maximum context length is 100 tokens. However, your prompt resulted "
            "in 101 tokens. Please reduce the length of the prompt. Also: "
            "sampling.temperature must be in [0, 2], got 9",
        ),
    ],
)
def test_context_length_exceeded_has_its_reason_and_openai_wording(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(PreheatError) as exc:
        check_generate(spec(**changes), LIMITS)
    assert exc.value.code is ErrorCode.INVALID_ARGUMENT
    assert exc.value.reason is Reason.CONTEXT_LENGTH_EXCEEDED
    assert exc.value.message == message


def test_oversized_prompt_is_one_problem_not_two() -> None:
    problems = validate_generate(spec(num_prompt_tokens=500, max_tokens=10), LIMITS)
    assert len(problems) == 1


def test_unknown_vocabulary_skips_the_id_check() -> None:
    limits = ModelLimits(model="llama", max_model_len=100)
    s = spec(prompt=None, prompt_token_ids=(10**6,), num_prompt_tokens=1)
    assert validate_generate(s, limits) == []


def test_a_relayed_error_gets_its_reason_back_from_its_message() -> None:
    # a worker's error crosses gRPC as (status, message); the router recovers the reason
    for bad, reason in [
        (spec(model="gpt-9"), Reason.MODEL_NOT_FOUND),
        (spec(num_prompt_tokens=101), Reason.CONTEXT_LENGTH_EXCEEDED),
        (spec(temperature=9.0), None),
    ]:
        with pytest.raises(PreheatError) as exc:
            check_generate(bad, LIMITS)
        assert exc.value.reason is reason
        assert reason_of(exc.value.code, exc.value.message) is reason
    assert reason_of(ErrorCode.INVALID_ARGUMENT, "The model `x` ...") is None
