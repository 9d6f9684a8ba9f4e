"""The one conversion from the wire to the core: ``GenerateRequest`` -> ``GenerateSpec``,
checked with ``preheat.core.validation``. The router (before it picks a pod) and the worker
(before its engine) both call :func:`checked_request`, so a request means the same, and is
refused with the same sentences, on either side.

Tokenizing is the caller's (the router counts piece by piece and stops past the context
window; the worker asks its engine): ``tokenize`` returns the prompt's token ids or raises
:class:`PromptTooLong` with what it counted; any other exception is a prompt that could
not be tokenized (INVALID_ARGUMENT).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.sampling import NO_OPTIONS, SamplingOptions, StructuredOutput
from preheat.core.validation import GenerateSpec, ModelLimits, check_generate
from preheat.proto.preheat.v1 import inference_pb2

log = logging.getLogger(__name__)


class PromptTooLong(Exception):
    """The tokenizer stopped counting past the context window, at ``counted`` tokens."""

    def __init__(self, counted: int) -> None:
        super().__init__(f"at least {counted} tokens")
        self.counted = counted


Tokenize = Callable[[str], Sequence[int]]
_LAST_BASIC_FIELD = inference_pb2.SamplingParams.SEED_FIELD_NUMBER  # 1-5: not options


def structured_output(so: inference_pb2.StructuredOutput) -> StructuredOutput:
    """The core form of the proto's constraint (no field set: a constraint naming none)."""
    which = so.WhichOneof("constraint")
    if which == "json_schema":
        return StructuredOutput(json_schema=so.json_schema)
    if which == "json_object":
        return StructuredOutput(json_object=so.json_object)
    if which == "regex":
        return StructuredOutput(regex=so.regex)
    if which == "choice":
        return StructuredOutput(choice=tuple(so.choice.options))
    if which == "grammar":
        return StructuredOutput(grammar=so.grammar)
    return StructuredOutput()


def sampling_options(s: inference_pb2.SamplingParams) -> SamplingOptions:
    """``SamplingParams`` fields 6-17 in core form (unset optional fields as ``None``)."""
    if not any(f.number > _LAST_BASIC_FIELD for f, _ in s.ListFields()):
        return NO_OPTIONS  # the common case: none set

    def opt(name: str) -> float | None:
        return float(getattr(s, name)) if s.HasField(name) else None

    return SamplingOptions(
        top_k=s.top_k,
        min_p=opt("min_p"),
        presence_penalty=opt("presence_penalty"),
        frequency_penalty=opt("frequency_penalty"),
        repetition_penalty=opt("repetition_penalty"),
        logit_bias=tuple(sorted((int(k), float(v)) for k, v in s.logit_bias.items())),
        stop_token_ids=tuple(s.stop_token_ids),
        min_tokens=s.min_tokens,
        logprobs=s.logprobs if s.HasField("logprobs") else None,
        prompt_logprobs=s.prompt_logprobs if s.HasField("prompt_logprobs") else None,
        structured_output=(
            structured_output(s.structured_output) if s.HasField("structured_output") else None
        ),
    )


def generate_spec(
    req: inference_pb2.GenerateRequest,
    num_prompt_tokens: int | None,
    *,
    prompt_tokens_at_least: bool = False,
) -> GenerateSpec:
    """The request's ``GenerateSpec``, given its prompt's length once tokenized."""
    which = req.WhichOneof("input")
    s = req.sampling
    return GenerateSpec(
        model=req.model,
        prompt=req.prompt if which == "prompt" else None,
        prompt_token_ids=(tuple(req.prompt_token_ids.ids) if which == "prompt_token_ids" else None),
        num_prompt_tokens=num_prompt_tokens,
        max_tokens=s.max_tokens,
        temperature=s.temperature if s.HasField("temperature") else None,
        top_p=s.top_p if s.HasField("top_p") else None,
        stop=tuple(s.stop),
        seed=s.seed if s.HasField("seed") else None,
        prompt_tokens_at_least=prompt_tokens_at_least,
        options=sampling_options(s),
        ignore_eos=s.ignore_eos,
    )


def checked_request(
    req: inference_pb2.GenerateRequest, limits: ModelLimits, tokenize: Tokenize
) -> tuple[GenerateSpec, Sequence[int]]:
    """The validated spec of ``req`` and its prompt's token ids (as ``tokenize`` gave them,
    not copied); raises ``PreheatError`` (every problem at once, see
    ``preheat.core.validation``)."""
    which = req.WhichOneof("input")
    tokens: Sequence[int] | None = None
    if which == "prompt_token_ids":
        tokens = list(req.prompt_token_ids.ids)
    counted: int | None = None if tokens is None else len(tokens)
    at_least = False
    if which == "prompt" and req.prompt:
        try:
            tokens = tokenize(req.prompt)
            counted = len(tokens)
        except PromptTooLong as e:
            counted, at_least = e.counted, True
        except Exception as e:
            log.warning("tokenize_failed: request %s", req.request_id, exc_info=True)
            raise PreheatError(
                ErrorCode.INVALID_ARGUMENT, "the prompt could not be tokenized"
            ) from e
    spec = generate_spec(req, counted, prompt_tokens_at_least=at_least)
    check_generate(spec, limits)
    assert tokens is not None  # a valid request has a prompt, counted in full
    return spec, tokens
