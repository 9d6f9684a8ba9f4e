"""The ``preheat`` policy end to end through schedule(): stickiness, prefix affinity,
geography, staleness, admission, agreement between replicas, purity.

Cost: 0.1 ms per uncached prompt token; a 1024-token prompt is 102.4 ms of prefill and a
queued request counts as one typical (1024-token) prefill.
"""

from __future__ import annotations

import copy
import dataclasses
import random

import pytest
from routingkit import COST, make_ctx, make_endpoint, make_request, picked

from preheat.core.errors import PreheatError
from preheat.core.routing.hashing import rendezvous
from preheat.core.routing.scheduler import (
    POLICIES,
    REASONS,
    SchedulerConfig,
    SchedulerState,
    predict_ttft_ms,
    schedule,
)
from preheat.core.routing.types import Endpoint, RouteDecision, RoutingContext

CFG = SchedulerConfig()
IDS = ("w-0", "w-1", "w-2")


def run(ctx: RoutingContext, config: SchedulerConfig = CFG) -> RouteDecision:
    d, state = schedule(ctx, config, COST, SchedulerState())
    # preheat carries two things between decisions: the typical request's uncached tokens,
    # and which endpoint it picked when (for ties)
    picks = {d.endpoint.id: 1} if d.endpoint is not None else {}
    assert dataclasses.replace(state, new_tokens_ewma=0.0) == SchedulerState(
        decisions=len(picks), last_picked=picks
    )
    return d


def test_a_typical_request_ahead_is_priced_by_what_was_routed() -> None:
    busy = [make_endpoint("w-0", queue=1), make_endpoint("w-1")]
    req = make_request(prompt_tokens=8192, session="")
    state = SchedulerState()
    first, state = schedule(make_ctx(busy, req), CFG, COST, state)
    assert state.new_tokens_ewma == 8192  # the first routed request sets it
    queue_before = first.candidates[0].terms.get("queue", 0.0)
    for i in range(5):
        _, state = schedule(
            make_ctx(busy, make_request(request_id=f"r{i}", prompt_tokens=8192)), CFG, COST, state
        )
    # w-0's one waiting request now costs a long prefill, not typical_prompt_tokens' (1024)
    d, _ = schedule(make_ctx(busy, req), CFG, COST, state)
    by_id = {c.endpoint.id: c for c in d.candidates}
    weight = dict(CFG.scorers)["queue"]
    assert by_id["w-0"].terms["queue"] == pytest.approx(weight * COST.prefill_ms(8192, 0))
    assert by_id["w-0"].terms["queue"] > queue_before or queue_before == 0.0
    fixed = dataclasses.replace(CFG, typical_prompt_alpha=0.0)
    _, kept = schedule(make_ctx(busy, req), fixed, COST, SchedulerState())
    assert kept.new_tokens_ewma == 0.0  # alpha 0: typical_prompt_tokens stays


def pool(**overrides: Endpoint) -> list[Endpoint]:
    return [overrides.get(i.replace("-", "_"), make_endpoint(i)) for i in IDS]


def session_home(session: str) -> str:
    bound = rendezvous(session, [make_endpoint(i) for i in IDS], 1.25, 4)
    assert bound is not None
    return bound.id


# --- stickiness ------------------------------------------------------------------------
def test_same_session_same_pod_across_requests() -> None:
    home = session_home("alice")
    for i in range(20):
        d = run(make_ctx(pool(), make_request(request_id=f"r-{i}", session="alice")))
        assert picked(d) == home
        assert d.reason == "session"


def test_sessions_spread_over_pods() -> None:
    homes = {picked(run(make_ctx(pool(), make_request(session=f"s-{i}")))) for i in range(30)}
    assert homes == set(IDS)


def load_home(session: str, queue: int) -> list[Endpoint]:
    home = session_home(session)
    return [make_endpoint(i, queue=queue if i == home else 0) for i in IDS]


def test_session_stays_while_within_the_margin_moves_past_it_and_comes_back() -> None:
    req = make_request(session="alice")
    home = session_home("alice")
    # one queued request: 102.4 ms worse than an idle pod, within the 150 ms margin
    d = run(make_ctx(load_home("alice", 1), req))
    assert (picked(d), d.reason) == (home, "session")
    # two: 204.8 ms worse, past the margin: the binding yields
    d = run(make_ctx(load_home("alice", 2), req))
    assert picked(d) != home
    assert d.reason == "session-yield"
    assert f"session's endpoint {home} yields" in d.explanation
    # the pod recovers: the session returns
    d = run(make_ctx(load_home("alice", 0), req))
    assert (picked(d), d.reason) == (home, "session")


def test_larger_margin_holds_the_session_longer() -> None:
    d = run(
        make_ctx(load_home("alice", 2), make_request(session="alice")),
        SchedulerConfig(hotspot_margin_ms=300.0),
    )
    assert (picked(d), d.reason) == (session_home("alice"), "session")


def test_session_keeps_its_pod_when_the_prefix_is_cached_elsewhere_within_margin() -> None:
    home = session_home("alice")
    other = next(i for i in IDS if i != home)
    eps = [make_endpoint(i, cached_blocks=range(1, 65) if i == other else ()) for i in IDS]
    # other saves 102.3 ms of prefill, less than the 150 ms margin
    d = run(make_ctx(eps, make_request(session="alice")))
    assert picked(d) == home


# --- prefix affinity -------------------------------------------------------------------
def test_prefix_affinity_precise() -> None:
    eps = pool(w_1=make_endpoint("w-1", cached_blocks=range(1, 61)))
    d = run(make_ctx(eps, make_request(prompt_tokens=1024)))
    assert (picked(d), d.reason, d.cached_blocks) == ("w-1", "prefix", 60)
    assert d.predicted_ttft_ms == pytest.approx(1 + 0 + 6.4)
    assert "predicted TTFT 7 ms on w-1 (rtt 1, queue 0, prefill 6; 60/64 blocks cached)" in (
        d.explanation
    )
    assert "best alternative" in d.explanation


def test_prefix_affinity_from_history() -> None:
    d = run(make_ctx(pool(), make_request(), history={"w-2": 40, "w-0": 10}))
    assert (picked(d), d.reason, d.cached_blocks) == ("w-2", "prefix", 40)


def test_prefix_affinity_gives_way_to_load() -> None:
    # the cached pod has one queued request (102.4 ms), more than the prefill it saves
    eps = pool(w_1=make_endpoint("w-1", queue=1, cached_blocks=range(1, 33)))
    d = run(make_ctx(eps, make_request()))
    assert picked(d) != "w-1"
    assert d.reason == "least-latency"


def test_zero_weight_disables_a_scorer() -> None:
    eps = pool(w_1=make_endpoint("w-1", cached_blocks=range(1, 61)))
    cfg = SchedulerConfig(scorers=(("queue", 1.0), ("prefix", 0.0), ("rtt", 1.0)))
    picks = {picked(run(make_ctx(eps, make_request(request_id=f"r-{i}")), cfg)) for i in range(20)}
    assert len(picks) > 1  # no longer drawn to w-1


# --- geography -------------------------------------------------------------------------
def geo(local_queue: int) -> list[Endpoint]:
    return [
        make_endpoint("eu-0", region="eu", queue=local_queue),
        make_endpoint("eu-1", region="eu", queue=local_queue),
        make_endpoint("us-0", region="us"),
    ]


def test_local_region_preferred() -> None:
    d = run(make_ctx(geo(0), make_request(region="eu")))
    assert picked(d) in ("eu-0", "eu-1")
    assert d.reason == "least-latency"


def test_remote_region_is_spill_over_when_local_is_saturated() -> None:
    d = run(make_ctx(geo(2), make_request(region="eu")))
    assert (picked(d), d.reason) == ("us-0", "spill-over")
    assert d.predicted_ttft_ms == pytest.approx(60 + 102.4)
    assert "spill-over from region eu to us" in d.explanation


def test_a_session_kept_on_a_remote_endpoint_says_it_spills_over() -> None:
    # a margin wide enough to keep a session on the remote endpoint (RTT ~100 ms)
    cfg = dataclasses.replace(CFG, hotspot_margin_ms=500.0)
    remote = [f"s-{i}" for i in range(40) if rendezvous(f"s-{i}", geo(0), 1.25, 4).id == "us-0"]
    assert remote  # some sessions are homed in the remote region
    d = run(make_ctx(geo(0), make_request(session=remote[0], region="eu")), cfg)
    assert (picked(d), d.reason) == ("us-0", "session")
    assert "spill-over from region eu to us" in d.explanation
    # a session homed locally says nothing of the kind
    local = next(f"s-{i}" for i in range(40) if f"s-{i}" not in remote)
    d = run(make_ctx(geo(0), make_request(session=local, region="eu")), cfg)
    assert (picked(d), d.reason) in (("eu-0", "session"), ("eu-1", "session"))
    assert "spill-over" not in d.explanation


def test_region_rtt_table_and_measured_rtt() -> None:
    req = make_request(region="eu")
    # a 300 ms link: local stays better even with two queued requests
    d = run(make_ctx(geo(2), req, region_rtt_ms={"eu": {"us": 300.0}}))
    assert picked(d) in ("eu-0", "eu-1")
    # a measured RTT beats the table
    eps = [*geo(2)[:2], make_endpoint("us-0", region="us", rtt_ms=20.0)]
    d = run(make_ctx(eps, req, region_rtt_ms={"eu": {"us": 300.0}}))
    assert picked(d) == "us-0"


# --- staleness, kv pressure ------------------------------------------------------------
def test_stale_endpoint_counts_as_saturated() -> None:
    eps = [make_endpoint("w-0", age_s=10.0), make_endpoint("w-1", queue=3)]
    assert picked(run(make_ctx(eps))) == "w-1"
    eps = [make_endpoint("w-0", age_s=None), make_endpoint("w-1", queue=3)]
    assert picked(run(make_ctx(eps))) == "w-1"


def test_all_stale_still_routes_but_predicts_saturation() -> None:
    eps = [make_endpoint("w-0", age_s=10.0, queue=1), make_endpoint("w-1", age_s=20.0)]
    d = run(make_ctx(eps))
    assert picked(d) == "w-1"
    assert d.predicted_ttft_ms > 10_000
    assert "stale metrics" in d.explanation
    d = run(make_ctx(eps, make_request(deadline_ms=2000.0)))
    assert d.reason == "rejected"


def test_a_default_target_is_not_refused_on_stale_figures_alone() -> None:
    # the router's refreshes could not run (its loop stalled): the figures are old, not bad
    eps = [make_endpoint("w-0", age_s=10.0), make_endpoint("w-1", age_s=12.0, queue=1)]
    default = dataclasses.replace(make_request(deadline_ms=2000.0), deadline_is_default=True)
    d = run(make_ctx(eps, default))
    assert picked(d) == "w-0"
    assert d.predicted_ttft_ms > 10_000  # the prediction keeps the penalty (logs, ranking)
    assert "stale metrics" in d.explanation
    # the client's own deadline (or its class's) still refuses stale endpoints
    assert run(make_ctx(eps, make_request(deadline_ms=2000.0))).reason == "rejected"
    # and stale figures that miss the default target on their own refuse it
    full = [make_endpoint("w-0", age_s=10.0, queue=30)]
    d = run(make_ctx(full, default))
    assert d.reason == "rejected"
    assert d.predicted_ttft_ms < 10_000 + 2000  # reported without the penalty
    assert "exceeds the deadline of 2000 ms" in d.explanation


def test_kv_pressure_steers_away_from_a_full_cache() -> None:
    eps = [make_endpoint("w-0", kv=0.99), make_endpoint("w-1", kv=0.5)]
    for i in range(10):
        assert picked(run(make_ctx(eps, make_request(request_id=f"r-{i}")))) == "w-1"


# --- admission and no endpoints --------------------------------------------------------
def test_rejects_when_no_endpoint_can_meet_the_deadline() -> None:
    d = run(make_ctx(pool(), make_request(deadline_ms=50.0)))
    assert d.endpoint is None
    assert d.reason == "rejected"
    assert d.retry_after_s == pytest.approx(0.1)
    assert "exceeds the deadline of 50 ms" in d.explanation


def test_retry_after_grows_with_the_queue() -> None:
    eps = [make_endpoint(i, queue=10) for i in IDS]
    d = run(make_ctx(eps, make_request(deadline_ms=200.0)))
    assert d.reason == "rejected"
    assert d.retry_after_s == pytest.approx((1 + 1024 + 102.4 + 0 - 200) / 1000)


def test_admits_within_the_deadline() -> None:
    d = run(make_ctx(pool(), make_request(deadline_ms=120.0)))
    assert picked(d) in IDS
    assert d.retry_after_s is None


def test_deadline_overrides_the_session_binding() -> None:
    # home has one queued request (within the margin) but cannot meet 150 ms
    d = run(make_ctx(load_home("alice", 1), make_request(session="alice", deadline_ms=150.0)))
    assert picked(d) != session_home("alice")
    assert d.reason == "session-yield"


@pytest.mark.parametrize("policy", POLICIES)
def test_no_endpoints(policy: str) -> None:
    d, _ = schedule(make_ctx([]), SchedulerConfig(policy=policy), COST, SchedulerState())
    assert (d.endpoint, d.reason, d.retry_after_s) == (None, "no-endpoints", 1.0)
    eps = [make_endpoint("w-0", pool="a")]
    d, _ = schedule(make_ctx(eps), SchedulerConfig(policy=policy, pool="b"), COST, SchedulerState())
    assert d.reason == "no-endpoints"
    assert "pool 'b'" in d.explanation


def test_unknown_names_in_an_unvalidated_config_raise() -> None:
    with pytest.raises(PreheatError, match="unknown routing policy"):
        run(make_ctx(pool()), SchedulerConfig(policy="nope"))
    with pytest.raises(PreheatError, match="unknown routing scorer"):
        run(make_ctx(pool()), SchedulerConfig(scorers=(("nope", 1.0),)))
    with pytest.raises(PreheatError, match="unknown routing filter"):
        run(make_ctx(pool()), SchedulerConfig(filters=("nope",)))


# --- replicas agree, determinism, purity -----------------------------------------------
def snapshot(order_seed: int) -> RoutingContext:
    eps = [
        make_endpoint("w-0", queue=1, cached_blocks=range(1, 20), kv=0.85),
        make_endpoint("w-1", running=30, region="eu"),
        make_endpoint("w-2", in_flight=2, region="us", rtt_ms=30.0),
        make_endpoint("w-3", age_s=30.0),
    ]
    random.Random(order_seed).shuffle(eps)
    return make_ctx(eps, make_request(session="bob", region="eu"), history={"w-1": 5})


@pytest.mark.parametrize("policy", POLICIES)
def test_two_replicas_with_equal_snapshots_agree(policy: str) -> None:
    cfg = SchedulerConfig(policy=policy)
    a, sa = schedule(snapshot(1), cfg, COST, SchedulerState(rr_cursor=5))
    b, sb = schedule(snapshot(2), cfg, COST, SchedulerState(rr_cursor=5))
    assert picked(a) == picked(b)
    assert (a.reason, a.predicted_ttft_ms, a.explanation) == (
        b.reason,
        b.predicted_ttft_ms,
        b.explanation,
    )
    assert sa == sb


@pytest.mark.parametrize("policy", POLICIES)
def test_inputs_are_not_mutated_and_calls_repeat(policy: str) -> None:
    ctx = snapshot(0)
    cfg = SchedulerConfig(policy=policy)
    state = SchedulerState(rr_cursor=3, seed=7)
    before = (copy.deepcopy(ctx), copy.deepcopy(cfg), copy.deepcopy(state))
    first = schedule(ctx, cfg, COST, state)
    assert (ctx, cfg, state) == before
    assert schedule(ctx, cfg, COST, state) == first


def test_reasons_are_documented() -> None:
    for i in range(40):
        req = make_request(request_id=f"r-{i}", session="s" if i % 2 else "", region="eu")
        d = run(make_ctx(snapshot(i).endpoints, req, history={"w-1": i % 3}))
        assert d.reason in REASONS


def test_idle_ties_spread_requests_without_a_session() -> None:
    picks = {picked(run(make_ctx(pool(), make_request(request_id=f"r-{i}")))) for i in range(30)}
    assert picks == set(IDS)


def test_predict_ttft_matches_the_decision() -> None:
    ctx = snapshot(0)
    d = run(ctx)
    assert d.endpoint is not None
    assert predict_ttft_ms(d.endpoint, ctx, COST, CFG) == pytest.approx(d.predicted_ttft_ms)
    by_id = {c.endpoint.id: c for c in d.candidates}
    assert set(by_id) == {e.id for e in ctx.endpoints if e.id != "w-3"}  # w-3 is stale
    assert set(by_id[d.endpoint.id].terms) == {
        "queue",
        "prefix",
        "rtt",
        "kv-pressure",
        "session",
        "decode-interference",
    }
