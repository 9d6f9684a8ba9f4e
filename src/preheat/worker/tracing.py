"""One Generate call's trace in the worker (OpenTelemetry; see ``preheat.process.tracing``).

A ``worker.generate`` (SERVER) span, the child of the caller's ``traceparent`` (the router's
``router.upstream`` span), from receipt to the last chunk, with children written from the
engine's stage timing when the request finishes:

- ``worker.queue``: arrival at the engine to first scheduled;
- ``worker.prefill``: to the first token; the prompt tokens cached (prefix cache) and computed;
- ``worker.decode``: first to last token; the tokens and the mean inter-token latency;

and events ``cancelled`` (the client went away), ``aborted`` (a drain's grace ran out),
``refused`` (not active, invalid, full). GenAI attributes as on the router's spans.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from preheat.process.tracing import Clock, Tracing
from preheat.proto.preheat.v1 import inference_pb2

_FINISH: dict[int, str] = {
    inference_pb2.FINISH_REASON_STOP: "stop",
    inference_pb2.FINISH_REASON_LENGTH: "length",
    inference_pb2.FINISH_REASON_ABORT: "abort",
}


def start(
    tracing: Tracing | None, context: Any, req: inference_pb2.GenerateRequest
) -> GenerateTrace | None:
    """The call's trace (its parent from the call's metadata), or None when tracing is off."""
    if tracing is None:
        return None
    carrier = {k.lower(): v for k, v in context.invocation_metadata() or () if isinstance(v, str)}
    return GenerateTrace(tracing, carrier, req)


class GenerateTrace:
    def __init__(
        self, tracing: Tracing, carrier: Mapping[str, str], req: inference_pb2.GenerateRequest
    ) -> None:
        self._clock = Clock.now()
        self._tracer = tracing.tracer
        self.span = self._tracer.start_span(
            "worker.generate",
            context=tracing.extract(carrier),
            kind=SpanKind.SERVER,
            start_time=self._clock.epoch_ns,
            attributes={
                "gen_ai.operation.name": "text_completion",
                "gen_ai.request.model": req.model,
                "gen_ai.request.max_tokens": req.sampling.max_tokens,
                "dev.preheat.request_id": req.request_id,
            },
        )
        self._ctx: Context = set_span_in_context(self.span)
        self._final: inference_pb2.GenerateResponse | None = None

    def chunk(self, chunk: inference_pb2.GenerateResponse) -> None:
        """Sees a chunk going out; the last one (with a finish reason) carries the timing."""
        if chunk.finish_reason != inference_pb2.FINISH_REASON_UNSPECIFIED:
            self._final = chunk

    def event(self, name: str, **attrs: str) -> None:
        self.span.add_event(name, {f"dev.preheat.{k}": v for k, v in attrs.items()})

    def end(self, outcome: str, error: str = "") -> None:
        if not self.span.is_recording():  # not sampled: nothing to say
            return
        now_ns = time.time_ns()
        final = self._final
        if final is not None:
            self._stages(final)
            u = final.usage
            self.span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": u.prompt_tokens,
                    "gen_ai.usage.output_tokens": u.completion_tokens,
                    "dev.preheat.cached_tokens": u.cached_tokens,
                }
            )
            if final.finish_reason in _FINISH:
                self.span.set_attribute(
                    "gen_ai.response.finish_reasons", [_FINISH[final.finish_reason]]
                )
        self.span.set_attribute("dev.preheat.outcome", outcome)
        if error:
            self.span.set_status(Status(StatusCode.ERROR, error))
        self.span.end(end_time=now_ns)

    def _stages(self, final: inference_pb2.GenerateResponse) -> None:
        t, u = final.timing, final.usage
        at = self._clock.epoch_ns
        cached = u.cached_tokens
        decode_tokens = u.completion_tokens
        itl_ms = t.decode_ms / (decode_tokens - 1) if decode_tokens > 1 else 0.0
        for name, ms, attrs in (
            ("worker.queue", t.queue_ms, {}),
            (
                "worker.prefill",
                t.prefill_ms,
                {
                    "dev.preheat.cached_tokens": cached,
                    "dev.preheat.computed_tokens": max(0, u.prompt_tokens - cached),
                },
            ),
            (
                "worker.decode",
                t.decode_ms,
                {"dev.preheat.tokens": decode_tokens, "dev.preheat.itl_mean_ms": round(itl_ms, 3)},
            ),
        ):
            end = at + int(ms * 1e6)
            span = self._tracer.start_span(name, context=self._ctx, start_time=at, attributes=attrs)
            span.end(end_time=end)
            at = end
