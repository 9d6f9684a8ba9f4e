"""The OpenAI-compatible request bodies (pydantic) and their mapping to ``GenerateRequest``.

Only what the router can honour is accepted; unknown fields are ignored (as OpenAI's own
server does for fields it does not know of in a client's newer schema), but a field we know
with a bad value is a 400 naming the field. ``n`` must be 1; ``logprobs`` are not offered.

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

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from preheat.core.errors import ErrorCode, PreheatError
from preheat.proto.preheat.v1 import inference_pb2

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
DEFAULT_CHAT_MAX_TOKENS = 256  # chat has no token default upstream; keep it bounded


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    model: str = ""
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    seed: Annotated[int, Field(ge=0)] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    user: str | None = None
    n: Annotated[int, Field(ge=1, le=1)] = 1
    # Preheat extensions (also accepted as headers x-session-id, x-ttft-deadline-ms,
    # x-slo-class)
    session_id: str | None = None
    ttft_deadline_ms: Annotated[int, Field(ge=0)] | None = None
    slo_class: str | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))

    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class CompletionBody(_Body):
    prompt: str | list[str]

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: str | list[str]) -> str | list[str]:
        if isinstance(v, list) and len(v) != 1:
            raise ValueError("exactly one prompt is supported (a string, or a list of one)")
        return v

    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class ChatBody(_Body):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None


def flatten_chat(messages: list[ChatMessage]) -> str:
    """Role-tagged lines, then ``assistant:`` for the reply (see the module docstring)."""
    lines = [f"{m.role}: {m.text()}" for m in messages]
    lines.append("assistant:")
    return "\n".join(lines)


def parse_body(model: type[_Body], raw: bytes) -> Any:
    """The validated body, or ``PreheatError(INVALID_ARGUMENT)`` naming every bad field (the
    first one's dotted path in ``param``)."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as e:
        problems = []
        first_param: str | None = None
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"])
            if err["type"] == "json_invalid":
                raise BodyError("the request body is not valid JSON: " + err["msg"], None) from e
            if first_param is None:
                first_param = loc or None
            problems.append(f"{loc or 'body'}: {err['msg']}")
        raise BodyError("invalid request: " + "; ".join(problems), first_param) from e


class BodyError(PreheatError):
    def __init__(self, message: str, param: str | None) -> None:
        super().__init__(ErrorCode.INVALID_ARGUMENT, message)
        self.param = param


def to_generate_request(
    body: _Body, prompt: str, max_tokens: int, *, session_id: str, request_id: str
) -> inference_pb2.GenerateRequest:
    sampling = inference_pb2.SamplingParams(max_tokens=max_tokens, stop=body.stops())
    if body.temperature is not None:
        sampling.temperature = body.temperature
    if body.top_p is not None:
        sampling.top_p = body.top_p
    if body.seed is not None:
        sampling.seed = body.seed
    return inference_pb2.GenerateRequest(
        request_id=request_id,
        model=body.model,
        prompt=prompt,
        sampling=sampling,
        session_id=session_id,
        ttft_deadline_ms=body.ttft_deadline_ms or 0,
        slo_class=body.slo_class or "",
    )
