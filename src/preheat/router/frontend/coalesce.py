"""Token coalescing on the proxy path: fewer, larger frames to the client.

Relayed chunks are buffered and flushed when ``max_tokens`` tokens are buffered or
``max_delay_s`` has passed since the oldest buffered one arrived, whichever is first. The
first token and the last chunk are never held (TTFT is not traded for throughput), and
``max_tokens == 1`` disables coalescing (every chunk goes out as it comes).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from preheat.proto.preheat.v1 import inference_pb2


@dataclass(frozen=True)
class CoalesceConfig:
    max_tokens: int = 1  # flush at this many buffered tokens; 1 = off
    max_delay_s: float = 0.005  # flush at this age of the oldest buffered token

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"coalesce tokens must be >= 1, got {self.max_tokens}")
        if self.max_delay_s < 0:
            raise ValueError(f"coalesce delay must be >= 0, got {self.max_delay_s}")

    @property
    def enabled(self) -> bool:
        return self.max_tokens > 1


def merge(
    chunks: list[inference_pb2.GenerateResponse],
) -> inference_pb2.GenerateResponse:
    """One chunk with the texts and token ids of ``chunks`` (the last one's other fields)."""
    if len(chunks) == 1:
        return chunks[0]
    out = inference_pb2.GenerateResponse()
    out.CopyFrom(chunks[-1])
    out.text = "".join(c.text for c in chunks)
    del out.token_ids[:]
    for c in chunks:
        out.token_ids.extend(c.token_ids)
    return out


async def coalesce(
    upstream: AsyncIterator[inference_pb2.GenerateResponse], config: CoalesceConfig
) -> AsyncGenerator[inference_pb2.GenerateResponse, None]:
    """Re-frames ``upstream`` per ``config``; errors from upstream propagate after a flush of
    nothing (buffered tokens of a failing stream are dropped with it)."""
    if not config.enabled:
        async for chunk in upstream:
            yield chunk
        return
    loop = asyncio.get_running_loop()
    it = aiter(upstream)
    buf: list[inference_pb2.GenerateResponse] = []
    buffered = 0
    oldest = 0.0
    sent_first = False
    pending: asyncio.Future[inference_pb2.GenerateResponse] | None = None
    try:
        while True:
            if buf:
                if pending is None:
                    pending = asyncio.ensure_future(anext(it))
                timeout = oldest + config.max_delay_s - loop.time()
                done, _ = await asyncio.wait({pending}, timeout=max(0.0, timeout))
                if not done:
                    yield merge(buf)
                    buf, buffered = [], 0
                    continue
                fut, pending = pending, None
                try:
                    chunk = fut.result()
                except StopAsyncIteration:
                    break
            else:
                if pending is not None:
                    fut, pending = pending, None
                    try:
                        chunk = await fut
                    except StopAsyncIteration:
                        break
                else:
                    try:
                        chunk = await anext(it)
                    except StopAsyncIteration:
                        break
            final = chunk.finish_reason != inference_pb2.FINISH_REASON_UNSPECIFIED
            n = len(chunk.token_ids)
            if not sent_first and n and not buf:
                sent_first = True
                yield chunk  # the first token goes out at once
                if final:
                    return
                continue
            if not buf:
                oldest = loop.time()
            buf.append(chunk)
            buffered += n
            if final or buffered >= config.max_tokens:
                yield merge(buf)
                buf, buffered = [], 0
                if final:
                    return
        if buf:
            yield merge(buf)
    finally:
        if pending is not None:
            # wait for the read to end, so the caller may close ``upstream`` right after
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending
