"""``spec.traffic``: SLO classes and tenants, validated with every problem at once, into the
pool's frozen config and the CRD."""

from __future__ import annotations

from typing import Any

from preheat.api.pool import crd, to_config, validate_spec
from preheat.api.traffic import parse_traffic, traffic_mapping

GOOD: dict[str, Any] = {
    "defaultClass": "standard",
    "classes": [
        {"name": "interactive", "ttftMs": 500, "priority": 0, "sheddable": False, "maxQueue": 8},
        {
            "name": "batch",
            "ttftMs": 20000,
            "priority": 2,
            "degrade": {"fallbackPool": "small", "maxTokens": 64},
        },
        {"name": "standard", "ttftMs": 2000},
    ],
    "tenants": [
        {"name": "demo", "requestsPerSecond": 1, "requestBurst": 2},
        {"name": "etl", "tokensPerMinute": 60000, "defaultClass": "batch"},
        {"name": "acme", "weight": 3},
        {"name": "*", "requestsPerSecond": 50, "weight": 0.5},
    ],
}


def _spec(traffic: Any) -> dict[str, Any]:
    return {"model": {"name": "m"}, "replicas": {"max": 2}, "traffic": traffic}


def test_a_good_traffic_section_becomes_the_pools_frozen_classes_and_round_trips() -> None:
    cfg = to_config(_spec(GOOD), name="p", namespace="")
    t = cfg.traffic
    assert [c.name for c in t.classes] == ["interactive", "batch", "standard"]
    assert t.default_class == "standard"
    batch = t.get("batch")
    assert batch is not None
    assert (batch.priority, batch.fallback_pool, batch.degraded_max_tokens) == (2, "small", 64)
    interactive = t.get("interactive")
    assert interactive is not None
    assert (interactive.sheddable, interactive.max_queue) == (False, 8)
    demo = t.quota("demo")
    assert demo is not None
    assert (demo.requests_per_s, demo.request_depth) == (1, 2)
    # weights: the entry's, the '*' entry's for an unlisted tenant, else 1
    assert (t.weight("acme"), t.weight("demo"), t.weight("someone-else")) == (3.0, 1.0, 0.5)
    assert parse_traffic({"classes": [{"name": "a", "ttftMs": 1}]})[0].weight("acme") == 1.0
    again, problems = parse_traffic(traffic_mapping(t))
    assert problems == []
    assert again == t


def test_the_first_class_is_the_default_when_none_is_named() -> None:
    t, problems = parse_traffic(
        {"classes": [{"name": "a", "ttftMs": 1}, {"name": "b", "ttftMs": 2}]}
    )
    assert problems == []
    assert t.default_class == "a"


def test_every_problem_of_a_bad_traffic_section_is_listed_at_once() -> None:
    bad = {
        "defaultClass": "gold",
        "classes": [
            {"name": "a", "ttftMs": -5, "priority": 7},
            {"name": "a", "ttftMs": 100, "shed": True},
        ],
        "tenants": [
            {"name": "demo", "requestBurst": 2, "defaultClass": "silver"},
            {"name": "demo", "requestsPerSecond": 1},
            {"name": "idle"},
            {"name": "zero", "weight": 0},
            {"name": "huge", "weight": 5000, "requestsPerSecond": 1},
        ],
    }
    spec, problems = validate_spec(_spec(bad))
    assert spec is None
    text = "\n".join(problems)
    for expected in (
        "traffic.classes[0].ttftMs: input should be greater than 0",
        "traffic.classes[0].priority: input should be less than or equal to 2",
        "traffic.classes[1].shed: unknown field",
        "traffic.classes: 'a' is declared more than once",
        "traffic.defaultClass 'gold' is not one of the classes (a)",
        "traffic.tenants[0].defaultClass 'silver' is not one of the classes (a)",
        "traffic.tenants[0]: requestBurst needs requestsPerSecond",
        "traffic.tenants[1]: tenant 'demo' is listed more than once",
        "traffic.tenants[2]: set requestsPerSecond, tokensPerMinute, weight or defaultClass",
        "traffic.tenants[3].weight: input should be greater than 0 (got 0)",
        "traffic.tenants[4].weight: input should be less than or equal to 1000 (got 5000)",
    ):
        assert expected in text, f"missing {expected!r} in:\n{text}"
    # the router's parser says the same
    _, router_problems = parse_traffic(bad)
    assert "traffic.tenants[1]: tenant 'demo' is listed more than once" in router_problems


def test_the_crd_carries_the_traffic_schema() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    traffic = schema["properties"]["spec"]["properties"]["traffic"]
    klass = traffic["properties"]["classes"]["items"]
    assert set(klass["required"]) == {"name", "ttftMs"}
    assert {"priority", "sheddable", "degrade", "maxQueue"} <= set(klass["properties"])
    tenant = traffic["properties"]["tenants"]["items"]["properties"]
    assert {"requestsPerSecond", "requestBurst", "tokensPerMinute", "tokenBurst"} <= set(tenant)
    assert (tenant["weight"]["minimum"], tenant["weight"]["exclusiveMinimum"]) == (0, True)


def test_the_response_cache_is_off_unless_enabled_and_round_trips() -> None:
    off, problems = parse_traffic({"classes": [{"name": "a", "ttftMs": 1}]})
    assert problems == []
    assert not off.cache.enabled
    on, problems = parse_traffic(
        {"responseCache": {"enabled": True, "ttlSeconds": 30, "maxBytes": 1 << 20}}
    )
    assert problems == []
    assert (on.cache.enabled, on.cache.ttl_s, on.cache.max_bytes) == (True, 30, 1 << 20)
    assert not on.cache.share_tenants
    again, _ = parse_traffic(traffic_mapping(on))
    assert again == on
    _, bad = parse_traffic({"responseCache": {"enabled": True, "ttlSeconds": 0, "maxBytes": 5}})
    assert any("responseCache.ttlSeconds" in p for p in bad)
    assert any("responseCache.maxBytes" in p for p in bad)
