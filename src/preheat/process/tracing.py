"""OpenTelemetry tracing for every component: off unless asked for, configured the standard way.

A component turns it on with its ``--tracing`` flag (:func:`add_tracing_flag`; or
``PREHEAT_TRACING=true`` in its environment, as the chart sets it); everything else
comes from the standard ``OTEL_*`` environment variables, read by the OpenTelemetry SDK itself:
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; OTLP over gRPC,
default ``localhost:4317``), ``OTEL_EXPORTER_OTLP_INSECURE``, ``OTEL_TRACES_SAMPLER`` and
``OTEL_TRACES_SAMPLER_ARG`` (default ``parentbased_always_on``; ``parentbased_traceidratio``
with ``0.01`` samples 1%), ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_BSP_*`` (the batch span processor), ``OTEL_SDK_DISABLED=true`` (off, whatever the flag).

Off, :func:`setup_tracing` returns ``None`` and every hook is one ``is None`` test: no span,
no attribute, no context is built. No global tracer provider is installed: the provider
belongs to the process's ``main`` and is shut down (its spans flushed) there.

W3C trace context (``traceparent``, ``tracestate``) is read from HTTP headers and gRPC
metadata alike (:meth:`Tracing.extract`: any mapping of lower-case keys) and written into
gRPC metadata for the next hop (:meth:`Tracing.metadata`).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

SDK_DISABLED = "OTEL_SDK_DISABLED"
TRACEPARENT = "traceparent"

_PROPAGATOR = TraceContextTextMapPropagator()


TRACING_ENV = "PREHEAT_TRACING"


def tracing_from_env(environ: Mapping[str, str]) -> bool:
    """``PREHEAT_TRACING`` turns ``--tracing`` on (``true`` or ``1``): how the chart turns it
    on in the worker pods the operator makes, whose flags it does not write."""
    return environ.get(TRACING_ENV, "").strip().lower() in ("1", "true")


def add_tracing_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--tracing",
        action="store_true",
        default=tracing_from_env(os.environ),
        help="export OpenTelemetry traces (OTLP/gRPC; env PREHEAT_TRACING=true); configured "
        "by the standard OTEL_* variables: OTEL_EXPORTER_OTLP_ENDPOINT, "
        "OTEL_TRACES_SAMPLER(_ARG), OTEL_SERVICE_NAME, ... (off by default)",
    )


@dataclass(frozen=True)
class Clock:
    """Maps ``time.perf_counter()`` readings to the epoch nanoseconds spans carry: spans
    are often recorded after the fact, from times the code measured anyway."""

    epoch_ns: int
    pc: float

    @classmethod
    def now(cls) -> Clock:
        return cls(time.time_ns(), time.perf_counter())

    def ns(self, pc: float) -> int:
        return self.epoch_ns + int((pc - self.pc) * 1e9)


class Tracing:
    """A process's tracer, with W3C propagation in and out."""

    def __init__(self, provider: TracerProvider, instrumentation: str) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(instrumentation)

    @staticmethod
    def extract(carrier: Mapping[str, str]) -> Context | None:
        """The remote parent in ``carrier`` (HTTP headers, gRPC metadata; keys lower-case),
        or None when it names none (or a malformed one: a new trace starts)."""
        if TRACEPARENT not in carrier:
            return None
        ctx = _PROPAGATOR.extract(carrier)
        if not trace.get_current_span(ctx).get_span_context().is_valid:
            return None
        return ctx

    @staticmethod
    def metadata(span: Span) -> tuple[tuple[str, str], ...]:
        """gRPC metadata carrying ``span`` as the next hop's parent: W3C ``traceparent``
        (and ``tracestate`` when it has one), written directly (on every proxied request,
        sampled or not, so that the worker follows the router's decision)."""
        ctx = span.get_span_context()
        parent = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
        if ctx.trace_state:
            return (("traceparent", parent), ("tracestate", ctx.trace_state.to_header()))
        return (("traceparent", parent),)

    def shutdown(self) -> None:
        """Flushes what is buffered and stops the exporter (bounded by the SDK's timeouts)."""
        self.provider.shutdown()


def setup_tracing(
    enabled: bool, service: str, exporter: SpanExporter | None = None
) -> Tracing | None:
    """The process's tracing, or None when off (no flag, or ``OTEL_SDK_DISABLED=true``).

    ``service`` names the process unless ``OTEL_SERVICE_NAME`` does; ``exporter``: where
    spans go (tests), else OTLP over gRPC as the ``OTEL_EXPORTER_OTLP_*`` variables say.
    """
    if not enabled or os.environ.get(SDK_DISABLED, "").strip().lower() == "true":
        return None
    attrs = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service}
    provider = TracerProvider(resource=Resource.create(attrs))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Tracing(provider, f"preheat.{service}")
