"""preheat.api.routing: the external scheduler config, validated with every error at once."""

from __future__ import annotations

import pytest

from preheat.api.routing import RoutingConfigSpec, load_routing_config
from preheat.core.errors import ErrorCode, PreheatError
from preheat.core.routing.scheduler import SchedulerConfig


@pytest.mark.parametrize("empty", ["", "# nothing\n", {}])
def test_empty_means_the_preheat_defaults(empty: object) -> None:
    assert load_routing_config(empty) == SchedulerConfig()  # type: ignore[arg-type]
    assert RoutingConfigSpec().to_internal() == SchedulerConfig()


def test_camel_case_yaml() -> None:
    cfg = load_routing_config(
        """
policy: preheat
scorers:
  - {name: queue, weight: 2}
  - {name: prefix}
filters: [fresh]
stalenessSeconds: 2.5
hotspotMarginMs: 80
sessionLoadBound: 1.5
sessionLoadFloor: 2
remoteRegionRttMs: 90
kvPressureThreshold: 0.9
chwblPrefixBlocks: 4
pool: chat
"""
    )
    assert cfg == SchedulerConfig(
        scorers=(("queue", 2.0), ("prefix", 1.0)),
        filters=("fresh",),
        staleness_s=2.5,
        hotspot_margin_ms=80.0,
        session_load_bound=1.5,
        session_load_floor=2,
        remote_region_rtt_ms=90.0,
        kv_pressure_threshold=0.9,
        chwbl_prefix_blocks=4,
        pool="chat",
    )


def test_a_mapping_with_a_baseline_policy() -> None:
    assert load_routing_config({"policy": "p2c"}).policy == "p2c"


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(PreheatError) as info:
        load_routing_config(
            {
                "policy": "fastest",
                "scorers": [
                    {"name": "queue", "weight": -1},
                    {"name": "magic", "weight": 1},
                    {"name": "rtt", "wieght": 2},
                    {"name": "queue"},
                ],
                "filters": ["fresh", "gpu-type"],
                "stalenessSeconds": 0,
                "sessionLoadBound": 0.5,
                "kvPressureThreshold": 1.0,
                "hotspot_margin": 3,
            }
        )
    err = info.value
    assert err.code is ErrorCode.INVALID_ARGUMENT
    msg = err.message
    for part in [
        "policy: unknown policy 'fastest'; known policies: preheat, prefix-only, round-robin",
        "scorers[0].weight: Input should be greater than or equal to 0",
        "scorers[1].name: unknown scorer 'magic'; known scorers: queue, prefix, rtt, "
        "kv-pressure, session",
        "scorers[2].wieght: unknown key",
        "filters: unknown filter(s) 'gpu-type'; known filters: same-pool, fresh",
        "stalenessSeconds: Input should be greater than 0",
        "sessionLoadBound: Input should be greater than or equal to 1",
        "kvPressureThreshold: Input should be less than 1",
        "hotspot_margin: unknown key (known keys: ",
        "scorers[2].wieght: unknown key (known keys: name, weight)",
        "scorers: scorer(s) listed more than once: queue",
    ]:
        assert part in msg, msg
    assert "(10 problem(s))" in msg


def test_duplicate_scorers_and_filters() -> None:
    with pytest.raises(PreheatError) as info:
        load_routing_config({"scorers": [{"name": "queue"}, {"name": "queue"}], "filters": []})
    assert "scorer(s) listed more than once: queue" in info.value.message
    with pytest.raises(PreheatError, match="a filter is listed more than once"):
        load_routing_config({"filters": ["fresh", "fresh"]})


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("policy: [unclosed", "not valid YAML"),
        ("- a\n- b\n", "expected a mapping of keys, got list"),
        ("hotspotMarginMs: .nan", "hotspotMarginMs"),
        ("hotspotMarginMs: abc", "hotspotMarginMs: Input should be a valid number"),
    ],
)
def test_bad_documents(text: str, match: str) -> None:
    with pytest.raises(PreheatError, match=match):
        load_routing_config(text)


def test_the_steering_budget_is_read_bounded_or_turned_off() -> None:
    assert load_routing_config({}).steer_budget_ms == 25.0
    assert load_routing_config({"steerBudgetMs": 40}).steer_budget_ms == 40.0
    assert load_routing_config({"steerBudgetMs": None}).steer_budget_ms is None
    for bad in (-1, "soon", float("inf")):
        with pytest.raises(PreheatError, match="steerBudgetMs"):
            load_routing_config({"steerBudgetMs": bad})


def test_the_ttft_miss_half_life_is_read_and_zero_turns_it_off() -> None:
    assert load_routing_config({}).ttft_error_half_life_s == 2.0
    assert load_routing_config({"ttftErrorHalfLifeSeconds": 0.5}).ttft_error_half_life_s == 0.5
    assert load_routing_config({"ttftErrorHalfLifeSeconds": 0}).ttft_error_half_life_s == 0.0
    for bad in (-1, "soon", float("nan")):
        with pytest.raises(PreheatError, match="ttftErrorHalfLifeSeconds"):
            load_routing_config({"ttftErrorHalfLifeSeconds": bad})
