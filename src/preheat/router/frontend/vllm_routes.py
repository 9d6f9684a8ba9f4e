"""The paths ``vllm serve`` has besides completions, answered by the router as vLLM does:

- ``GET /v1/models/{id}``: OpenAI's model object (as in ``GET /v1/models``: ``id``,
  ``object``, ``created``, ``owned_by``, and vLLM's ``root`` and ``max_model_len`` once the
  pool's workers reported it); a model the pools do not serve is 404 ``model_not_found``.
- ``GET /health``: vLLM's probe path, 200 with an empty body while the router can serve (it
  has a routable endpoint), else 503 with an empty body.
- ``POST /tokenize``: ``{"prompt", "add_special_tokens": true}`` or ``{"messages",
  "add_generation_prompt": true, "continue_final_message": false, "add_special_tokens":
  false, "tools", "chat_template_kwargs"}``, both with ``"return_token_strs": false`` and an
  optional ``"model"``, answers ``{"count", "max_model_len", "tokens", "token_strs"}``
  (vLLM's ``TokenizeResponse``). The ids are the router's tokenizer's (``--tokenizer``), the
  ones it routes on; chat messages are rendered with the model's chat template as vLLM's
  ``/tokenize`` renders them (router/frontend/chat_template.py; without a template, i.e. the
  sim tokenizer, the role-tagged lines the gRPC path sends the engine).
- ``POST /detokenize``: ``{"tokens": [...]}`` answers ``{"prompt": text}``.

Errors are OpenAI-shaped through :func:`preheat.router.frontend.errors.openai_error`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from preheat.core.errors import ErrorCode, PreheatError, Reason
from preheat.core.validation import unknown_model_message
from preheat.router.frontend.errors import openai_error
from preheat.router.frontend.tokenizer import PromptTokenizer

MAX_DETOKENIZE_IDS = 1 << 20


@dataclass(frozen=True)
class VllmRoutes:
    """What the handlers read, as functions (the router's state changes while it runs)."""

    models: Callable[[], list[str]]
    ready: Callable[[], bool]
    tokenizer: Callable[[], PromptTokenizer]
    max_model_len: Callable[[str], int]  # the context window of a model ("": the default)
    # a chat body's templated prompt (add_generation_prompt, continue_final_message given);
    # raises PreheatError for messages the template refuses
    chat_text: Callable[[dict[str, Any], bool, bool], str]
    # the context window /v1/models reports for a model; None: not known yet
    model_len: Callable[[str], int | None] = lambda _model: None
    # the served model a name stands for (an alias's pool model; a model itself)
    model_root: Callable[[str], str] = lambda model: model


ROUTES_KEY: web.AppKey[VllmRoutes] = web.AppKey("vllm_routes", VllmRoutes)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TokenizeCompletion(_Strict):
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeChat(_Strict):
    model: str | None = None
    messages: Annotated[list[dict[str, Any]], Field(min_length=1)]
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    return_token_strs: bool | None = False
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class Detokenize(_Strict):
    model: str | None = None
    tokens: Annotated[
        list[Annotated[int, Field(ge=0, le=2**63 - 1)]], Field(max_length=MAX_DETOKENIZE_IDS)
    ]


def _error(err: PreheatError) -> web.Response:
    status, body = openai_error(err)
    return web.json_response(body, status=status)


def _invalid(message: str, param: str | None = None) -> PreheatError:
    return PreheatError(ErrorCode.INVALID_ARGUMENT, message, param=param)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise _invalid(f"the request body is not valid JSON: {str(e)[:200]}") from None


def _validate(model: type[_Strict], data: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        locs = [".".join(str(p) for p in err["loc"]) for err in errors]
        problems = [f"{loc or 'body'}: {err['msg']}" for loc, err in zip(locs, errors, strict=True)]
        first = locs[0] or None
        raise _invalid("invalid request: " + "; ".join(problems), first) from None


def _check_model(routes: VllmRoutes, model: str | None) -> None:
    served = routes.models()
    if model and served and model not in served:
        raise PreheatError(
            ErrorCode.NOT_FOUND,
            unknown_model_message(model, ", ".join(served)),
            reason=Reason.MODEL_NOT_FOUND,
            param="model",
        )


def _text_tokenizer(routes: VllmRoutes, path: str) -> Any:
    tok = routes.tokenizer()
    if not hasattr(tok, "tokenize") or not hasattr(tok, "decode"):
        raise PreheatError(
            ErrorCode.UNIMPLEMENTED, f"{path}: the router's tokenizer {tok.name} cannot do it"
        )
    return tok


def model_object(model: str, max_model_len: int | None = None, *, root: str = "") -> dict[str, Any]:
    """OpenAI's model object (``/v1/models`` lists these), with vLLM's ``root`` (the
    served model an alias stands for; the model itself by default) and ``max_model_len``
    (when known)."""
    obj: dict[str, Any] = {
        "id": model,
        "object": "model",
        "created": 0,
        "owned_by": "preheat",
        "root": root or model,
        "parent": None,
    }
    if max_model_len is not None:
        obj["max_model_len"] = max_model_len
    return obj


async def _model(request: web.Request) -> web.Response:
    routes = request.app[ROUTES_KEY]
    model = request.match_info["model"]
    if model not in routes.models():
        return _error(
            PreheatError(
                ErrorCode.NOT_FOUND,
                unknown_model_message(model, ", ".join(routes.models()) or "no model yet"),
                reason=Reason.MODEL_NOT_FOUND,
                param="model",
            )
        )
    return web.json_response(
        model_object(model, routes.model_len(model), root=routes.model_root(model))
    )


async def _health(request: web.Request) -> web.Response:
    return web.Response(status=200 if request.app[ROUTES_KEY].ready() else 503)


async def _tokenize(request: web.Request) -> web.Response:
    routes = request.app[ROUTES_KEY]
    try:
        data = _json(await request.read())
        body: TokenizeCompletion | TokenizeChat
        if isinstance(data, dict) and "messages" in data:
            chat: TokenizeChat = _validate(TokenizeChat, data)
            if chat.continue_final_message and chat.add_generation_prompt:
                raise _invalid(
                    "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                    "continue_final_message",
                )
            text = routes.chat_text(
                chat.model_dump(exclude_none=True),
                chat.add_generation_prompt,
                chat.continue_final_message,
            )
            body = chat
        else:
            comp: TokenizeCompletion = _validate(TokenizeCompletion, data)
            text, body = comp.prompt, comp
        _check_model(routes, body.model)
        tok = _text_tokenizer(routes, "/tokenize")
        try:
            ids, strs = tok.tokenize(text, body.add_special_tokens)
        except Exception as e:
            raise _invalid("the prompt could not be tokenized") from e
    except PreheatError as e:
        return _error(e)
    return web.json_response(
        {
            "count": len(ids),
            "max_model_len": routes.max_model_len(body.model or ""),
            "tokens": ids,
            "token_strs": strs if body.return_token_strs else None,
        }
    )


async def _detokenize(request: web.Request) -> web.Response:
    routes = request.app[ROUTES_KEY]
    try:
        body: Detokenize = _validate(Detokenize, _json(await request.read()))
        _check_model(routes, body.model)
        tok = _text_tokenizer(routes, "/detokenize")
        try:
            text = tok.decode(body.tokens)
        except Exception as e:
            raise _invalid(
                "the token ids could not be decoded (outside the vocabulary?)", "tokens"
            ) from e
    except PreheatError as e:
        return _error(e)
    return web.json_response({"prompt": text})


def add_vllm_routes(app: web.Application, routes: VllmRoutes) -> None:
    app[ROUTES_KEY] = routes
    app.router.add_get("/v1/models/{model:.+}", _model)
    app.router.add_get("/health", _health)
    app.router.add_post("/tokenize", _tokenize)
    app.router.add_post("/detokenize", _detokenize)
