"""Token coalescing on a stream of ``GenerateResponse`` chunks: fewer, larger messages.

Used in two places with one implementation: by the worker, when a request asks for it
(``GenerateRequest.coalesce``, which the router sets from its own configuration so the
worker -> router hop carries fewer messages), and by the router's front ends when the
worker cannot be asked to.

Chunks are buffered and flushed when ``max_tokens`` tokens are buffered or ``max_delay_s``
has passed since the oldest buffered one arrived, whichever is first. The first token and
the last chunk are never held (TTFT is not traded for throughput), and ``max_tokens == 1``
disables coalescing (every chunk goes out as it comes).

Cost: one reader task per coalesced stream (not per chunk) and one timer per buffer; the
consumer wakes once per flushed message. The reader keeps reading while the consumer is
busy writing, which is where the merging comes from.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from preheat.proto.preheat.v1 import inference_pb2

MAX_COALESCE_TOKENS = 1024
MAX_COALESCE_DELAY_S = 1.0


@dataclass(frozen=True)
class CoalesceConfig:
    max_tokens: int = 1  # flush at this many buffered tokens; 1 = off
    max_delay_s: float = 0.005  # flush at this age of the oldest buffered token

    def __post_init__(self) -> None:
        if not 1 <= self.max_tokens <= MAX_COALESCE_TOKENS:
            raise ValueError(
                f"coalesce tokens must be in [1, {MAX_COALESCE_TOKENS}], got {self.max_tokens}"
            )
        if not 0 <= self.max_delay_s <= MAX_COALESCE_DELAY_S:
            raise ValueError(
                f"coalesce delay must be in [0, {MAX_COALESCE_DELAY_S * 1e3:g}] ms, "
                f"got {self.max_delay_s * 1e3:g} ms"
            )

    @property
    def enabled(self) -> bool:
        return self.max_tokens > 1

    def to_pb(self) -> inference_pb2.Coalesce:
        return inference_pb2.Coalesce(
            max_tokens=self.max_tokens, max_delay_ms=self.max_delay_s * 1e3
        )

    @classmethod
    def from_pb(cls, msg: inference_pb2.Coalesce) -> CoalesceConfig:
        """From a request's ``coalesce`` field; raises ``ValueError`` saying what is wrong."""
        return cls(max(1, msg.max_tokens), msg.max_delay_ms / 1e3)


def merge(
    chunks: list[inference_pb2.GenerateResponse],
) -> inference_pb2.GenerateResponse:
    """One chunk with the texts, token ids and log probabilities of ``chunks`` (the last
    one's other fields)."""
    if len(chunks) == 1:
        return chunks[0]
    out = inference_pb2.GenerateResponse()
    out.CopyFrom(chunks[-1])
    out.text = "".join(c.text for c in chunks)
    del out.token_ids[:]
    del out.logprobs[:]
    del out.prompt_logprobs[:]
    for c in chunks:
        out.token_ids.extend(c.token_ids)
        out.logprobs.extend(c.logprobs)
        out.prompt_logprobs.extend(c.prompt_logprobs)
    return out


_UNFINISHED = inference_pb2.FINISH_REASON_UNSPECIFIED


async def coalesce(
    upstream: AsyncIterator[inference_pb2.GenerateResponse], config: CoalesceConfig
) -> AsyncGenerator[inference_pb2.GenerateResponse, None]:
    """Re-frames ``upstream`` per ``config``. An error from upstream propagates once the
    chunks before it are out, except the tokens still buffered, which are dropped with the
    failing stream."""
    if not config.enabled:
        async for chunk in upstream:
            yield chunk
        return
    loop = asyncio.get_running_loop()
    buf: list[inference_pb2.GenerateResponse] = []
    buffered = 0
    flush = False  # the buffer should go out now
    finished = False  # upstream ended (normally or not)
    error: BaseException | None = None
    first_pending = True  # the first token-carrying chunk has not been seen yet
    waiter: asyncio.Future[None] | None = None
    timer: asyncio.TimerHandle | None = None

    def wake() -> None:
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_timer() -> None:
        nonlocal timer, flush
        timer = None
        flush = True
        wake()

    async def read() -> None:
        nonlocal buffered, flush, finished, error, first_pending, timer
        try:
            async for chunk in upstream:
                n = len(chunk.token_ids)
                buf.append(chunk)
                buffered += n
                if (
                    chunk.finish_reason != _UNFINISHED
                    or buffered >= config.max_tokens
                    or (first_pending and n)
                ):
                    first_pending = first_pending and not n
                    flush = True
                    wake()
                elif timer is None:
                    timer = loop.call_at(loop.time() + config.max_delay_s, on_timer)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # handed to the consumer, which raises it
            error = e
        finally:
            finished = True
            wake()

    reader = loop.create_task(read())
    try:
        while True:
            if buf and (flush or finished) and error is None:
                out = merge(buf) if len(buf) > 1 else buf[0]
                buf.clear()
                buffered, flush = 0, False
                if timer is not None:
                    timer.cancel()
                    timer = None
                yield out
                continue
            if finished:
                if error is not None:
                    raise error
                return
            waiter = loop.create_future()
            await waiter
            waiter = None
    finally:
        if timer is not None:
            timer.cancel()
        if not reader.done():
            # stop the read, so the caller may close ``upstream`` right after
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
