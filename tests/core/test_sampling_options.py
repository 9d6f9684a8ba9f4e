"""Sampling options: their bounds (vLLM's and OpenAI's), every problem named at once, and
which values change anything (what an engine that does not honour them must refuse)."""

from __future__ import annotations

import pytest

from preheat.core.sampling import (
    SamplingOptions,
    StructuredOutput,
    effective_fields,
    options_problems,
)
from preheat.core.validation import GenerateSpec, ModelLimits, validate_generate

VOCAB = 100


def problems(**kw: object) -> list[str]:
    return options_problems(SamplingOptions(**kw), 10, VOCAB)  # type: ignore[arg-type]


def test_unset_options_change_nothing_and_are_valid() -> None:
    assert effective_fields(SamplingOptions()) == []
    assert problems() == []


@pytest.mark.parametrize(
    "noop",
    [
        {"presence_penalty": 0.0},
        {"frequency_penalty": 0.0},
        {"repetition_penalty": 1.0},
        {"min_p": 0.0},
        {"top_k": 0},
        {"logit_bias": ((5, 0.0),)},
        {"min_tokens": 0},
    ],
)
def test_values_with_no_effect_are_not_effective(noop: dict[str, object]) -> None:
    assert effective_fields(SamplingOptions(**noop)) == []  # type: ignore[arg-type]


def test_every_effective_field_is_named() -> None:
    o = SamplingOptions(
        top_k=5,
        min_p=0.1,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        repetition_penalty=1.2,
        logit_bias=((3, 5.0),),
        stop_token_ids=(7,),
        min_tokens=2,
        logprobs=0,  # the sampled token's logprob: still something to return
        prompt_logprobs=1,
        structured_output=StructuredOutput(regex="a+"),
    )
    assert effective_fields(o) == [
        "sampling." + f
        for f in (
            "top_k",
            "min_p",
            "presence_penalty",
            "frequency_penalty",
            "repetition_penalty",
            "logit_bias",
            "stop_token_ids",
            "min_tokens",
            "logprobs",
            "prompt_logprobs",
            "structured_output",
        )
    ]


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"min_p": 1.5}, "sampling.min_p must be in [0, 1], got 1.5"),
        ({"presence_penalty": 2.5}, "sampling.presence_penalty must be in [-2, 2]"),
        ({"frequency_penalty": float("nan")}, "sampling.frequency_penalty must be in [-2, 2]"),
        ({"repetition_penalty": 0.0}, "sampling.repetition_penalty must be a number > 0"),
        ({"top_k": 101}, "sampling.top_k must be at most the vocabulary size 100"),
        ({"logit_bias": ((1, 101.0),)}, "sampling.logit_bias values must be in [-100, 100]"),
        ({"logit_bias": ((100, 1.0),)}, "sampling.logit_bias has 1 token id(s) outside"),
        ({"logit_bias": tuple((i % 100, 1.0) for i in range(301))}, "301 entries; at most 300"),
        ({"stop_token_ids": (5, 100, 200)}, "sampling.stop_token_ids has 2 token id(s)"),
        ({"stop_token_ids": tuple(i % 100 for i in range(65))}, "has 65 ids; at most 64"),
        ({"min_tokens": 11}, "sampling.min_tokens (11) must be at most max_tokens (10)"),
        ({"logprobs": 21}, "sampling.logprobs must be in [0, 20], got 21"),
        ({"prompt_logprobs": 50}, "sampling.prompt_logprobs must be in [0, 20]"),
        ({"structured_output": StructuredOutput()}, "names no constraint"),
        ({"structured_output": StructuredOutput(json_schema="{")}, "is not valid JSON"),
        ({"structured_output": StructuredOutput(json_schema="[1]")}, "must be a JSON object"),
        ({"structured_output": StructuredOutput(choice=())}, "choice is empty"),
        ({"structured_output": StructuredOutput(regex="")}, "regex is empty"),
        (
            {"structured_output": StructuredOutput(grammar="x" * 70_000)},
            "grammar has 70000 characters",
        ),
    ],
)
def test_out_of_bounds_values_are_named(options: dict[str, object], fragment: str) -> None:
    found = problems(**options)
    assert len(found) == 1, found
    assert fragment in found[0]


def test_good_constraints_pass() -> None:
    for so in (
        StructuredOutput(json_schema='{"type": "object"}'),
        StructuredOutput(json_object=True),
        StructuredOutput(regex="[a-z]+"),
        StructuredOutput(choice=("yes", "no")),
        StructuredOutput(grammar='root ::= "a"'),
    ):
        assert problems(structured_output=so) == [], so


def test_validate_generate_reports_option_problems_with_the_rest() -> None:
    spec = GenerateSpec(
        model="",
        prompt="hi",
        prompt_token_ids=None,
        num_prompt_tokens=1,
        max_tokens=4,
        temperature=3.0,
        options=SamplingOptions(min_tokens=5, logprobs=99),
    )
    found = validate_generate(spec, ModelLimits(model="m", max_model_len=100, vocab_size=VOCAB))
    assert len(found) == 3
    assert any("temperature" in p for p in found)
    assert any("min_tokens" in p for p in found)
    assert any("logprobs" in p for p in found)
