"""The step clocks on the router's /metrics (``StepClockCollector``): read at scrape time
from each pool's store, so an endpoint's series come and go with its clock."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from preheat.core.routing.types import StepClock
from preheat.router.frontend.metrics import StepClockCollector

STEP = "preheat_router_step_clock_step_seconds"
ERROR = "preheat_router_step_clock_error_seconds"
TRUSTED = "preheat_router_step_clock_trusted"


def scrape(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    """(metric, pool, endpoint) -> value of the step-clock gauges."""
    text = generate_latest(registry).decode()
    return {
        (s.name, s.labels["pool"], s.labels["endpoint"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("preheat_router_step_clock")
    }


def test_each_endpoints_clock_is_a_gauge_while_it_has_one() -> None:
    clocks: dict[str, dict[str, StepClock]] = {
        "chat": {
            "w-1": StepClock(10.0, 8.0, 3.0, 1.0),  # misses by an eighth of a step: trusted
            "w-2": StepClock(10.0, 12.0, 3.0, 2.5),  # by more than a sixth: not trusted
            "w-3": StepClock(10.0, 7.5, 3.0, None),  # nothing checked yet: no error series
        },
        "code": {"c-1": StepClock(10.0, 30.0, 0.0, 0.0)},
    }

    def views() -> list[tuple[str, str, Mapping[str, StepClock]]]:
        return [(pool, f"{pool}-model", c) for pool, c in clocks.items()]

    registry = CollectorRegistry()
    registry.register(StepClockCollector(views))
    got = scrape(registry)
    assert got == {
        (STEP, "chat", "w-1"): 0.008,
        (STEP, "chat", "w-2"): 0.012,
        (STEP, "chat", "w-3"): 0.0075,
        (STEP, "code", "c-1"): 0.03,
        (ERROR, "chat", "w-1"): 0.001,
        (ERROR, "chat", "w-2"): 0.0025,
        (ERROR, "code", "c-1"): 0.0,
        (TRUSTED, "chat", "w-1"): 1.0,
        (TRUSTED, "chat", "w-2"): 0.0,
        (TRUSTED, "chat", "w-3"): 0.0,
        (TRUSTED, "code", "c-1"): 1.0,
    }
    # an endpoint gone from the store, and a pool gone from the router: their series go
    del clocks["chat"]["w-2"]
    del clocks["code"]
    assert {(n, p, e) for n, p, e in scrape(registry)} == {
        (STEP, "chat", "w-1"),
        (STEP, "chat", "w-3"),
        (ERROR, "chat", "w-1"),
        (TRUSTED, "chat", "w-1"),
        (TRUSTED, "chat", "w-3"),
    }
