"""The OpenAI-compatible request bodies (pydantic) and their mapping to ``GenerateRequest``.

Only what the router can honour is accepted: a parameter it cannot apply (``tools``,
``logprobs``, ``response_format``, an unknown field, ...) is a 400 with code
``unsupported_parameter`` naming every such parameter (:mod:`.oai_params` has the table);
a field we know with a bad value is a 400 naming the field.

Chat messages are flattened deterministically into role-tagged lines, one message after the
other and each independent of the ones after it, so turn k+1's prompt starts with turn k's
prompt and its reply: multi-turn conversations share their prefix blocks::

    system: You are terse.
    user: hello
    assistant: hi there
    user: how are you?
    assistant:
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from preheat.core.errors import ErrorCode, PreheatError, Reason
from preheat.proto.preheat.v1 import inference_pb2
from preheat.router.frontend.oai_params import (
    CHAT,
    COMPLETIONS,
    UNSUPPORTED,
    Param,
    unsupported,
    unsupported_message,
)

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
DEFAULT_CHAT_MAX_TOKENS = 256  # chat has no token default upstream; keep it bounded

U32_MAX = 2**32 - 1  # the wire's uint32 fields (max_tokens, ttft_deadline_ms)
U64_MAX = 2**64 - 1  # the wire's uint64 seed

# every bounded number a body may carry, and how its range reads: a value outside is a 400
# that names the field and this range (the bounds themselves are the Field()s below)
RANGES: dict[str, str] = {
    "max_tokens": f"an integer in [1, {U32_MAX}]",
    "max_completion_tokens": f"an integer in [1, {U32_MAX}]",
    "seed": f"an integer in [0, {U64_MAX}]",
    "ttft_deadline_ms": f"an integer in [0, {U32_MAX}] (milliseconds; 0: none)",
    "n": "1 (one choice per request)",
    "temperature": "a number in [0, 2]",
    "top_p": "a number in (0, 1]",
    "min_tokens": f"an integer in [0, {U32_MAX}]",
}

MaxTokens = Annotated[int, Field(ge=1, le=U32_MAX)]
Seed = Annotated[int, Field(ge=0, le=U64_MAX)]
DeadlineMs = Annotated[int, Field(ge=0, le=U32_MAX)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    PARAMS: ClassVar[dict[str, Param]] = {}  # what the endpoint honours (oai_params)

    model: str = ""
    max_tokens: MaxTokens | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0, allow_inf_nan=False)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)] | None = None
    stop: str | list[str] | None = None
    seed: Seed | None = None
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    user: str | None = None
    n: Annotated[int, Field(ge=1, le=1)] | None = 1
    # Preheat extensions (also accepted as headers x-session-id, x-ttft-deadline-ms,
    # x-slo-class)
    session_id: str | None = None
    ttft_deadline_ms: DeadlineMs | None = None
    slo_class: str | None = None
    # OpenAI's prefix-cache key: the session (cache affinity) when no session id is given
    prompt_cache_key: str | None = None
    # vLLM's extensions that the gRPC path carries (oai_params.VLLM_EXTENSIONS)
    stop_token_ids: list[Annotated[int, Field(ge=0, le=U32_MAX)]] | None = None
    min_tokens: Annotated[int, Field(ge=0, le=U32_MAX)] | None = None
    ignore_eos: bool | None = None

    @model_validator(mode="after")
    def _cache_key_session(self) -> _Body:
        if self.session_id is None and self.prompt_cache_key:
            self.session_id = self.prompt_cache_key
        return self

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))

    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class CompletionBody(_Body):
    """``prompt`` as OpenAI takes it: a string, token ids, or a list of one of either (a
    batch of several prompts is refused: one choice per request). Token ids go to the
    engine as they are (``GenerateRequest.prompt_token_ids``), as vLLM takes them."""

    PARAMS: ClassVar[dict[str, Param]] = COMPLETIONS
    prompt: str | list[int]

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, v: Any) -> Any:
        if isinstance(v, list) and v and all(isinstance(p, str | list) for p in v):
            if len(v) != 1:
                raise PydanticCustomError(
                    "one_prompt",
                    "exactly one prompt is supported, {n} were sent (a string or token ids, "
                    "or a list of one of either)",
                    {"n": len(v)},
                )
            v = v[0]
        if isinstance(v, str):
            return v
        if isinstance(v, list) and all(type(t) is int for t in v):
            bad = [t for t in v if not 0 <= t <= U32_MAX]
            if bad:
                raise PydanticCustomError(
                    "token_id",
                    "token id {t} is not in [0, {top}]",
                    {"t": bad[0], "top": U32_MAX},
                )
            return v
        raise PydanticCustomError(
            "prompt_type",
            "expected a string or token ids (integers), or a list of one of either",
        )


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_only(cls, value: Any) -> Any:
        """A part of another type (``image_url``, ``input_audio``, ``file``) is named, not
        left to the union's three unrelated complaints (a string expected; type 'text'
        expected; text required)."""
        if isinstance(value, list):
            for i, part in enumerate(value):
                kind = part.get("type") if isinstance(part, dict) else None
                if isinstance(kind, str) and kind != "text":
                    raise PydanticCustomError(
                        "content_part_type",
                        "content[{i}] is a part of type {kind}: the pool's models take text, "
                        "so only 'text' parts are served",
                        {"i": i, "kind": repr(kind[:40])},
                    )
        return value

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class ChatBody(_Body):
    PARAMS: ClassVar[dict[str, Param]] = CHAT
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: MaxTokens | None = None


def flatten_chat(messages: list[ChatMessage], *, generation_prompt: bool = True) -> str:
    """Role-tagged lines, then ``assistant:`` for the reply (see the module docstring)."""
    lines = [f"{m.role}: {m.text()}" for m in messages]
    if generation_prompt:
        lines.append("assistant:")
    return "\n".join(lines)


def parse_body(model: type[_Body], raw: bytes) -> Any:
    """The validated body, or ``PreheatError(INVALID_ARGUMENT)`` naming every bad field (the
    first one's dotted path in ``param``); ``unsupported_parameter`` naming every parameter
    the router cannot honour at its value."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise BodyError(f"the request body is not valid JSON: {str(e)[:200]}", None) from None
    if isinstance(data, dict):
        refused = unsupported(model.PARAMS, data)
        if refused:
            raise BodyError(unsupported_message(refused), refused[0][0], UNSUPPORTED)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems = []
        first_param: str | None = None
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"])
            if first_param is None:
                first_param = loc or None
            bound = RANGES.get(str(err["loc"][-1])) if len(err["loc"]) == 1 else None
            hint = f" (allowed: {bound})" if bound is not None else ""
            problems.append(f"{loc or 'body'}: {err['msg']}{hint}")
        raise BodyError("invalid request: " + "; ".join(problems), first_param) from e


def header_deadline_ms(value: str) -> int:
    """Header ``x-ttft-deadline-ms``, bounded like the body's ``ttft_deadline_ms``."""
    try:
        ms = int(value.strip())
    except ValueError:
        ms = -1
    if not 0 <= ms <= U32_MAX:
        raise BodyError(
            f"header x-ttft-deadline-ms must be {RANGES['ttft_deadline_ms']}, got {value[:40]!r}",
            None,
        )
    return ms


class BodyError(PreheatError):
    def __init__(self, message: str, param: str | None, reason: Reason | None = None) -> None:
        super().__init__(ErrorCode.INVALID_ARGUMENT, message, reason=reason, param=param)


def to_generate_request(
    body: _Body, prompt: str | list[int], max_tokens: int, *, session_id: str, request_id: str
) -> inference_pb2.GenerateRequest:
    """The engine request for ``body``: ``prompt`` is text, or token ids (the oneof's
    ``prompt_token_ids``)."""
    sampling = inference_pb2.SamplingParams(max_tokens=max_tokens, stop=body.stops())
    if body.temperature is not None:
        sampling.temperature = body.temperature
    if body.top_p is not None:
        sampling.top_p = body.top_p
    if body.seed is not None:
        sampling.seed = body.seed
    sampling.stop_token_ids.extend(body.stop_token_ids or ())
    sampling.min_tokens = body.min_tokens or 0
    sampling.ignore_eos = bool(body.ignore_eos)
    req = inference_pb2.GenerateRequest(
        request_id=request_id,
        model=body.model,
        sampling=sampling,
        session_id=session_id,
        ttft_deadline_ms=body.ttft_deadline_ms or 0,
        slo_class=body.slo_class or "",
    )
    if isinstance(prompt, str):
        req.prompt = prompt
    else:
        req.prompt_token_ids.ids.extend(prompt)
    return req
