"""A gRPC server interceptor that keeps an unexpected exception's text from the client.

grpc.aio answers a handler that raised with status UNKNOWN and details
``Unexpected <class 'X'>: <the exception's text>``. Wrapped by :class:`InternalErrorGuard`,
such a call ends with INTERNAL and a generic message instead; the exception, with a
reference the message quotes, goes to the log. Aborts (``context.abort``) and cancellations
pass through unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from preheat.process.logs import fields

log = logging.getLogger("preheat.router")


def _message(method: str) -> str:
    ref = uuid.uuid4().hex[:16]
    log.exception("grpc_handler_error", extra=fields(method=method, error_ref=ref))
    return f"internal error in the router (reference {ref}; its log has the details)"


def _passes(e: BaseException) -> bool:
    return isinstance(e, (grpc.aio.AbortError, asyncio.CancelledError))


class InternalErrorGuard(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        kw = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.response_streaming:
            inner_stream = (
                handler.stream_stream if handler.request_streaming else (handler.unary_stream)
            )

            async def guarded_stream(request: Any, context: Any) -> AsyncIterator[Any]:
                try:
                    async for item in inner_stream(request, context):
                        yield item
                except Exception as e:
                    if _passes(e):
                        raise
                    await context.abort(grpc.StatusCode.INTERNAL, _message(method))

            if handler.request_streaming:
                return grpc.stream_stream_rpc_method_handler(guarded_stream, **kw)
            return grpc.unary_stream_rpc_method_handler(guarded_stream, **kw)

        inner = handler.stream_unary if handler.request_streaming else handler.unary_unary

        async def guarded(request: Any, context: Any) -> Any:
            try:
                return await inner(request, context)
            except Exception as e:
                if _passes(e):
                    raise
                await context.abort(grpc.StatusCode.INTERNAL, _message(method))

        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(guarded, **kw)
        return grpc.unary_unary_rpc_method_handler(guarded, **kw)
