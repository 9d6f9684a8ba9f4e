"""OpenAI-shaped JSON for every HTTP error the router answers, whoever raises it.

Three sources, one shape ``{"error": {"message", "type", "param", "code"}}``:

- the handlers' own ``PreheatError``\\ s (``http.error_response``);
- ``web.HTTPException`` raised by aiohttp's router and request reading (404 for an unknown
  path, 405 for a wrong method, 413 for a body over the limit): :func:`json_errors`, a
  middleware, which also turns an unexpected exception into a generic 500 (the detail goes
  to the log with a reference the body quotes, never into the body);
- errors from aiohttp's HTTP parser, before any handler or middleware runs (a bad request
  line, an oversized header, too many headers): :class:`JsonErrorAppRunner` builds its
  connections with :class:`JsonErrorRequestHandler`, whose ``handle_error`` (aiohttp's hook
  for these) answers JSON instead of ``text/plain``.

The ``type`` follows OpenAI's names (``invalid_request_error``, ``not_found_error``,
``rate_limit_error``, ...). ``code`` is what OpenAI-compatible clients key on
(:func:`openai_error`, the one mapping from a ``PreheatError``): the error's reason when it
has one (``model_not_found``, ``context_length_exceeded``, ``unsupported_parameter``),
``rate_limit_exceeded`` for any 429, else the Preheat error code; for errors aiohttp raises,
a short name of the status (``method_not_allowed``, ``request_too_large``, ...).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.web_protocol import RequestHandler

from preheat.core.errors import ErrorCode, PreheatError, http_status
from preheat.process.logs import fields

log = logging.getLogger("preheat.router")

# status -> (OpenAI type, code) for errors that are not a PreheatError
STATUS_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "invalid_argument"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_error", "permission_denied"),
    404: ("not_found_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    408: ("timeout", "request_timeout"),
    411: ("invalid_request_error", "length_required"),
    413: ("invalid_request_error", "request_too_large"),
    414: ("invalid_request_error", "uri_too_long"),
    415: ("invalid_request_error", "unsupported_media_type"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    431: ("invalid_request_error", "request_header_fields_too_large"),
    500: ("server_error", "internal"),
    501: ("invalid_request_error", "not_implemented"),
    503: ("service_unavailable", "unavailable"),
    504: ("timeout", "deadline_exceeded"),
}
_SKIP_HEADERS = frozenset({"content-type", "content-length"})
MAX_MESSAGE_CHARS = 200


# a PreheatError's OpenAI type by its code (OpenAI's model_not_found is invalid_request_error)
_ERROR_TYPE = {
    ErrorCode.INVALID_ARGUMENT: "invalid_request_error",
    ErrorCode.NOT_FOUND: "invalid_request_error",
    ErrorCode.RESOURCE_EXHAUSTED: "rate_limit_error",
    ErrorCode.UNAVAILABLE: "service_unavailable",
    ErrorCode.DEADLINE_EXCEEDED: "timeout",
    ErrorCode.UNAUTHENTICATED: "invalid_request_error",
}
# a PreheatError's OpenAI code by its code, when it has no reason
_OPENAI_CODE = {ErrorCode.RESOURCE_EXHAUSTED: "rate_limit_exceeded"}


def openai_error(err: PreheatError) -> tuple[int, dict[str, Any]]:
    """The HTTP status and OpenAI-shaped body of ``err``: the one mapping of a
    ``PreheatError`` to what an OpenAI client sees (``openai.NotFoundError`` for
    ``model_not_found``, ``BadRequestError`` with ``code`` ``context_length_exceeded``,
    ``RateLimitError`` for 429)."""
    if err.reason is not None:
        code = err.reason.value
    else:
        code = _OPENAI_CODE.get(err.code, err.code.value)
    body = {
        "error": {
            "message": err.message,
            "type": _ERROR_TYPE.get(err.code, "server_error"),
            "param": err.param,
            "code": code,
        }
    }
    return http_status(err.code), body


def status_error(status: int) -> tuple[str, str]:
    """The (type, code) of a status: the table, else by class (4xx: the client's fault)."""
    if status in STATUS_ERRORS:
        return STATUS_ERRORS[status]
    return ("invalid_request_error", "invalid_request") if status < 500 else ("server_error", "")


def status_error_response(
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """An OpenAI-shaped error for ``status`` (its type and code from :func:`status_error`)."""
    kind, default_code = status_error(status)
    body = {
        "error": {
            "message": message,
            "type": kind,
            "param": param,
            "code": code if code is not None else (default_code or None),
        }
    }
    return web.json_response(body, status=status, headers=headers)


def internal_error_response() -> web.Response:
    """A generic 500 whose reference is in the log line that has the detail."""
    ref = uuid.uuid4().hex[:16]
    log.exception("http_handler_error", extra=fields(error_ref=ref))
    return status_error_response(
        500, f"internal error (reference {ref}; the router's log has the details)"
    )


def _printable(text: str) -> str:
    """``text`` cut to one short line of printable ASCII (it may quote the client's bytes)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    clean = "".join(c if " " <= c <= "~" else "?" for c in line)
    return clean[:MAX_MESSAGE_CHARS]


def _header_too_large(exc: BaseException | None) -> bool:
    """A parser error that says a header line was too long or there were too many."""
    if isinstance(exc, LineTooLong):
        return True
    return isinstance(exc, BadHttpMessage) and "too many headers" in str(exc).lower()


@web.middleware
async def json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """aiohttp's HTTP errors (404, 405, 413, ...) as OpenAI JSON; an unexpected exception as
    a generic 500 (never its text or repr)."""
    try:
        resp: web.StreamResponse = await handler(request)
        return resp
    except web.HTTPException as e:
        if e.status < 400:
            raise
        default = f"{e.status}: {e.reason}"
        detail = e.text if e.text and e.text != default else e.reason
        headers = {k: v for k, v in e.headers.items() if k.lower() not in _SKIP_HEADERS}
        return status_error_response(
            e.status,
            f"{request.method} {_printable(request.path)}: {_printable(detail or '')}",
            headers=headers,
        )
    except (asyncio.CancelledError, ConnectionError):
        raise
    except TimeoutError:
        log.info("http_handler_timeout", extra=fields(path=request.path))
        return status_error_response(504, "the request timed out in the router")
    except Exception:
        return internal_error_response()


class JsonErrorRequestHandler(RequestHandler):
    """aiohttp's connection handler, answering its own errors (a request it cannot parse,
    a handler that raised past every middleware) as OpenAI JSON."""

    __slots__ = ()  # the same layout as RequestHandler (see JsonErrorServer.__call__)

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        super().handle_error(request, status, exc, message)  # logs; raises if already sent
        if status == 400 and _header_too_large(exc):
            status = 431
        if status >= 500:
            text = f"{status} {HTTPStatus(status).phrase}: the router could not answer"
        else:
            text = "malformed HTTP request" + (f": {_printable(message)}" if message else "")
        resp = status_error_response(status, text)
        resp.force_close()
        return resp


class JsonErrorServer(web.Server):
    """A ``web.Server`` whose connections use :class:`JsonErrorRequestHandler`."""

    def __call__(self) -> RequestHandler:
        handler = super().__call__()
        handler.__class__ = JsonErrorRequestHandler  # same slots: only the methods change
        return handler


class JsonErrorAppRunner(web.AppRunner):
    """``web.AppRunner`` whose server answers aiohttp's own errors as OpenAI JSON."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = JsonErrorServer
        return server
