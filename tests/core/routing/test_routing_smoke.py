"""First checks of schedule(): every policy picks one of the endpoints."""

from __future__ import annotations

import pytest
from routingkit import COST, make_ctx, make_endpoint, make_request, picked

from preheat.core.routing.scheduler import POLICIES, SchedulerConfig, SchedulerState, schedule


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_picks_a_given_endpoint(policy: str) -> None:
    eps = [make_endpoint("w-0", queue=3), make_endpoint("w-1"), make_endpoint("w-2", running=4)]
    ctx = make_ctx(eps, make_request(session="s"))
    d, state = schedule(ctx, SchedulerConfig(policy=policy), COST, SchedulerState())
    assert d.endpoint in eps
    assert d.explanation
    assert isinstance(state, SchedulerState)


def test_preheat_prefers_the_idle_endpoint() -> None:
    eps = [make_endpoint("w-0", queue=3), make_endpoint("w-1")]
    d, _ = schedule(make_ctx(eps), SchedulerConfig(), COST, SchedulerState())
    assert picked(d) == "w-1"
    assert d.reason == "least-latency"
