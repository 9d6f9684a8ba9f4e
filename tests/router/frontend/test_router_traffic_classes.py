"""Traffic classes at the router (issue 18, item 1): a request names its class by header,
body field or gRPC field (else its tenant's or the pool's default); an unknown class is a
400 / INVALID_ARGUMENT naming the known ones; the class's priority is what reaches the
worker; every request's outcome and TTFT are counted by class."""

from __future__ import annotations

import dataclasses
from typing import Any

import grpc
import pytest
from frontendkit import gen, router, workers

from preheat.core import metric_names as mn
from preheat.core.promtext import parse_samples
from preheat.core.traffic.classes import TenantQuota, Traffic, TrafficClass
from preheat.proto.preheat.v1 import inference_pb2
from preheat.router.pools import PoolSpec
from preheat.router.pools.kubernetes import pool_spec
from preheat.router.settings import RoutingBase, parse_routing, pool_settings

TRAFFIC = Traffic(
    classes=(
        TrafficClass(name="interactive", ttft_ms=5000, priority=0, sheddable=False),
        TrafficClass(name="batch", ttft_ms=60_000, priority=2),
    ),
    default_class="interactive",
    tenants=(TenantQuota(name="etl", requests_per_s=100, default_class="batch"),),
)


def _class_counts(text: str) -> dict[tuple[str, str], float]:
    name = mn.ROUTER_CLASS_REQUESTS + "_total"
    return {
        (s.labels[mn.LABEL_SLO_CLASS], s.labels[mn.LABEL_OUTCOME]): s.value
        for s in parse_samples(text, only=(name,))
    }


async def test_the_class_is_named_by_header_body_or_grpc_and_counted_by_class() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], traffic=TRAFFIC, tenant_header="x-tenant") as r,
    ):
        url = r.url + "/v1/completions"
        body: dict[str, Any] = {"prompt": "hello there", "max_tokens": 2}
        async with r.http.post(url, json=body, headers={"x-slo-class": "batch"}) as resp:
            assert resp.status == 200, await resp.text()
        async with r.http.post(url, json={**body, "slo_class": "batch"}) as resp:
            assert resp.status == 200, await resp.text()
        async with r.http.post(url, json=body) as resp:  # the pool's default
            assert resp.status == 200, await resp.text()
        async with r.http.post(url, json=body, headers={"x-tenant": "etl"}) as resp:
            assert resp.status == 200, await resp.text()  # the tenant's default: batch
        await r.generate(gen("over grpc", 2, slo_class="batch"))
        async with r.http.post(url, json=body, headers={"x-slo-class": "gold"}) as resp:
            assert resp.status == 400
            err = (await resp.json())["error"]
            assert "unknown slo_class 'gold' (known: batch, interactive)" in err["message"]
        with pytest.raises(grpc.aio.AioRpcError) as ei:
            await r.generate(gen("over grpc", 2, slo_class="gold"))
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        async with r.http.post(url, json=body, headers={"x-tenant": "mallory"}) as resp:
            assert resp.status == 400
            assert "unknown tenant 'mallory'" in (await resp.json())["error"]["message"]
        async with r.http.get(r.url + "/metrics") as resp:
            text = await resp.text()
        counts = _class_counts(text)
        assert counts[("batch", "ok")] == 4
        assert counts[("interactive", "ok")] == 1
        ttft = mn.ROUTER_CLASS_TTFT_SECONDS + "_count"
        by_class = {
            s.labels[mn.LABEL_SLO_CLASS]: s.value for s in parse_samples(text, only=(ttft,))
        }
        assert by_class == {"batch": 4, "interactive": 1}


async def test_the_class_priority_is_what_the_worker_gets_not_the_clients() -> None:
    async with (
        workers([{"id": "w-1"}]) as ws,
        router([w.endpoint for w in ws], traffic=TRAFFIC) as r,
    ):
        d = r.server.dispatcher
        cases = [
            ("batch", inference_pb2.PRIORITY_INTERACTIVE, inference_pb2.PRIORITY_BATCH, 60_000),
            ("", inference_pb2.PRIORITY_BATCH, inference_pb2.PRIORITY_INTERACTIVE, 5000),
        ]
        for klass, asked, expected, target in cases:
            prep = d.prepare(gen("hello", 2, slo_class=klass, priority=asked))
            assert prep.request.priority == expected
            assert prep.slo_class == (klass or "interactive")
            assert prep.request.slo_class == prep.slo_class
            assert prep.target_ms == target


def test_routing_settings_take_traffic_or_the_old_map_not_both() -> None:
    _, t, _ = parse_routing({"traffic": {"classes": [{"name": "a", "ttftMs": 100, "priority": 0}]}})
    assert t.deadlines_ms == {"a": 100}
    assert t.default_class == "a"
    _, old, _ = parse_routing({"sloClasses": {"b": 200}})
    assert old.deadlines_ms == {"b": 200}
    with pytest.raises(ValueError, match="give traffic or sloClasses, not both") as ei:
        parse_routing(
            {"sloClasses": {"b": 200}, "traffic": {"classes": [{"name": "a", "ttftMs": -1}]}}
        )
    assert "traffic.classes[0].ttftMs" in str(ei.value)  # every problem at once
    # a pool's classes replace the router file's whole
    base = RoutingBase(raw={"sloClasses": {"b": 200}})
    s = pool_settings(base, {"traffic": {"classes": [{"name": "a", "ttftMs": 100}]}}, "p")
    assert s.slo_deadlines_ms == {"a": 100}


def test_an_inference_pools_traffic_reaches_the_routers_pool_settings() -> None:
    obj = {
        "metadata": {"name": "chat", "namespace": "ns"},
        "spec": {
            "model": {"name": "m"},
            "traffic": {"classes": [{"name": "interactive", "ttftMs": 300, "priority": 0}]},
        },
    }
    spec = pool_spec(obj, [], {})
    assert isinstance(spec, PoolSpec)
    s = pool_settings(RoutingBase(), spec.routing, spec.name)
    klass = s.traffic.get("interactive")
    assert klass is not None
    assert klass.priority == 0


async def test_a_traffic_change_loses_nothing_in_flight() -> None:
    async with (
        workers([{"id": "w-1", "engine": {"time_scale": 1.0}}]) as ws,
        router([w.endpoint for w in ws], traffic=TRAFFIC) as r,
    ):
        d = r.server.dispatcher
        call = r.inference.Generate(gen("a long one", 400, slo_class="batch"), timeout=30)
        first = await call.read()
        assert first.request_id
        changed = Traffic(classes=(TrafficClass(name="only", ttft_ms=1000),))
        d.reconfigure(d.scheduler_config, dataclasses.replace(d.config, traffic=changed))
        tokens = len(first.token_ids)
        while (chunk := await call.read()) is not grpc.aio.EOF:
            tokens += len(chunk.token_ids)
        assert tokens == 400  # the request in flight finished whole under the old class
        with pytest.raises(grpc.aio.AioRpcError) as ei:  # new requests see the new classes
            await r.generate(gen("x", 2, slo_class="batch"))
        assert "unknown slo_class 'batch' (known: only)" in (ei.value.details() or "")
