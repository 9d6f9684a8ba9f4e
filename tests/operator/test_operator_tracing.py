"""The operator with tracing on (kmock tier): each reconcile and each autoscaling decision is
a span with its reason, so a scale-up can be read next to the requests that caused it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kmockkit import (
    NAMESPACE,
    OperatorProcess,
    PreheatKube,
    add_pods,
    create_pool,
    eventually,
    kube_fixture,  # noqa: F401
    no_leaked_tasks_fixture,  # noqa: F401
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from test_operator_autoscaling import NAME, FakeSource, pool

from preheat.operator.options import AutoscalerOptions
from preheat.process.tracing import Tracing


@pytest.fixture(name="exporter")
def exporter_fixture() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture(name="source")
def source_fixture() -> FakeSource:
    return FakeSource()


@pytest.fixture(name="operator")
async def operator_fixture(
    kube: PreheatKube, source: FakeSource, exporter: InMemorySpanExporter
) -> AsyncIterator[OperatorProcess]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider, "preheat.operator-test")
    options = AutoscalerOptions(interval_s=0.2, source_factory=lambda _target: source)
    op = OperatorProcess(autoscaler=options, tracing=tracing)
    try:
        await op.start()
        yield op
    finally:
        await op.stop()
        tracing.shutdown()


def spans(exporter: InMemorySpanExporter, name: str) -> list[dict[str, object]]:
    return [
        {**dict(s.attributes or {}), "_status": s.status.status_code}
        for s in exporter.get_finished_spans()
        if s.name == name
    ]


async def test_reconciles_and_a_scale_up_are_spans_with_their_reasons(
    kube: PreheatKube, operator: OperatorProcess, source: FakeSource, exporter: InMemorySpanExporter
) -> None:
    await create_pool(kube, pool())
    await add_pods(kube, NAMESPACE, NAME, 1, ready=True)
    await eventually(
        lambda: any(s["dev.preheat.cause"] for s in spans(exporter, "operator.autoscale"))
    )
    holds = spans(exporter, "operator.autoscale")
    assert holds[0]["dev.preheat.pool"] == NAME
    assert holds[0]["k8s.namespace.name"] == NAMESPACE
    assert holds[0]["dev.preheat.direction"] == "hold"
    assert "ttft_p95=100/400" in holds[0]["dev.preheat.signals"]  # type: ignore[operator]

    source.ttft_ms = 1200.0  # 3x the target: 1 -> 3 active

    def scaled_up() -> list[dict[str, object]]:
        return [
            s for s in spans(exporter, "operator.autoscale") if s["dev.preheat.direction"] == "up"
        ]

    await eventually(scaled_up)
    up = scaled_up()[0]
    assert (up["dev.preheat.replicas.current"], up["dev.preheat.replicas.desired"]) == (1, 3)
    assert "ttft p95 1200 ms > 400 ms" in str(up["dev.preheat.reason"])
    assert up["dev.preheat.cause"]

    # a span is exported when its reconcile ends: the children's reconcile (creation, or the
    # scale-up's) may still be running when the decision's span is read (it was, once, in
    # CI's fresh-clock run), so wait for it rather than read the exporter at one instant
    await eventually(
        lambda: any(r["dev.preheat.children"] for r in spans(exporter, "operator.reconcile"))
    )
    reconciles = spans(exporter, "operator.reconcile")
    assert {r["dev.preheat.pool"] for r in reconciles} == {NAME}
    assert {r["dev.preheat.outcome"] for r in reconciles} == {"ok"}
    assert all(r["_status"] is not StatusCode.ERROR for r in reconciles)


async def test_a_bad_spec_is_a_degraded_reconcile_span(
    kube: PreheatKube, operator: OperatorProcess, exporter: InMemorySpanExporter
) -> None:
    bad = pool()
    bad["spec"]["replicas"] = {"min": 5, "max": 2}
    await create_pool(kube, bad)

    def degraded() -> list[dict[str, object]]:
        return [
            r
            for r in spans(exporter, "operator.reconcile")
            if r.get("dev.preheat.outcome") == "degraded"
        ]

    await eventually(degraded)
    span = degraded()[0]
    assert span["dev.preheat.problem"] == "InvalidSpec"
    assert span["_status"] is StatusCode.ERROR
