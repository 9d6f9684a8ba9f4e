"""One error family for the whole system, with canonical codes.

Adapters map a code to a gRPC status (``preheat.wire.errors``) and to an HTTP status
(:func:`http_status`) in one place each; a client never sees a traceback.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    FAILED_PRECONDITION = "failed_precondition"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    UNAVAILABLE = "unavailable"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    CANCELLED = "cancelled"
    UNAUTHENTICATED = "unauthenticated"
    UNIMPLEMENTED = "unimplemented"
    INTERNAL = "internal"


class Reason(enum.Enum):
    """A finer cause under an :class:`ErrorCode`: what OpenAI-compatible clients key on
    (the HTTP edge sends it as the error's ``code``; gRPC has only the status)."""

    MODEL_NOT_FOUND = "model_not_found"  # with NOT_FOUND
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # with INVALID_ARGUMENT
    UNSUPPORTED_PARAMETER = "unsupported_parameter"  # with INVALID_ARGUMENT


_HTTP = {
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.FAILED_PRECONDITION: 409,
    ErrorCode.RESOURCE_EXHAUSTED: 429,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.DEADLINE_EXCEEDED: 504,
    ErrorCode.CANCELLED: 499,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.UNIMPLEMENTED: 501,
    ErrorCode.INTERNAL: 500,
}


class PreheatError(Exception):
    """An error with a canonical code and a message that says what is wrong and how to fix it."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        retry_after_s: float | None = None,
        reason: Reason | None = None,
        param: str | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s
        self.reason = reason  # a finer cause than ``code``, for clients that key on it
        self.param = param  # the request field at fault, when one is

    def __repr__(self) -> str:
        return f"PreheatError({self.code.value}, {self.message!r})"


def http_status(code: ErrorCode) -> int:
    """The HTTP status for an error code."""
    return _HTTP[code]
