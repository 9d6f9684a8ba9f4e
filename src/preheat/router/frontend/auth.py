"""Credentials at the router's edge: API keys on the HTTP API, a token for lookaside picks,
and the tenant a request belongs to.

- **Key files** (``--api-keys-file``, ``--pick-token-file``; in the chart, a Secret mounted
  as a file): one credential a line, ``KEY`` or ``KEY TENANT``; blank lines and lines
  starting with ``#`` are skipped. A key without a tenant is its own tenant, named by a
  short hash of the key (never the key). Read once at start-up (restart to rotate).
- **Comparison** is constant-time (:func:`hmac.compare_digest` over every configured key,
  without stopping at the first match), so a response's timing says nothing of a key.
- **HTTP** (:func:`api_key_middleware`): ``Authorization: Bearer KEY``; a missing or wrong
  key is a 401 in OpenAI's shape (``code: invalid_api_key``, which the ``openai`` client
  raises as ``AuthenticationError``). ``/healthz``, ``/ready``, ``/health`` and ``/metrics``
  stay open.
- **gRPC** (:class:`PickAuthInterceptor`): every method of ``preheat.v1.Router`` (Pick,
  PickBatch, PickStream) needs metadata ``authorization: Bearer TOKEN``; otherwise
  UNAUTHENTICATED before the request is parsed (a PickStream's messages are read as bytes
  and dropped until the client half-closes, at most 1 s, see :func:`_deny`).
  ``preheat.v1.Inference`` and health stay
  open. The in-process :class:`~preheat.router.embedded.EmbeddedRouter` needs nothing.
- **Tenant** (:func:`http_tenant`): the tenant of the request's API key; without API keys,
  the value of a header the operator names (``--tenant-header``, for a gateway in front
  that sets it; never trusted by default). The tenant salts the prefix-cache block hashes
  (see :func:`preheat.core.blocks.tenant_root`), so one tenant cannot learn from routing
  or from Pick's ``cached_blocks`` which prompts another sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web

from preheat.process.logs import fields
from preheat.router.frontend.errors import status_error_response

log = logging.getLogger("preheat.router")

OPEN_PATHS = frozenset({"/healthz", "/ready", "/health", "/metrics"})
TENANT_KEY: web.RequestKey[str] = web.RequestKey("tenant", str)  # set on the request
ROUTER_SERVICE_PREFIX = "/preheat.v1.Router/"


class CredentialFileError(ValueError):
    """A key file that cannot be read or holds no key; the message names the file."""


def key_tenant(key: str) -> str:
    """The tenant of a key listed without one: a short hash of it (logs never see the key)."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class KeySet:
    """Credentials and their tenants; :meth:`match` compares in constant time."""

    entries: tuple[tuple[bytes, str], ...]

    @classmethod
    def of(cls, lines: Iterable[str], origin: str = "keys") -> KeySet:
        entries: list[tuple[bytes, str]] = []
        for n, line in enumerate(lines, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            parts = text.split()
            if len(parts) > 2:
                raise CredentialFileError(
                    f"{origin}:{n}: expected 'KEY' or 'KEY TENANT', got {len(parts)} words"
                )
            key = parts[0]
            entries.append((key.encode(), parts[1] if len(parts) == 2 else key_tenant(key)))
        if not entries:
            raise CredentialFileError(f"{origin}: holds no key (one key a line)")
        return cls(tuple(entries))

    @classmethod
    def from_file(cls, path: str | Path) -> KeySet:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise CredentialFileError(f"{path}: cannot read: {e.__class__.__name__}") from None
        return cls.of(text.splitlines(), str(path))

    def match(self, presented: str | None) -> str | None:
        """The tenant of ``presented`` if it is one of the keys, else None."""
        if not presented:
            return None
        given = presented.encode()
        found: str | None = None
        for key, tenant in self.entries:  # no early exit: every key is compared
            if hmac.compare_digest(key, given) and found is None:
                found = tenant
        return found


def bearer(value: str | None) -> str | None:
    """The credential of an ``Authorization: Bearer X`` value, else None."""
    if not value:
        return None
    scheme, _, cred = value.strip().partition(" ")
    return (cred.strip() or None) if scheme.lower() == "bearer" else None


def unauthorized(message: str) -> web.Response:
    return status_error_response(
        401,
        message,
        code="invalid_api_key",
        headers={"WWW-Authenticate": 'Bearer realm="preheat"'},
    )


def api_key_middleware(keys: KeySet) -> Any:
    """Requires ``Authorization: Bearer KEY`` on every path but :data:`OPEN_PATHS`; puts
    the key's tenant in ``request[TENANT_KEY]``."""

    @web.middleware
    async def check(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        presented = bearer(request.headers.get("Authorization"))
        tenant = keys.match(presented)
        if tenant is None:
            log.info(
                "request_unauthenticated",
                extra=fields(path=request.path, key_given=presented is not None),
            )
            if presented is None:
                return unauthorized(
                    "no API key given: send 'Authorization: Bearer YOUR_KEY' "
                    "(the router's API keys are set by its operator)"
                )
            return unauthorized("incorrect API key provided")
        request[TENANT_KEY] = tenant
        return await handler(request)

    return check


def http_tenant(request: web.Request, tenant_header: str) -> str:
    """The request's tenant: its API key's, else the trusted header's value, else ""."""
    tenant = request.get(TENANT_KEY)
    if isinstance(tenant, str) and tenant:
        return tenant
    return request.headers.get(tenant_header, "") if tenant_header else ""


class PickAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """UNAUTHENTICATED for a ``preheat.v1.Router`` call without a valid bearer token."""

    def __init__(self, tokens: KeySet) -> None:
        self._tokens = tokens

    def _allowed(self, metadata: Any) -> bool:
        presented = None
        for key, value in metadata or ():
            if key.lower() == "authorization" and isinstance(value, str):
                presented = bearer(value)
        return self._tokens.match(presented) is not None

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(ROUTER_SERVICE_PREFIX):
            return handler
        if self._allowed(handler_call_details.invocation_metadata):
            return handler
        log.info("pick_unauthenticated", extra=fields(method=method))
        return _deny(handler, "a lookaside pick needs metadata 'authorization: Bearer TOKEN'")


#: a denied call that streams requests is answered once the client has half-closed, or
#: after this many seconds (see :func:`_deny`)
DENY_READ_S = 1.0


async def _drain_requests(requests: Any) -> None:
    """Reads and drops the client's messages (as bytes, unparsed) until it half-closes,
    within :data:`DENY_READ_S`."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DENY_READ_S):
            async for _ in requests:
                pass


def _deny(handler: Any, message: str) -> Any:
    """A handler of ``handler``'s shape that answers UNAUTHENTICATED without parsing the
    request. A call that streams requests is answered once the client has sent what it
    sends at once (:func:`_drain_requests`, read as bytes): a grpc-python client still
    writing or half-closing when the status arrives may report INTERNAL "Internal error
    from Core" or CANCELLED instead (its failed write is taken for the call's error,
    grpc/grpc#27240; seen once in 300 PickStream calls with two busy loops on 2 cores, and
    every time for a client writing 100 messages at once when the status came after 16). A
    client still writing after :data:`DENY_READ_S` can still see that."""
    code = grpc.StatusCode.UNAUTHENTICATED
    kw = {
        "request_deserializer": None if handler.request_streaming else handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }

    async def deny(request: Any, context: Any) -> Any:
        if handler.request_streaming:
            await _drain_requests(request)
        await context.abort(code, message)

    if handler.response_streaming:

        async def deny_stream(request: Any, context: Any) -> Any:
            await deny(request, context)
            yield  # pragma: no cover  (an async generator, as a streaming handler is)

        if handler.request_streaming:
            return grpc.stream_stream_rpc_method_handler(deny_stream, **kw)
        return grpc.unary_stream_rpc_method_handler(deny_stream, **kw)

    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(deny, **kw)
    return grpc.unary_unary_rpc_method_handler(deny, **kw)
