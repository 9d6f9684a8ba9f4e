"""``PreheatError`` at the gRPC edge: the one place where an error code becomes a status.

Servers call :func:`abort` (grpc.aio) with a ``PreheatError``; clients that need the
reverse (the router retrying on UNAVAILABLE) use :func:`error_code`.
"""

from __future__ import annotations

from typing import Any, NoReturn

import grpc

from preheat.core.errors import ErrorCode, PreheatError

_TO_GRPC: dict[ErrorCode, grpc.StatusCode] = {
    ErrorCode.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorCode.FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorCode.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED,
    ErrorCode.CANCELLED: grpc.StatusCode.CANCELLED,
    ErrorCode.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    ErrorCode.UNIMPLEMENTED: grpc.StatusCode.UNIMPLEMENTED,
    ErrorCode.INTERNAL: grpc.StatusCode.INTERNAL,
}
_FROM_GRPC = {v: k for k, v in _TO_GRPC.items()}

RETRY_AFTER_METADATA_KEY = "retry-after-s"


def grpc_status(code: ErrorCode) -> grpc.StatusCode:
    """The gRPC status code for a Preheat error code (the one mapping)."""
    return _TO_GRPC[code]


def error_code(status: grpc.StatusCode) -> ErrorCode:
    """The Preheat error code for a gRPC status (anything unmapped is INTERNAL)."""
    return _FROM_GRPC.get(status, ErrorCode.INTERNAL)


async def abort(context: Any, err: PreheatError) -> NoReturn:
    """Ends the RPC on a grpc.aio ``context`` with ``err``'s status and message.

    A ``retry_after_s`` goes out as trailing metadata ``retry-after-s``.
    """
    if err.retry_after_s is not None:
        context.set_trailing_metadata(((RETRY_AFTER_METADATA_KEY, f"{err.retry_after_s:g}"),))
    await context.abort(grpc_status(err.code), err.message)
    raise AssertionError("context.abort returned")  # pragma: no cover
