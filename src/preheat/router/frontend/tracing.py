"""One request's trace through the router (OpenTelemetry; see ``preheat.process.tracing``).

Spans, all children of one ``router.request`` (SERVER) span that starts at receipt, whose
parent is the client's ``traceparent`` when it sent one:

- ``router.parse``: receipt to a validated, tokenized and hashed request;
- ``router.admission``: the in-flight bound's verdict (admitted or the rejection's reason),
  with the request's SLO class and tenant;
- ``router.queue_wait``: only when no endpoint was routable and the request waited;
- ``router.schedule``: one per attempt: the chosen endpoint, the reason, the predicted TTFT and
  cached blocks, the alternates' predicted TTFTs (best first), the explanation;
- ``router.upstream``: one per attempt (CLIENT): the call to the worker, ended with its error
  when it failed (and was retried), its ``traceparent`` sent on to the worker;
- events on ``router.request``: ``first_token`` (TTFT), ``cancelled``; the span ends with the
  stream, with the outcome and the GenAI usage.

Attribute names follow the OpenTelemetry GenAI semantic conventions where they exist
(``gen_ai.request.model``, ``gen_ai.request.max_tokens``, ``gen_ai.usage.input_tokens``,
``gen_ai.usage.output_tokens``, ``gen_ai.response.finish_reasons``), ``server.address`` for the
worker, and ``dev.preheat.*`` for the rest (a vendor's attributes under its reverse domain, as
the OpenTelemetry naming rules ask). Times come from the ``perf_counter()`` readings the
dispatcher takes anyway (spans are written after the fact, never around awaits).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.util.types import AttributeValue

from preheat.core.routing.types import RouteDecision
from preheat.process.logs import pseudonym
from preheat.process.tracing import Clock, Tracing
from preheat.proto.preheat.v1 import inference_pb2

if TYPE_CHECKING:
    from preheat.router.frontend.dispatch import Prepared

MAX_ALTERNATES = 4  # alternates named on a schedule span
QUEUE_SPAN_MIN_S = 0.001  # a shorter wait for an endpoint is no queue wait

_FINISH: dict[int, str] = {
    inference_pb2.FINISH_REASON_STOP: "stop",
    inference_pb2.FINISH_REASON_LENGTH: "length",
    inference_pb2.FINISH_REASON_ABORT: "abort",
}


def start(
    tracing: Tracing | None,
    carrier: Mapping[str, str],
    api: str,
    operation: str,
    received_pc: float,
) -> RequestTrace | None:
    """A request's trace, or None when tracing is off (the one test the hot path pays)."""
    if tracing is None:
        return None
    return RequestTrace(tracing, carrier, api, operation, received_pc)


def prepared(prep: Prepared, trace: RequestTrace | None) -> Prepared:
    """``prep`` carrying ``trace``, its parse span recorded (``prep`` itself when off)."""
    if trace is None:
        return prep
    trace.parsed(prep.request, prep.info.prompt_tokens, time.perf_counter())
    return dataclasses.replace(prep, trace=trace)


class RequestTrace:
    """The spans of one request; every method takes the times it records."""

    def __init__(
        self,
        tracing: Tracing,
        carrier: Mapping[str, str],
        api: str,
        operation: str,
        received_pc: float,
    ) -> None:
        self._tracing = tracing
        self._clock = Clock.now()
        self._tracer = tracing.tracer
        self.root = self._tracer.start_span(
            "router.request",
            context=tracing.extract(carrier),
            kind=SpanKind.SERVER,
            start_time=self._clock.ns(received_pc),
            attributes={"dev.preheat.api": api, "gen_ai.operation.name": operation},
        )
        self._received_pc = received_pc
        self._attempt = 0
        self._upstream: Span | None = None
        # the current attempt's trace context, as gRPC metadata or HTTP headers
        self.upstream_metadata: tuple[tuple[str, str], ...] = ()
        # not sampled (OTEL_TRACES_SAMPLER): every method returns at once, but the upstream
        # call still carries the trace context, so the worker follows the same decision
        self.recording = self.root.is_recording()
        self._ctx: Context | None = set_span_in_context(self.root) if self.recording else None
        # the OpenMetrics exemplar that links a TTFT or e2e bucket to this trace: only for a
        # sampled trace (an unsampled one is not exported: a link to nothing)
        self.exemplar: dict[str, str] | None = (
            {"trace_id": format(self.root.get_span_context().trace_id, "032x")}
            if self.recording
            else None
        )

    @property
    def trace_id(self) -> str:
        """The trace id, 32 lower-case hex digits (exemplars, logs)."""
        return format(self.root.get_span_context().trace_id, "032x")

    def _span(
        self,
        name: str,
        start_pc: float,
        end_pc: float,
        attrs: dict[str, AttributeValue],
        error: str = "",
    ) -> None:
        """A finished child span of the request (ERROR with ``error`` when given)."""
        span = self._tracer.start_span(
            name, context=self._ctx, start_time=self._clock.ns(start_pc), attributes=attrs
        )
        if error:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=self._clock.ns(end_pc))

    def parsed(self, req: inference_pb2.GenerateRequest, prompt_tokens: int, now_pc: float) -> None:
        if not self.recording:
            return
        self.root.set_attributes(
            {
                "gen_ai.request.model": req.model,
                "gen_ai.request.max_tokens": req.sampling.max_tokens,
                "gen_ai.usage.input_tokens": prompt_tokens,
                "dev.preheat.request_id": req.request_id,
            }
        )
        self._span("router.parse", self._received_pc, now_pc, _attrs(prompt_tokens=prompt_tokens))

    def refused(self, code: str, message: str, now_pc: float) -> None:
        """Refused before it was routed (malformed, unknown class, over a quota)."""
        if not self.recording:
            return
        self.root.add_event("refused", {"dev.preheat.code": code, "dev.preheat.reason": message})
        self.end(code, now_pc, error=message)

    def admission(
        self, admitted: bool, slo_class: str, tenant: str, explanation: str, now_pc: float
    ) -> None:
        if not self.recording:
            return
        self._span(
            "router.admission",
            now_pc,
            now_pc,
            _attrs(
                admitted=admitted,
                slo_class=slo_class,
                tenant=pseudonym(tenant),
                reason=explanation or None,
            ),
            error="" if admitted else explanation,
        )

    def fallback(self, pool: str, model: str, now_pc: float) -> None:
        """The request went on to its class's fallback pool: the spans that follow (that
        pool's admission, schedule and upstream call) are its, in this same trace."""
        if not self.recording:
            return
        attrs = {"dev.preheat.fallback_pool": pool, "dev.preheat.fallback_model": model}
        self.root.set_attributes(attrs)
        self.root.add_event("fallback", attrs, timestamp=self._clock.ns(now_pc))

    def scheduled(
        self, decision: RouteDecision, start_pc: float, routable_pc: float, end_pc: float
    ) -> None:
        if not self.recording:
            return
        self._attempt += 1
        if routable_pc - start_pc >= QUEUE_SPAN_MIN_S:
            self._span("router.queue_wait", start_pc, routable_pc, _attrs(attempt=self._attempt))
        ep = decision.endpoint
        chosen = ep.id if ep is not None else ""
        alternates = [
            f"{c.endpoint.id}={c.total_ms:.1f}ms"
            for c in sorted(decision.candidates, key=lambda c: c.total_ms)
            if c.endpoint.id != chosen
        ][:MAX_ALTERNATES]
        self._span(
            "router.schedule",
            start_pc,
            end_pc,
            _attrs(
                attempt=self._attempt,
                endpoint=chosen or None,
                reason=decision.reason,
                predicted_ttft_ms=round(decision.predicted_ttft_ms, 3),
                predicted_cached_blocks=decision.cached_blocks,
                alternates=alternates or None,
                queue_wait_ms=round((routable_pc - start_pc) * 1e3, 3),
                explanation=decision.explanation,
            ),
            error=decision.explanation if ep is None else "",
        )

    def upstream(self, endpoint: str, address: str, now_pc: float) -> tuple[tuple[str, str], ...]:
        """Starts this attempt's call span; the gRPC metadata that carries it to the worker."""
        if not self.recording:  # the unsampled decision, passed on
            self.upstream_metadata = self._tracing.metadata(self.root)
            return self.upstream_metadata
        self._upstream = self._tracer.start_span(
            "router.upstream",
            context=self._ctx,
            kind=SpanKind.CLIENT,
            start_time=self._clock.ns(now_pc),
            attributes={
                "dev.preheat.attempt": self._attempt,
                "dev.preheat.endpoint": endpoint,
                "server.address": address,
            },
        )
        self.upstream_metadata = self._tracing.metadata(self._upstream)
        return self.upstream_metadata

    def attempt_failed(self, code: str, detail: str, retrying: bool, now_pc: float) -> None:
        span, self._upstream = self._upstream, None
        if span is None:
            return
        span.set_attributes({"dev.preheat.code": code, "dev.preheat.retrying": retrying})
        span.set_status(Status(StatusCode.ERROR, detail))
        span.end(end_time=self._clock.ns(now_pc))

    def first_token(self, now_pc: float) -> None:
        if not self.recording:
            return
        ttft_ms = round((now_pc - self._received_pc) * 1e3, 3)
        at = self._clock.ns(now_pc)
        self.root.add_event("first_token", {"dev.preheat.ttft_ms": ttft_ms}, timestamp=at)
        if self._upstream is not None:
            self._upstream.add_event("first_token", timestamp=at)

    def end(
        self,
        outcome: str,
        now_pc: float,
        *,
        tokens: int = 0,
        usage: inference_pb2.Usage | None = None,
        finish_reason: int = 0,
        error: str = "",
    ) -> None:
        if not self.recording:
            return
        at = self._clock.ns(now_pc)
        if outcome == "cancelled":
            self.root.add_event("cancelled", timestamp=at)
        attrs: dict[str, str | int | list[str]] = {"dev.preheat.outcome": outcome}
        attrs["gen_ai.usage.output_tokens"] = usage.completion_tokens if usage else tokens
        if usage is not None:
            attrs["dev.preheat.cached_tokens"] = usage.cached_tokens
        if finish_reason in _FINISH:
            attrs["gen_ai.response.finish_reasons"] = [_FINISH[finish_reason]]
        self.root.set_attributes(attrs)
        for span in (self._upstream, self.root):
            if span is None:
                continue
            if error:
                span.set_status(Status(StatusCode.ERROR, error))
            span.end(end_time=at)
        self._upstream = None


def _attrs(**kv: AttributeValue | None) -> dict[str, AttributeValue]:
    """``dev.preheat.<name>`` attributes, those that are None left out."""
    return {f"dev.preheat.{k}": v for k, v in kv.items() if v is not None}
