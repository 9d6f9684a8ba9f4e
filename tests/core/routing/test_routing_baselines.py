"""Each baseline policy through schedule()."""

from __future__ import annotations

from collections import Counter

from routingkit import COST, make_ctx, make_endpoint, make_request, picked

from preheat.core.routing.baselines import chwbl_key
from preheat.core.routing.scheduler import SchedulerConfig, SchedulerState, schedule
from preheat.core.routing.types import Endpoint, RequestInfo, RouteDecision

IDS = ("w-0", "w-1", "w-2")


def run(
    policy: str,
    eps: list[Endpoint],
    req: RequestInfo | None = None,
    state: SchedulerState | None = None,
    **cfg: object,
) -> tuple[RouteDecision, SchedulerState]:
    config = SchedulerConfig(policy=policy, **cfg)  # type: ignore[arg-type]
    return schedule(make_ctx(eps, req), config, COST, state or SchedulerState())


def idle() -> list[Endpoint]:
    return [make_endpoint(i) for i in IDS]


def test_round_robin_cycles_in_id_order() -> None:
    state = SchedulerState()
    seen = []
    for _ in range(6):
        d, state = run("round-robin", list(reversed(idle())), state=state)
        seen.append(picked(d))
        assert d.reason == "round-robin"
    assert seen == ["w-0", "w-1", "w-2", "w-0", "w-1", "w-2"]
    assert state.rr_cursor == 6


def test_random_is_deterministic_per_request_and_seed() -> None:
    req = make_request(request_id="x")
    a, _ = run("random", idle(), req)
    b, _ = run("random", idle(), req)
    assert picked(a) == picked(b)
    draws = Counter(
        picked(run("random", idle(), make_request(request_id=f"r-{i}"))[0]) for i in range(300)
    )
    assert set(draws) == set(IDS)
    assert min(draws.values()) > 60
    seeds = {picked(run("random", idle(), req, SchedulerState(seed=s))[0]) for s in range(30)}
    assert seeds == set(IDS)


def test_least_request_counts_running_waiting_and_in_flight() -> None:
    eps = [
        make_endpoint("w-0", running=2),
        make_endpoint("w-1", queue=1),
        make_endpoint("w-2", in_flight=3),
    ]
    d, _ = run("least-request", eps)
    assert (picked(d), d.reason) == ("w-1", "least-request")


def test_p2c_never_picks_the_most_loaded_of_two_and_spreads() -> None:
    eps = [make_endpoint("w-0", running=9), make_endpoint("w-1", running=1)]
    for i in range(20):
        assert picked(run("p2c", eps, make_request(request_id=f"r-{i}"))[0]) == "w-1"
    loads = [make_endpoint("w-0", running=9), make_endpoint("w-1"), make_endpoint("w-2")]
    picks = Counter(
        picked(run("p2c", loads, make_request(request_id=f"r-{i}"))[0]) for i in range(100)
    )
    assert "w-0" not in picks  # the most loaded loses every pair it is drawn into
    assert set(picks) == {"w-1", "w-2"}


def test_chwbl_same_prefix_same_pod_and_walks_past_a_full_one() -> None:
    shared = tuple(range(100, 120))  # a 20-block shared prefix
    reqs = [make_request(request_id=f"r-{i}", blocks=(*shared, i)) for i in range(10)]
    assert len({chwbl_key(r, 8) for r in reqs}) == 1
    first = {picked(run("chwbl", idle(), r)[0]) for r in reqs}
    assert len(first) == 1
    home = first.pop()
    # home over the bound: ceil(1.25 * (8 + 1) / 3) = 4, home has 8
    eps = [make_endpoint(i, running=8 if i == home else 0) for i in IDS]
    d, _ = run("chwbl", eps, reqs[0])
    assert picked(d) != home
    assert d.reason == "chwbl"


def test_chwbl_spreads_different_prefixes() -> None:
    picks = Counter(
        picked(run("chwbl", idle(), make_request(blocks=(i, i + 1)))[0]) for i in range(0, 600, 2)
    )
    assert set(picks) == set(IDS)


def test_prefix_only_follows_the_cache_even_when_loaded() -> None:
    eps = [make_endpoint("w-0"), make_endpoint("w-1", queue=20, cached_blocks=range(1, 65))]
    d, _ = run("prefix-only", eps, make_request())
    assert (picked(d), d.reason, d.cached_blocks) == ("w-1", "prefix-only", 64)
    d, _ = run("preheat", eps, make_request())
    assert picked(d) == "w-0"  # the preheat policy weighs the queue


def test_session_only_sticks_and_falls_back_to_least_request() -> None:
    req = make_request(session="carol")
    home = picked(run("session-only", idle(), req)[0])
    # still there with a queue the preheat policy would avoid (within the load bound)
    eps = [make_endpoint(i, queue=3 if i == home else 0) for i in IDS]
    d, _ = run("session-only", eps, req)
    assert (picked(d), d.reason) == (home, "session-only")
    eps = [make_endpoint("w-0", queue=2), make_endpoint("w-1"), make_endpoint("w-2", queue=1)]
    d, _ = run("session-only", eps, make_request())
    assert picked(d) == "w-1"


def test_baselines_report_a_prediction() -> None:
    eps = [make_endpoint("w-0", queue=1)]
    d, _ = run("round-robin", eps)
    assert d.predicted_ttft_ms == 1 + 102.4 + 102.4 + 0.0
    assert "predicted TTFT 206 ms" in d.explanation
