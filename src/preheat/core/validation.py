"""Request validation: pure checks that report *every* problem with a request at once.

``preheat.wire.convert`` turns a ``GenerateRequest`` into a :class:`GenerateSpec` (after
tokenizing the prompt, so the prompt length is known; the worker and the router alike), and
:func:`validate_generate` returns the list of problems, each a sentence that says what is
wrong. An empty list means the request is fine.
:func:`check_generate` raises one ``PreheatError(INVALID_ARGUMENT)`` carrying all of them,
with two exceptions that clients key on (OpenAI's codes): a model this pool does not serve
is ``NOT_FOUND`` (reason ``model_not_found``; alone, as OpenAI and vLLM answer it: the other
checks are against the served model's limits), and a prompt over the context window has
reason ``context_length_exceeded`` and OpenAI's wording first.

No I/O, no clock, no gRPC: the router runs the same checks before it picks a pod.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from preheat.core.errors import ErrorCode, PreheatError, Reason
from preheat.core.sampling import NO_OPTIONS, SamplingOptions, options_problems

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
    seed: int | None = None
    # the prompt has at least num_prompt_tokens tokens (counting stopped past the window)
    prompt_tokens_at_least: bool = False
    # penalties, biases, stop token ids, log probabilities, a structured-output constraint
    options: SamplingOptions = NO_OPTIONS
    ignore_eos: bool = False


def validate_generate(spec: GenerateSpec, limits: ModelLimits) -> list[str]:
    """Every problem with ``spec`` under ``limits``, as sentences; empty when it is valid."""
    problems: list[str] = []

    if spec.model and spec.model != limits.model:
        problems.append(unknown_model_message(spec.model, limits.model))

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

    if has_prompt and (too_long := context_length_problem(spec, limits)) is not None:
        problems.append(too_long)

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

    problems.extend(options_problems(spec.options, spec.max_tokens, limits.vocab_size))
    return problems


def unknown_model_message(model: str, served: str) -> str:
    """OpenAI's sentence for a model that is not served, then what is."""
    return (
        f"The model `{model}` does not exist or you do not have access to it "
        f"(this pool serves `{served}`; leave model empty to mean it)."
    )


CONTEXT_LENGTH_LEAD = "This model's maximum context length is "


def context_length_message(
    window: int, prompt_tokens: int, max_tokens: int, *, at_least: bool = False
) -> str:
    """OpenAI's wording for a request over the context window (``max_tokens`` 0: unset;
    ``at_least``: the prompt was counted only until it was past the window)."""
    head = f"{CONTEXT_LENGTH_LEAD}{window} tokens. However, "
    if prompt_tokens > window or max_tokens <= 0:
        return (
            head + f"your prompt resulted in {'at least ' if at_least else ''}{prompt_tokens} "
            "tokens. "
            "Please reduce the length of the prompt."
        )
    return (
        head + f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the "
        f"prompt, {max_tokens} in the completion). Please reduce the length of the prompt "
        "or completion."
    )


def context_length_problem(spec: GenerateSpec, limits: ModelLimits) -> str | None:
    """The context-window problem of ``spec``, if it has one."""
    n, window = spec.num_prompt_tokens, limits.max_model_len
    if n is None:
        return None
    if n > window or (spec.max_tokens > 0 and n + spec.max_tokens > window):
        return context_length_message(
            window, n, spec.max_tokens, at_least=spec.prompt_tokens_at_least
        )
    return None


def problems_error(problems: list[str]) -> PreheatError:
    """One error for ``problems`` (non-empty): ``context_length_exceeded`` first when it is one
    of them, so clients that key on it (fallback to a larger model) see it."""
    lead = [p for p in problems if p.startswith(CONTEXT_LENGTH_LEAD)]
    if lead:
        rest = [p for p in problems if p not in lead]
        return PreheatError(
            ErrorCode.INVALID_ARGUMENT,
            " ".join(lead) + ("" if not rest else " Also: " + "; ".join(rest)),
            reason=Reason.CONTEXT_LENGTH_EXCEEDED,
        )
    return PreheatError(ErrorCode.INVALID_ARGUMENT, "invalid request: " + "; ".join(problems))


def reason_of(code: ErrorCode, message: str) -> Reason | None:
    """The reason of an error relayed from a worker as (status, message): gRPC carries no
    reason, but these messages start with the sentences :func:`check_generate` writes."""
    if code is ErrorCode.NOT_FOUND and message.startswith("The model `"):
        return Reason.MODEL_NOT_FOUND
    if code is ErrorCode.INVALID_ARGUMENT and message.startswith(CONTEXT_LENGTH_LEAD):
        return Reason.CONTEXT_LENGTH_EXCEEDED
    return None


def check_generate(spec: GenerateSpec, limits: ModelLimits) -> None:
    """Raises the request's error, if it has any (see the module docstring)."""
    if spec.model and spec.model != limits.model:
        raise PreheatError(
            ErrorCode.NOT_FOUND,
            unknown_model_message(spec.model, limits.model),
            reason=Reason.MODEL_NOT_FOUND,
            param="model",
        )
    problems = validate_generate(spec, limits)
    if problems:
        raise problems_error(problems)
