"""A streaming gRPC client that records what a user feels: TTFT, ITL, end-to-end."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import grpc

from preheat.proto.preheat.v1 import inference_pb2 as pb
from preheat.proto.preheat.v1 import inference_pb2_grpc as pb_grpc


@dataclass
class StreamRecord:
    """One request as the client saw it (seconds on the client's monotonic clock)."""

    request_id: str
    ok: bool
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)  # gaps between token-carrying chunks
    completion_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str = ""
    server_ttft_ms: float = 0.0
    server_queue_ms: float = 0.0
    server_prefill_ms: float = 0.0
    server_decode_ms: float = 0.0
    error: str = ""
    status_code: str = ""  # the gRPC status name on failure (e.g. RESOURCE_EXHAUSTED)
    worker_id: str = ""  # the worker that served it, as the server said
    server_e2e_ms: float = 0.0
    router_ms: float = 0.0  # the router's stage, as it said (0: straight to a worker)
    text: str = ""
    last_token_at: float = 0.0

    def tokens_arrived(self, start: float, now: float, count: int) -> None:
        """Records a chunk of ``count`` tokens seen at ``now`` (request sent at ``start``)."""
        if self.completion_tokens == 0:
            self.ttft_s = now - start
        else:
            self.itl_s.append(now - self.last_token_at)
        self.last_token_at = now
        self.completion_tokens += count


async def stream_generate(
    stub: pb_grpc.InferenceStub, request: pb.GenerateRequest, *, timeout_s: float | None = None
) -> StreamRecord:
    """Sends one Generate call and records its timing; errors are recorded, not raised."""
    rec = StreamRecord(request_id=request.request_id, ok=False)
    start = time.monotonic()
    parts: list[str] = []
    try:
        async for chunk in stub.Generate(request, timeout=timeout_s):
            if chunk.token_ids:
                rec.tokens_arrived(start, time.monotonic(), len(chunk.token_ids))
            parts.append(chunk.text)
            if chunk.request_id:
                rec.request_id = chunk.request_id
            if chunk.worker_id:
                rec.worker_id = chunk.worker_id
            if chunk.finish_reason != pb.FINISH_REASON_UNSPECIFIED:
                rec.finish_reason = pb.FinishReason.Name(chunk.finish_reason)
                rec.prompt_tokens = chunk.usage.prompt_tokens
                rec.cached_tokens = chunk.usage.cached_tokens
                rec.server_ttft_ms = chunk.timing.ttft_ms
                rec.server_queue_ms = chunk.timing.queue_ms
                rec.server_prefill_ms = chunk.timing.prefill_ms
                rec.server_decode_ms = chunk.timing.decode_ms
                rec.server_e2e_ms = chunk.timing.e2e_ms
                rec.router_ms = chunk.timing.router_ms
        rec.e2e_s = time.monotonic() - start
        rec.ok = bool(rec.finish_reason)
        if not rec.ok:
            rec.error = "stream ended without a finish reason"
    except grpc.aio.AioRpcError as err:
        rec.e2e_s = time.monotonic() - start
        rec.status_code = err.code().name
        rec.error = f"{err.code().name}: {err.details()}"
    rec.text = "".join(parts)
    return rec
