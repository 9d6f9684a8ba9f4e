"""The client side of lookaside routing over one long-lived ``Router/PickStream``.

A gateway or client that asks the router where to send each request, then connects to that
worker itself, pays one round trip to the router per request. With unary ``Pick`` that round
trip includes setting up a call; on a stream kept open it is one message each way (about
0.3 ms less per decision in Python gRPC on a 2-core machine: docs/benchmarks.md).

    async with PickStream(channel) as picks:
        answer = await picks.pick(router_pb2.PickRequest(request=req), timeout_s=2)
        stub_for(answer.endpoint.address).Generate(req)

Many coroutines may share one :class:`PickStream`; answers are matched to questions by id.
A refusal (RESOURCE_EXHAUSTED, INVALID_ARGUMENT, ...) raises :class:`PickFailed` for that
decision only. When the stream itself breaks (the router restarted, the channel closed),
every decision waiting on it fails with ``UNAVAILABLE`` and the next :meth:`PickStream.pick`
opens a new stream.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import grpc

from preheat.proto.preheat.v1 import router_pb2, router_pb2_grpc

ANSWER_GRACE_S = 0.5  # past the router's own timeout, for the answer to arrive


class PickFailed(Exception):
    """The router gave no endpoint for this request; ``code`` is a gRPC status name."""

    def __init__(self, code: str, message: str, retry_after_s: float = 0.0) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s


class PickStream:
    def __init__(
        self, channel: grpc.aio.Channel, *, metadata: Sequence[tuple[str, str]] = ()
    ) -> None:
        self._stub = router_pb2_grpc.RouterStub(channel)
        self._metadata = tuple(metadata)
        self._ids = itertools.count(1)
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        # id -> (the stream it was sent on, its answer)
        self._waiting: dict[int, tuple[Any, asyncio.Future[router_pb2.PickResult]]] = {}
        self._send = asyncio.Lock()  # one write at a time on a gRPC call

    async def pick(
        self, request: router_pb2.PickRequest, *, timeout_s: float | None = None
    ) -> router_pb2.PickResponse:
        """The router's decision for ``request``; raises :class:`PickFailed` if it has none.

        ``timeout_s`` (None: the router's own queue timeout) is how long the router may
        wait for a routable endpoint before it answers UNAVAILABLE; an answer that has not
        come ``ANSWER_GRACE_S`` after that fails here with DEADLINE_EXCEEDED."""
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        rid = next(self._ids)
        answer: asyncio.Future[router_pb2.PickResult] = asyncio.get_running_loop().create_future()
        try:
            item = router_pb2.PickStreamRequest(
                id=rid,
                pick=request,
                timeout_ms=0
                if timeout_s is None
                else min(max(1, round(timeout_s * 1e3)), 2**32 - 1),
            )
            async with self._send:
                call = self._open()
                self._waiting[rid] = (call, answer)
                try:
                    await call.write(item)
                except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as e:
                    self._broken(call, e)
            wait_s = None if timeout_s is None else timeout_s + ANSWER_GRACE_S
            try:
                result = await asyncio.wait_for(answer, wait_s)
            except TimeoutError:
                raise PickFailed(
                    "DEADLINE_EXCEEDED", f"no answer from the router within {wait_s:g} s"
                ) from None
        finally:
            self._waiting.pop(rid, None)
        if result.HasField("error"):
            refused = result.error
            raise PickFailed(refused.code, refused.message, refused.retry_after_s)
        return result.picked

    def _open(self) -> Any:
        if self._call is None:
            self._call = self._stub.PickStream(metadata=self._metadata)
            self._reader = asyncio.create_task(self._read(self._call))
        return self._call

    async def _read(self, call: Any) -> None:
        try:
            while True:
                msg = await call.read()
                if msg is grpc.aio.EOF:
                    self._broken(call, None)
                    return
                sent = self._waiting.get(msg.id)
                if sent is not None and sent[0] is call and not sent[1].done():
                    sent[1].set_result(msg.result)
        except grpc.aio.AioRpcError as e:
            self._broken(call, e)

    def _broken(self, call: Any, error: BaseException | None) -> None:
        """The stream ``call`` is over: fail what waits on it; the next pick opens another."""
        if self._call is call:
            self._call = None
        why = "the router ended the PickStream"
        if isinstance(error, grpc.aio.AioRpcError):
            why = f"the PickStream failed: {error.code().name} {error.details()}"
        elif error is not None:
            why = f"the PickStream failed: {error!r}"
        for on, waiter in self._waiting.values():
            if on is call and not waiter.done():
                waiter.set_exception(PickFailed("UNAVAILABLE", why, 1.0))

    async def aclose(self) -> None:
        call, reader = self._call, self._reader
        self._call = self._reader = None
        if call is not None:
            call.cancel()
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        for _, waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(PickFailed("CANCELLED", "the PickStream was closed"))

    async def __aenter__(self) -> PickStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
