"""The ``same-region`` filter (the geography benchmark's local-only baseline)."""

from __future__ import annotations

from dataclasses import replace

from routingkit import COST, NOW, make_endpoint

from preheat.core.routing.config import DEFAULT_FILTERS, SchedulerConfig
from preheat.core.routing.plugins.base import ScoreInput
from preheat.core.routing.plugins.registry import FILTERS
from preheat.core.routing.scheduler import SchedulerState, schedule
from preheat.core.routing.types import Endpoint, RequestInfo, RoutingContext

EAST = make_endpoint("east-0", region="us-east", queue=50)
WEST = make_endpoint("west-0", region="eu-west")
ASIA = make_endpoint("asia-0", region="ap-south")


def ctx(region: str) -> RoutingContext:
    req = RequestInfo("r1", prompt_tokens=100, client_region=region)
    return RoutingContext(now=NOW, request=req, endpoints=(EAST, WEST, ASIA))


def kept(region: str, endpoints: tuple[Endpoint, ...] = (EAST, WEST, ASIA)) -> list[str]:
    c = replace(ctx(region), endpoints=endpoints)
    out = FILTERS["same-region"].filter(ScoreInput(c, endpoints, COST, SchedulerConfig()))
    return [e.id for e in out]


def test_keeps_the_client_region_only() -> None:
    assert kept("us-east") == ["east-0"]
    assert kept("eu-west") == ["west-0"]


def test_keeps_all_without_a_client_region_or_without_a_local_endpoint() -> None:
    assert kept("") == ["east-0", "west-0", "asia-0"]
    assert kept("sa-east") == ["east-0", "west-0", "asia-0"]
    assert kept("us-east", endpoints=(WEST, ASIA)) == ["west-0", "asia-0"]


def test_local_only_keeps_a_loaded_local_endpoint_that_preheat_spills_from() -> None:
    local_only = SchedulerConfig(filters=(*DEFAULT_FILTERS, "same-region"))
    rtt = {"us-east": {"eu-west": 80.0, "ap-south": 200.0}}
    c = replace(ctx("us-east"), region_rtt_ms=rtt)
    d, _ = schedule(c, local_only, COST, SchedulerState())
    assert d.endpoint is not None
    assert d.endpoint.id == "east-0"
    d, _ = schedule(c, SchedulerConfig(), COST, SchedulerState())
    assert d.endpoint is not None
    assert d.endpoint.id == "west-0"  # 50 queued locally cost more than 80 ms of RTT
    assert d.reason == "spill-over"
