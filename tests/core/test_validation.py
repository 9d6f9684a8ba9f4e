"""Pure request validation: every problem reported, with a message that says what is wrong."""

from __future__ import annotations

import math

import pytest

from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.validation import GenerateSpec, ModelLimits, check_generate, validate_generate

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
            "prompt has 95 tokens and max_tokens is 10; together they exceed the model's "
            "context window of 100 tokens",
        ),
        ({"num_prompt_tokens": 101}, "more than the model's context window of 100 tokens"),
        ({"model": "gpt"}, "unknown model 'gpt': this worker serves 'llama'"),
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
    bad = spec(model="x", prompt="", max_tokens=0, temperature=9.0, top_p=0.0, stop=("",))
    assert len(validate_generate(bad, LIMITS)) == 6
    with pytest.raises(PreheatError) as exc:
        check_generate(bad, LIMITS)
    assert exc.value.code is ErrorCode.INVALID_ARGUMENT
    assert exc.value.message.count(";") == 5


def test_oversized_prompt_is_one_problem_not_two() -> None:
    problems = validate_generate(spec(num_prompt_tokens=500, max_tokens=10), LIMITS)
    assert len(problems) == 1


def test_unknown_vocabulary_skips_the_id_check() -> None:
    limits = ModelLimits(model="llama", max_model_len=100)
    s = spec(prompt=None, prompt_token_ids=(10**6,), num_prompt_tokens=1)
    assert validate_generate(s, limits) == []
