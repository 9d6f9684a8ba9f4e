"""Router and worker spans of the requests that go wrong: a retried request shows both
attempts, a rejected one the decision that refused it, a cancelled one the cancel; tracing off
records nothing. Spans go to an in-memory exporter (the OTLP path: tests/tracing)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from frontendkit import eventually, gen, router, words, workers
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import StatusCode

from preheat.core.routing.admission import AdmissionConfig
from preheat.process.tracing import Tracing, setup_tracing


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def events(span: ReadableSpan) -> list[str]:
    return [e.name for e in span.events]


async def test_a_retried_request_shows_both_attempts(
    traced: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = traced
    frozen = {"id": "frozen", "engine": {"time_scale": 50.0}}  # no first token in time
    async with (
        workers([frozen, {"id": "healthy"}]) as ws,
        router([w.endpoint for w in ws], tracing=tracing, first_token_timeout_s=0.3) as r,
    ):
        r.server.store.inject_rtt("frozen", 0.1)  # the frozen one looks best
        r.server.store.inject_rtt("healthy", 400.0)
        chunks = await r.generate(gen(words(1500, "retry"), 2), timeout=20)
        assert chunks[-1].worker_id == "healthy"
        await eventually(lambda: bool(named(exporter.get_finished_spans(), "router.request")))
    spans = exporter.get_finished_spans()
    schedules = sorted(named(spans, "router.schedule"), key=lambda s: s.start_time or 0)
    assert [s.attributes["dev.preheat.endpoint"] for s in schedules] == ["frozen", "healthy"]
    assert [s.attributes["dev.preheat.attempt"] for s in schedules] == [1, 2]
    # the healthy one was the alternate of the first decision
    assert any("healthy=" in a for a in schedules[0].attributes["dev.preheat.alternates"])
    calls = sorted(named(spans, "router.upstream"), key=lambda s: s.start_time or 0)
    assert [c.attributes["dev.preheat.endpoint"] for c in calls] == ["frozen", "healthy"]
    assert calls[0].status.status_code is StatusCode.ERROR
    assert calls[0].attributes["dev.preheat.retrying"] is True
    assert "first-token timeout" in (calls[0].status.description or "")
    assert calls[1].status.status_code is StatusCode.UNSET
    (root,) = named(spans, "router.request")
    assert root.attributes["dev.preheat.outcome"] == "ok"
    assert {s.context.trace_id for s in spans if s.name.startswith("router.")} == {
        root.context.trace_id
    }


async def test_a_rejected_request_shows_the_decision(
    traced: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = traced
    async with (
        workers([{"id": "w-1"}]) as ws,
        router(
            [w.endpoint for w in ws],
            tracing=tracing,
            admission=AdmissionConfig(default_ttft_target_ms=0, max_in_flight=1),
        ) as r,
    ):
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await r.generate(gen(words(3000), 2, ttft_deadline_ms=1), timeout=30)
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        await eventually(lambda: bool(named(exporter.get_finished_spans(), "router.request")))
        spans = exporter.get_finished_spans()
        (schedule,) = named(spans, "router.schedule")
        assert schedule.status.status_code is StatusCode.ERROR
        assert schedule.attributes["dev.preheat.reason"] == "rejected"
        assert "dev.preheat.endpoint" not in (schedule.attributes or {})
        (root,) = named(spans, "router.request")
        assert root.attributes["dev.preheat.outcome"] == "rejected"
        assert not named(spans, "router.upstream")  # never sent

        # over the in-flight bound: the admission span says so
        exporter.clear()
        long = asyncio.create_task(r.generate(gen(words(8), 400), timeout=30))
        await eventually(lambda: r.server.dispatcher.busy == 1, 10)
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await r.generate(gen(words(8, "b"), 2), timeout=10)
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        long.cancel()
        await asyncio.gather(long, return_exceptions=True)
        await eventually(lambda: len(named(exporter.get_finished_spans(), "router.request")) == 2)
    admissions = named(exporter.get_finished_spans(), "router.admission")
    refused = [a for a in admissions if a.attributes["dev.preheat.admitted"] is False]
    assert len(refused) == 1
    assert refused[0].status.status_code is StatusCode.ERROR
    assert "in flight" in str(refused[0].attributes["dev.preheat.reason"])


async def test_a_cancelled_request_shows_the_cancel_in_router_and_worker(
    traced: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = traced
    async with workers([{"id": "w-1", "engine": {"time_scale": 5.0}}]) as ws:
        ws[0].server.tracing = tracing
        async with router([w.endpoint for w in ws], tracing=tracing) as r:
            call = r.inference.Generate(gen(words(8), 2000), timeout=30)
            first = await asyncio.wait_for(call.read(), 20)
            assert first.token_ids
            call.cancel()

            def ended() -> bool:
                done = {s.name for s in exporter.get_finished_spans()}
                return {"router.request", "worker.generate"} <= done

            await eventually(ended, 10)
    spans = exporter.get_finished_spans()
    (root,) = named(spans, "router.request")
    assert "cancelled" in events(root)
    assert root.attributes["dev.preheat.outcome"] == "cancelled"
    (worker,) = named(spans, "worker.generate")
    assert "cancelled" in events(worker)
    (upstream,) = named(spans, "router.upstream")
    assert worker.parent is not None
    assert worker.parent.span_id == upstream.context.span_id


def test_tracing_is_off_without_the_flag_and_with_the_sdk_disabled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert setup_tracing(False, "preheat-router") is None
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert setup_tracing(True, "preheat-router") is None


def test_a_malformed_traceparent_starts_a_new_trace() -> None:
    assert Tracing.extract({"traceparent": "00-zz-yy-01"}) is None
    assert Tracing.extract({}) is None
    good = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    assert Tracing.extract({"traceparent": good}) is not None


OPENMETRICS = "application/openmetrics-text; version=1.0.0"


async def test_ttft_and_e2e_buckets_carry_the_trace_as_an_exemplar(
    traced: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = traced
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], tracing=tracing) as r,
    ):
        await r.generate(gen(words(16), 3))
        async with r.http.get(r.url + "/metrics", headers={"Accept": OPENMETRICS}) as resp:
            assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
            text = await resp.text()
        async with r.http.get(r.url + "/metrics") as resp:  # no Accept: the text format
            plain = await resp.text()
    (root,) = named(exporter.get_finished_spans(), "router.request")
    trace_id = format(root.context.trace_id, "032x")
    for metric in ("preheat_router_ttft_seconds_bucket", "preheat_router_e2e_seconds_bucket"):
        lines = [ln for ln in text.splitlines() if ln.startswith(metric) and " # {" in ln]
        assert len(lines) == 1, (metric, lines)
        assert f'trace_id="{trace_id}"' in lines[0]
    assert text.endswith("# EOF\n")
    assert text.count("# EOF") == 1
    assert " # {" not in plain
    assert "# EOF" not in plain


async def test_no_exemplar_without_tracing() -> None:
    async with workers([{"id": "w-1"}]) as ws, router([w.endpoint for w in ws]) as r:
        await r.generate(gen(words(16), 3))
        async with r.http.get(r.url + "/metrics", headers={"Accept": OPENMETRICS}) as resp:
            text = await resp.text()
    assert "preheat_router_ttft_seconds_bucket" in text
    assert " # {" not in text


async def test_an_unsampled_request_records_nothing_and_the_worker_follows() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider, "preheat.test")
    try:
        async with workers([{"id": "w-1"}]) as ws:
            ws[0].server.tracing = tracing
            async with router([w.endpoint for w in ws], tracing=tracing) as r:
                chunks = await r.generate(gen(words(16), 3))
                assert chunks[-1].usage.completion_tokens == 3
                async with r.http.get(r.url + "/metrics", headers={"Accept": OPENMETRICS}) as m:
                    text = await m.text()
    finally:
        tracing.shutdown()
    assert exporter.get_finished_spans() == ()
    assert " # {" not in text  # no exemplar points at a trace that was not kept


@pytest.mark.parametrize("sampled", [True, False])
def test_the_metadata_is_what_the_w3c_propagator_writes(sampled: bool) -> None:
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
    from opentelemetry.trace import set_span_in_context as in_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    for state in (TraceState(), TraceState([("vendor", "x1")])):
        flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
        span = NonRecordingSpan(SpanContext(0xAB << 64, 0xCD, True, flags, state))
        want: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(want, in_context(span))
        assert dict(Tracing.metadata(span)) == want


async def test_a_grpc_clients_traceparent_is_the_routers_parent(
    traced: tuple[Tracing, InMemorySpanExporter],
) -> None:
    tracing, exporter = traced
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], tracing=tracing) as r,
    ):
        md = (("traceparent", f"00-{trace_id}-{span_id}-01"),)
        await r.generate(gen(words(16), 2), metadata=md)
        await eventually(lambda: bool(named(exporter.get_finished_spans(), "router.request")))
    (root,) = named(exporter.get_finished_spans(), "router.request")
    assert format(root.context.trace_id, "032x") == trace_id
    assert root.parent is not None
    assert format(root.parent.span_id, "016x") == span_id
    assert root.parent.is_remote


async def test_a_pick_is_a_trace_with_its_schedule_span(
    traced: tuple[Tracing, InMemorySpanExporter],
) -> None:
    from preheat.proto.preheat.v1 import router_pb2

    tracing, exporter = traced
    async with (
        workers([{"id": "w-1"}, {"id": "w-2"}]) as ws,
        router([w.endpoint for w in ws], tracing=tracing) as r,
    ):
        answer = await r.router.Pick(router_pb2.PickRequest(request=gen(words(16))), timeout=10)
        await eventually(lambda: bool(named(exporter.get_finished_spans(), "router.request")))
    spans = exporter.get_finished_spans()
    (root,) = named(spans, "router.request")
    assert root.attributes["dev.preheat.api"] == "pick"
    assert root.attributes["dev.preheat.outcome"] == "ok"
    (schedule,) = named(spans, "router.schedule")
    assert schedule.attributes["dev.preheat.endpoint"] == answer.endpoint.worker_id
    assert schedule.parent is not None
    assert schedule.parent.span_id == root.context.span_id
    assert not named(spans, "router.upstream")  # the client calls the worker itself


async def test_the_openai_passthrough_is_traced_and_sends_traceparent_upstream(
    traced: tuple[Tracing, InMemorySpanExporter],
) -> None:
    from fakeopenai import fake_openai, serve_openai
    from frontendkit import MODEL

    tracing, exporter = traced
    trace_id, span_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    async with fake_openai() as fake, workers([{"id": "w-1"}]) as ws:
        serve_openai(ws[0], fake.port)
        async with router([w.endpoint for w in ws], tracing=tracing) as r:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
            headers = {"traceparent": f"00-{trace_id}-{span_id}-01"}
            async with r.http.post(
                r.url + "/v1/chat/completions", json=body, headers=headers
            ) as resp:
                assert resp.status == 200
                await resp.read()
            await eventually(lambda: bool(named(exporter.get_finished_spans(), "router.request")))
    spans = exporter.get_finished_spans()
    (root,) = named(spans, "router.request")
    assert format(root.context.trace_id, "032x") == trace_id
    (upstream,) = named(spans, "router.upstream")
    assert upstream.attributes["dev.preheat.endpoint"] == "w-1"
    sent = fake.headers[0]["traceparent"]  # the worker's OpenAI API got the upstream span
    assert sent == f"00-{trace_id}-{format(upstream.context.span_id, '016x')}-01"
    assert "first_token" in events(root)
    assert root.attributes["dev.preheat.outcome"] == "ok"
