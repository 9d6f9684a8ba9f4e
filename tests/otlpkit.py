"""An OTLP/gRPC trace receiver in the test process (the collector's service definition from
``opentelemetry-proto``), and the received spans in a shape tests can read. Shared by
tests/tracing, tests/dashboards and the vLLM tier (tests/ is on sys.path through its
conftest.py)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: tuple[tuple[str, dict[str, Any]], ...]
    error: str  # the status message of an ERROR span, else ""
    is_error: bool


def _value(v: common_pb2.AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[Span] = []

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        got = []
        for rs in request.resource_spans:
            service = str(_attrs(rs.resource.attributes).get("service.name", ""))
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(
                        Span(
                            service=service,
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            attributes=_attrs(s.attributes),
                            events=tuple((e.name, _attrs(e.attributes)) for e in s.events),
                            error=s.status.message,
                            is_error=s.status.code == s.status.STATUS_CODE_ERROR,
                        )
                    )
        with self._lock:
            self._spans.extend(got)
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, pred: Callable[[list[Span]], bool], timeout_s: float) -> list[Span]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            spans = self.spans()
            if pred(spans):
                return spans
            time.sleep(0.1)
        names = sorted({(s.service, s.name) for s in self.spans()})
        raise AssertionError(f"timed out waiting for spans; received {names}")


def serve_receiver() -> Iterator[tuple[str, Receiver]]:
    """A receiver on an ephemeral loopback port: (endpoint URL for OTEL_*, receiver)."""
    receiver = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", receiver
    finally:
        server.stop(grace=None)


def otel_env(endpoint: str, sampler: str = "parentbased_always_on") -> dict[str, str]:
    """This process's environment for a traced child exporting to ``endpoint`` at once
    (100 ms batches): tracing not disabled, the service names the child's own."""
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_TRACES_SAMPLER": sampler,
    }
    env.pop("OTEL_SDK_DISABLED", None)
    env.pop("OTEL_SERVICE_NAME", None)
    return env


def by_name(spans: list[Span], name: str) -> list[Span]:
    return [s for s in spans if s.name == name]
