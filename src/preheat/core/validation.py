"""Request validation: pure checks that report *every* problem with a request at once.

The worker turns a ``GenerateRequest`` into a :class:`GenerateSpec` (after tokenizing the
prompt, so the prompt length is known), and :func:`validate_generate` returns the list of
problems, each a sentence that says what is wrong. An empty list means the request is fine.
:func:`check_generate` raises one ``PreheatError(INVALID_ARGUMENT)`` carrying all of them.

No I/O, no clock, no gRPC: the router runs the same checks before it picks a pod.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from preheat.core.errors import ErrorCode, PreheatError

TEMPERATURE_MIN = 0.0
TEMPERATURE_MAX = 2.0
MAX_STOP_STRINGS = 16
MAX_STOP_STRING_CHARS = 256


@dataclass(frozen=True)
class ModelLimits:
    """What the serving model accepts."""

    model: str  # the served model's name; an empty request model means this one
    max_model_len: int  # context window in tokens (prompt + generated)
    vocab_size: int | None = None  # when known, prompt token ids must be below it


@dataclass(frozen=True)
class GenerateSpec:
    """The parts of a generate request that validation looks at.

    ``prompt`` and ``prompt_token_ids`` mirror the request's ``oneof input`` (at most one is
    set). ``num_prompt_tokens`` is the prompt length after tokenization (None when the prompt
    is missing or could not be tokenized). ``max_tokens`` of 0 means "unset".
    """

    model: str
    prompt: str | None
    prompt_token_ids: Sequence[int] | None
    num_prompt_tokens: int | None
    max_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    stop: Sequence[str] = ()


def validate_generate(spec: GenerateSpec, limits: ModelLimits) -> list[str]:
    """Every problem with ``spec`` under ``limits``, as sentences; empty when it is valid."""
    problems: list[str] = []

    if spec.model and spec.model != limits.model:
        problems.append(
            f"unknown model {spec.model!r}: this worker serves {limits.model!r} "
            "(leave model empty to mean the served model)"
        )

    has_prompt = False
    if spec.prompt is None and spec.prompt_token_ids is None:
        problems.append("the request has no prompt: set prompt or prompt_token_ids")
    elif spec.prompt is not None and not spec.prompt:
        problems.append("the prompt is empty: send at least one character")
    elif spec.prompt_token_ids is not None and not spec.prompt_token_ids:
        problems.append("prompt_token_ids is empty: send at least one token id")
    else:
        has_prompt = True

    if has_prompt and spec.prompt_token_ids is not None and limits.vocab_size is not None:
        bad = [t for t in spec.prompt_token_ids if t < 0 or t >= limits.vocab_size]
        if bad:
            shown = ", ".join(str(t) for t in bad[:5]) + (", ..." if len(bad) > 5 else "")
            problems.append(
                f"{len(bad)} prompt token id(s) are outside the vocabulary of "
                f"{limits.vocab_size} tokens (valid ids are 0..{limits.vocab_size - 1}): {shown}"
            )

    if spec.max_tokens <= 0:
        problems.append("sampling.max_tokens must be > 0 (it is unset or 0)")

    n = spec.num_prompt_tokens
    window = limits.max_model_len
    if has_prompt and n is not None:
        if n > window:
            problems.append(
                f"prompt has {n} tokens, more than the model's context window of {window} tokens"
            )
        elif spec.max_tokens > 0 and n + spec.max_tokens > window:
            problems.append(
                f"prompt has {n} tokens and max_tokens is {spec.max_tokens}; together they "
                f"exceed the model's context window of {window} tokens"
            )

    if spec.temperature is not None:
        t = spec.temperature
        if math.isnan(t):
            problems.append("sampling.temperature is NaN; it must be a number in [0, 2]")
        elif not TEMPERATURE_MIN <= t <= TEMPERATURE_MAX:
            problems.append(f"sampling.temperature must be in [0, 2], got {t:g}")

    if spec.top_p is not None:
        p = spec.top_p
        if math.isnan(p):
            problems.append("sampling.top_p is NaN; it must be a number in (0, 1]")
        elif not 0.0 < p <= 1.0:
            problems.append(f"sampling.top_p must be in (0, 1], got {p:g}")

    if len(spec.stop) > MAX_STOP_STRINGS:
        problems.append(
            f"too many stop strings: {len(spec.stop)} given, at most {MAX_STOP_STRINGS} allowed"
        )
    if any(not s for s in spec.stop):
        problems.append("stop strings must not be empty")
    long_stops = [s for s in spec.stop if len(s) > MAX_STOP_STRING_CHARS]
    if long_stops:
        problems.append(
            f"stop strings must be at most {MAX_STOP_STRING_CHARS} characters; "
            f"{len(long_stops)} are longer"
        )

    return problems


def check_generate(spec: GenerateSpec, limits: ModelLimits) -> None:
    """Raises ``PreheatError(INVALID_ARGUMENT)`` listing every problem, if there is any."""
    problems = validate_generate(spec, limits)
    if problems:
        raise PreheatError(ErrorCode.INVALID_ARGUMENT, "invalid request: " + "; ".join(problems))
