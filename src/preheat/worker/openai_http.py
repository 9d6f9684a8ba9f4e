"""The worker's OpenAI HTTP API: the engine's own ASGI app, served in the worker's event loop.

The app comes from the engine (for ``--engine vllm``: ``vllm serve``'s FastAPI app over the
worker's ``AsyncLLM``, :mod:`preheat.engine.vllm_openai`); this module only serves it and
ties it to the worker:

- **Socket.** :meth:`OpenAIHttp.bind` binds ``--host:--openai-port`` (0: ephemeral) when the
  worker starts, without listening: until the engine is loaded a connection is refused.
  :meth:`OpenAIHttp.start` builds the app and serves the socket with ``uvicorn.Server``
  (uvicorn's own signal handlers off: the worker's SIGTERM handler drains).
- **Roles.** Every request other than ``GET``/``HEAD``/``OPTIONS`` (the ones that reach the
  engine: completions, chat, tokenize, ...) is admitted like a gRPC ``Generate``: only an
  ``active`` worker takes it; a standby, loading, warming or draining one answers 503 with
  ``Retry-After`` and an OpenAI-shaped error body (vLLM's shape: ``{"error": {"message",
  "type": "ServiceUnavailableError", "param": null, "code": 503}}``). ``GET`` routes
  (``/v1/models``, ``/health``, ``/metrics``, ``/version``) answer in every state.
- **Drain.** Admitted requests count as in flight (``WorkerServer.in_flight``), so a drain
  waits for them within ``--drain-grace-s``; when the grace runs out each is cancelled,
  which aborts it in the engine; a stream that had started ends with an error event and
  ``data: [DONE]`` (as vLLM ends a failed stream), a response not yet started is a 503.
- **Metrics.** Each admitted or refused request counts in ``preheat_worker_requests_total``
  by outcome (2xx ok, 400/404/422 invalid, 429 rejected, 503 unavailable, drain abort
  aborted, other error); ``preheat_worker_e2e_seconds`` gets the time to the response's
  last byte, ``preheat_worker_ttft_seconds`` the time to a stream's first byte. The worker
  does not see tokens on this path, so ``preheat_worker_itl_seconds`` and the stage
  histogram count gRPC requests only; vLLM's own ``vllm:*`` metrics count both paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from preheat.core.errors import ErrorCode, PreheatError
from preheat.process.logs import fields
from preheat.worker.metrics import WorkerOutcome

if TYPE_CHECKING:
    from preheat.worker.server import WorkerServer

log = logging.getLogger(__name__)

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]
AppFactory = Callable[[], Awaitable[ASGIApp]]
"""Builds the engine's OpenAI ASGI app once the engine is loaded."""

RETRY_AFTER_S = 1
UNGATED_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def error_body(message: str, status: int, err_type: str) -> bytes:
    """An OpenAI error body in vLLM's shape (``code`` is the HTTP status, as vLLM sends)."""
    err = {"message": message, "type": err_type, "param": None, "code": status}
    return json.dumps({"error": err}).encode()


def outcome_of(status: int) -> WorkerOutcome:
    """The worker's request outcome for an HTTP status from the app."""
    if 200 <= status < 300:
        return WorkerOutcome.OK
    if status in (400, 404, 413, 422):
        return WorkerOutcome.INVALID
    if status == 429:
        return WorkerOutcome.REJECTED
    if status == 503:
        return WorkerOutcome.UNAVAILABLE
    return WorkerOutcome.ERROR


def _session_of(scope: Any) -> str:
    """The request's ``x-session-id`` header (the router forwards it), "" when none."""
    for key, value in scope.get("headers") or ():
        if bytes(key).lower() == b"x-session-id":
            return bytes(value).decode("latin-1")[:256]
    return ""


async def _send_json(
    send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


class _Response:
    """What the app has sent so far for one request."""

    def __init__(self) -> None:
        self.status = 0
        self.event_stream = False
        self.first_body_at: float | None = None
        self.complete = False

    def seen(self, message: Any, now: float) -> None:
        kind = message.get("type")
        if kind == "http.response.start":
            self.status = int(message.get("status", 0))
            for key, value in message.get("headers") or ():
                if bytes(key).lower() == b"content-type":
                    self.event_stream = bytes(value).startswith(b"text/event-stream")
        elif kind == "http.response.body":
            if self.first_body_at is None and message.get("body"):
                self.first_body_at = now
            if not message.get("more_body", False):
                self.complete = True


class Gate:
    """ASGI middleware: the worker's role, drain and metrics around the engine's app."""

    def __init__(self, worker: WorkerServer, app: ASGIApp) -> None:
        self._w = worker
        self._app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("method") in UNGATED_METHODS:
            await self._app(scope, receive, send)
            return
        await self._admitted(scope, receive, send)

    async def _admitted(self, scope: Any, receive: Any, send: Any) -> None:
        loop = asyncio.get_running_loop()
        received = loop.time()
        task = asyncio.current_task()
        assert task is not None
        w = self._w
        request_id = f"openai-{uuid.uuid4().hex}"
        try:
            handle = w.admit(request_id, on_abort=task.cancel, session_id=_session_of(scope))
        except PreheatError as e:
            unavailable = e.code == ErrorCode.UNAVAILABLE
            w.metrics.observe_outcome(
                WorkerOutcome.UNAVAILABLE if unavailable else WorkerOutcome.ERROR
            )
            log.info("openai_refused", extra=fields(code=e.code.value, reason=e.message))
            await _send_json(
                send,
                503,
                error_body(e.message, 503, "ServiceUnavailableError"),
                [(b"retry-after", str(RETRY_AFTER_S).encode())],
            )
            return
        response = _Response()

        async def tracked_send(message: Any) -> None:
            response.seen(message, loop.time())
            await send(message)

        outcome = WorkerOutcome.ERROR
        try:
            try:
                await self._app(scope, receive, tracked_send)
            except asyncio.CancelledError:
                if not handle.abort_requested:
                    outcome = WorkerOutcome.CANCELLED
                    raise
                task.uncancel()
            if handle.abort_requested and not response.complete:
                outcome = WorkerOutcome.ABORTED
                await _abort_response(send, response)
                return
            outcome = outcome_of(response.status)
            if outcome is WorkerOutcome.OK:
                now = loop.time()
                w.metrics.e2e.observe(now - received)
                if response.event_stream and response.first_body_at is not None:
                    w.metrics.ttft.observe(response.first_body_at - received)
        finally:
            w.release(handle)
            w.metrics.observe_outcome(outcome)


async def _abort_response(send: Any, response: _Response) -> None:
    """Ends a request the drain aborted: an error event on a stream, else a 503."""
    message = "the worker is draining and its grace ran out; the request was aborted"
    body = error_body(message, 503, "ServiceUnavailableError")
    with contextlib.suppress(Exception):  # the client may be gone already
        if response.status == 0:
            await _send_json(send, 503, body, [(b"retry-after", str(RETRY_AFTER_S).encode())])
        elif response.event_stream:
            tail = b"data: " + body + b"\n\ndata: [DONE]\n\n"
            await send({"type": "http.response.body", "body": tail, "more_body": False})
        else:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
    log.warning("request_aborted", extra=fields(reason="drain grace over", path="openai"))


def _uvicorn_server(config: Any) -> Any:
    import uvicorn

    class _NoSignalServer(uvicorn.Server):  # type: ignore[misc]
        """uvicorn without its SIGINT/SIGTERM handlers: the worker's own handler drains."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return _NoSignalServer(config)


class OpenAIHttp:
    """The OpenAI HTTP server of one worker: bound at start, serving once the engine loads."""

    def __init__(
        self,
        worker: WorkerServer,
        factory: AppFactory,
        *,
        host: str,
        port: int,
        stop_grace_s: float,
    ) -> None:
        self._w = worker
        self._factory = factory
        self._host = host
        self._port = port
        self._stop_grace_s = stop_grace_s
        self._sock: socket.socket | None = None
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    def bind(self) -> int:
        """Binds the socket (not listening yet); returns the bound port."""
        host = self._host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host.strip("[]"), self._port))
        except OSError as e:
            sock.close()
            raise OSError(f"could not bind the OpenAI port on {host}:{self._port}: {e}") from e
        self._sock = sock
        return int(sock.getsockname()[1])

    async def start(self) -> None:
        """Builds the engine's app and serves it on the bound socket."""
        import uvicorn

        assert self._sock is not None, "bind() first"
        app = await self._factory()
        config = uvicorn.Config(
            Gate(self._w, app),
            lifespan="on",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=max(1, round(self._stop_grace_s)),
        )
        server = _uvicorn_server(config)
        self._server = server
        self._task = asyncio.get_running_loop().create_task(
            server.serve(sockets=[self._sock]), name="openai-http"
        )
        while not server.started:
            if self._task.done():
                self._task.result()  # raises uvicorn's start-up failure
                raise RuntimeError("the OpenAI HTTP server stopped while starting")
            await asyncio.sleep(0.01)
        log.info("openai_serving", extra=fields(port=self._sock.getsockname()[1]))

    async def stop(self) -> None:
        """Stops uvicorn (open connections get ``stop_grace_s``) and closes the socket."""
        server, task = self._server, self._task
        self._server = self._task = None
        if server is not None and task is not None:
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._sock is not None:
            self._sock.close()
            self._sock = None
