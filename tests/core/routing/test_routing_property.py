"""Property: on any snapshot, schedule() returns one of the given endpoints or a rejection
(with a retry-after), never raises, and repeats itself."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from routingkit import COST, NOW

from preheat.core.routing.scheduler import POLICIES, SchedulerConfig, SchedulerState, schedule
from preheat.core.routing.types import Endpoint, RequestInfo, RoutingContext

BLOCKS = st.integers(min_value=0, max_value=12)
REGIONS = st.sampled_from(["", "eu", "us"])


@st.composite
def endpoint(draw: st.DrawFn, eid: str) -> Endpoint:
    return Endpoint(
        id=eid,
        address=f"{eid}:1",
        pool=draw(st.sampled_from(["", "p"])),
        zone=draw(st.sampled_from(["", "a", "b"])),
        region=draw(REGIONS),
        num_running=draw(st.integers(0, 600)),
        num_waiting=draw(st.integers(0, 600)),
        kv_cache_usage=draw(st.floats(-0.5, 1.5)),
        max_num_seqs=draw(st.integers(1, 512)),
        in_flight=draw(st.integers(0, 100)),
        rtt_ms=draw(st.none() | st.floats(0, 500)),
        metrics_at=draw(st.none() | st.floats(NOW - 60, NOW + 1)),
        cached_blocks=draw(st.none() | st.frozensets(BLOCKS, max_size=12)),
        observed_ttft_ms=draw(st.none() | st.floats(0, 10_000)),
    )


@st.composite
def context(draw: st.DrawFn) -> RoutingContext:
    ids = draw(st.lists(st.sampled_from([f"w-{i}" for i in range(8)]), unique=True, max_size=8))
    eps = tuple(draw(endpoint(i)) for i in ids)
    prompt = draw(st.integers(0, 20_000))
    req = RequestInfo(
        request_id=draw(st.text(max_size=8)),
        prompt_tokens=prompt,
        block_hashes=tuple(draw(st.lists(BLOCKS, max_size=16))),
        session_id=draw(st.sampled_from(["", "s-1", "s-2"])),
        client_region=draw(REGIONS),
        client_zone=draw(st.sampled_from(["", "a"])),
        ttft_deadline_ms=draw(st.none() | st.floats(0, 20_000)),
    )
    history = draw(st.dictionaries(st.sampled_from(ids or ["x"]), st.integers(0, 20)))
    table = draw(st.dictionaries(REGIONS, st.dictionaries(REGIONS, st.floats(0, 300), max_size=3)))
    return RoutingContext(NOW, req, eps, history, table)


@settings(max_examples=200)
@given(
    ctx=context(),
    policy=st.sampled_from(POLICIES),
    cursor=st.integers(0, 10**6),
    pool=st.sampled_from(["", "p"]),
)
def test_schedule_total_on_random_snapshots(
    ctx: RoutingContext, policy: str, cursor: int, pool: str
) -> None:
    cfg = SchedulerConfig(policy=policy, pool=pool)
    state = SchedulerState(rr_cursor=cursor)
    d, new_state = schedule(ctx, cfg, COST, state)
    if d.endpoint is None:
        assert d.reason in ("rejected", "no-endpoints")
        assert d.retry_after_s is not None
        assert d.retry_after_s > 0
    else:
        assert d.endpoint in ctx.endpoints
        assert not pool or d.endpoint.pool == pool
        assert math.isfinite(d.predicted_ttft_ms)
        assert d.predicted_ttft_ms >= 0
        assert 0 <= d.cached_blocks <= len(ctx.request.block_hashes)
        deadline = ctx.request.ttft_deadline_ms
        if policy == "preheat" and deadline is not None:
            assert d.predicted_ttft_ms <= deadline
    assert d.explanation
    assert (d, new_state) == schedule(ctx, cfg, COST, state)
