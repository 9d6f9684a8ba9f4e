"""Where a tracing vLLM worker sends vLLM's own request spans (the vLLM tier's
test_vllm_tracing.py checks they arrive under the request's traceparent)."""

from __future__ import annotations

from preheat.worker.engines import vllm_traces_endpoint


def test_vllms_spans_go_where_the_worker_exports_and_only_when_it_traces() -> None:
    both = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://traces:4317",
    }
    assert vllm_traces_endpoint(True, both) == "http://traces:4317"
    assert vllm_traces_endpoint(True, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}) == (
        "http://c:4317"
    )
    assert vllm_traces_endpoint(True, {}) == "http://localhost:4317"
    assert vllm_traces_endpoint(False, both) == ""
    assert vllm_traces_endpoint(True, {**both, "OTEL_SDK_DISABLED": "true"}) == ""
